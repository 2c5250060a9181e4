package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TB is the subset of [testing.TB] the helpers need. Both *testing.T and
// *testing.B satisfy it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// Server is an embedded nats-server together with the options it was started
// with, so that it can be restarted on the same store.
type Server struct {
	*server.Server
	// Opts are the options the server was started with. Do not modify them
	// while the server runs.
	Opts *server.Options
}

// ServerOption adjusts the [server.Options] used by [RunServer].
type ServerOption func(*server.Options)

// WithListen makes the server listen on 127.0.0.1 on a random free port, so
// that other processes (the nats CLI, a worker binary) can connect. By
// default the server does not listen and is reachable only in-process.
func WithListen() ServerOption {
	return func(o *server.Options) {
		o.DontListen = false
		o.Host = "127.0.0.1"
		o.Port = server.RANDOM_PORT
	}
}

// WithStoreDir makes the server keep its JetStream files in dir instead of a
// fresh directory under TempDir. Use it to restart a server on the same store.
func WithStoreDir(dir string) ServerOption {
	return func(o *server.Options) { o.StoreDir = dir }
}

// WithMaxPayload sets the server's max_payload in bytes (default 1 MiB).
func WithMaxPayload(n int32) ServerOption {
	return func(o *server.Options) { o.MaxPayload = n }
}

// RunServer starts an embedded nats-server with JetStream enabled, its store in
// a fresh directory under tb.TempDir, and waits until it is ready. The server
// is shut down when the test ends. Each call starts an independent server.
func RunServer(tb TB, opts ...ServerOption) *Server {
	tb.Helper()
	o := &server.Options{
		JetStream:  true,
		StoreDir:   tb.TempDir(),
		DontListen: true,
		NoLog:      true,
		NoSigs:     true,
		// Keep the embedded server from competing with the code under test.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
	}
	for _, opt := range opts {
		opt(o)
	}
	s, err := StartServer(o)
	if err != nil {
		tb.Fatalf("testutil: start nats-server: %v", err)
	}
	tb.Cleanup(func() { ShutdownServer(s) })
	return &Server{Server: s, Opts: o}
}

// StartServer starts an embedded nats-server with the given options and waits
// up to [ReadyTimeout] for it to accept connections. Callers own the returned server and
// must call [ShutdownServer]. Programs (for example the quickstart) use it
// directly; tests should prefer [RunServer].
//
// A server that cannot start (for example because its client or cluster
// port is taken) fails at once with the server's own reason, which wraps
// [ErrServerFatal].
func StartServer(o *server.Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("testutil: StoreDir must be set (the default is shared under %s)", os.TempDir())
	}
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("testutil: new server: %w", err)
	}
	// The server reports a failed listener through its logger's Fatalf and
	// then never becomes ready; catch it rather than wait out ReadyTimeout.
	fl := &fatalLogger{fatal: make(chan string, 1)}
	s.SetLoggerV2(fl, false, false, false)
	go s.Start()
	deadline := time.Now().Add(ReadyTimeout)
	for {
		if s.ReadyForConnections(100 * time.Millisecond) {
			return s, nil
		}
		select {
		case msg := <-fl.fatal:
			ShutdownServer(s)
			return nil, fmt.Errorf("testutil: nats-server failed to start: %s: %w", msg, ErrServerFatal)
		default:
		}
		if time.Now().After(deadline) {
			ShutdownServer(s)
			return nil, fmt.Errorf("testutil: nats-server not ready after %v", ReadyTimeout)
		}
	}
}

// ErrServerFatal marks a [StartServer] error the server itself reported as
// fatal, such as a port it could not listen on.
var ErrServerFatal = errors.New("testutil: fatal server error")

// fatalLogger drops the server's log lines but keeps the first fatal one:
// the nats-server binary would exit on it, the embedded server only stops
// starting.
type fatalLogger struct {
	fatal chan string
}

func (l *fatalLogger) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

func (*fatalLogger) Noticef(string, ...any) {}
func (*fatalLogger) Warnf(string, ...any)   {}
func (*fatalLogger) Errorf(string, ...any)  {}
func (*fatalLogger) Debugf(string, ...any)  {}
func (*fatalLogger) Tracef(string, ...any)  {}

// ReadyTimeout bounds [StartServer]'s wait for a server to accept
// connections. A node of a cluster with JetStream has taken more than 10 s
// on a busy 2-core machine running other tests; the wait ends as soon as the
// server is ready.
const ReadyTimeout = time.Minute

// ShutdownServer stops s and waits for it to finish.
func ShutdownServer(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// Connect opens a connection to s (in-process when the server does not listen,
// over loopback otherwise) and closes it when the test ends. Extra options are
// appended to jetflow's defaults (unlimited reconnects, 50 ms reconnect wait).
func Connect(tb TB, s *Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := ConnectServer(s.Server, opts...)
	if err != nil {
		tb.Fatalf("testutil: connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// ConnectServer is [Connect] without a test: the caller closes the connection.
func ConnectServer(s *server.Server, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	url := ""
	if s.Addr() != nil {
		url = s.ClientURL()
	} else {
		base = append(base, nats.InProcessServer(s))
	}
	return nats.Connect(url, append(base, opts...)...)
}

// JetStream returns a JetStream context on a new connection to s.
func JetStream(tb TB, s *Server) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc := Connect(tb, s)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("testutil: jetstream: %v", err)
	}
	return nc, js
}

// RestartServer shuts s down and starts a new server with the same options
// (same store directory, same port when it listens). Use it to test recovery.
// The new server is shut down when the test ends.
func RestartServer(tb TB, s *Server) *Server {
	tb.Helper()
	o := s.Opts.Clone()
	if addr, ok := s.Addr().(*net.TCPAddr); ok {
		// Keep the port so clients reconnect to the same URL.
		o.Port = addr.Port
	}
	ShutdownServer(s.Server)
	ns, err := StartServer(o)
	if err != nil {
		tb.Fatalf("testutil: restart nats-server: %v", err)
	}
	tb.Cleanup(func() { ShutdownServer(ns) })
	return &Server{Server: ns, Opts: o}
}

// Wait calls cond until it returns true or timeout passes, checking every
// poll interval (10 ms), and fails the test with msg when time runs out. Use
// it for state that has no event to wait on; prefer channels where they exist.
func Wait(tb TB, timeout time.Duration, msg string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testutil: timed out after %v waiting for: %s", timeout, msg)
		}
		select {
		case <-tick.C:
		case <-tb.Context().Done():
			tb.Fatalf("testutil: test ended while waiting for: %s", msg)
		}
	}
}

// Recv waits for a value on ch for at most timeout and fails the test with msg
// when none arrives.
func Recv[T any](tb TB, ch <-chan T, timeout time.Duration, msg string) T {
	tb.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("testutil: timed out after %v waiting for: %s", timeout, msg)
	}
	var zero T
	return zero
}
