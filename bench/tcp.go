package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// natsServerVersion is the nats-server release the TCP figures are meant to
// run against, the one the module depends on:
//
//	go install github.com/nats-io/nats-server/v2@v2.15.2
const natsServerVersion = "v2.15.2"

// standalone is a nats-server process started by the bench: JetStream on,
// a fresh store directory, listening on a free port of 127.0.0.1.
type standalone struct {
	cmd  *exec.Cmd
	dir  string
	url  string
	exit chan error // the process's exit status, once it ended
}

// findNATSServer returns the path of a nats-server binary: on PATH, else in
// GOBIN, else in GOPATH/bin (default ~/go/bin), where go install puts it.
func findNATSServer() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, d := range filepath.SplitList(gp) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "nats-server")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("bench: no nats-server binary on PATH, in GOBIN or GOPATH/bin; install it with "+
		"go install github.com/nats-io/nats-server/v2@%s, or give a server with -url", natsServerVersion)
}

// startStandalone starts nats-server from binary with JetStream and a file
// store in a new temporary directory, and waits until it accepts
// connections.
func startStandalone(ctx context.Context, binary string, stderr io.Writer) (*standalone, error) {
	if err := checkServerVersion(ctx, binary, stderr); err != nil {
		return nil, err
	}
	return withFreshPorts(func() (*standalone, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		return startServer(ctx, binary, "bench-standalone", port)
	})
}

// startAttempts bounds how often a server or cluster is started again on new
// ports after a process exited at start.
const startAttempts = 3

// withFreshPorts calls start, which picks its ports before starting
// nats-server, until a start does not end in errExitedAtStart: a socket
// elsewhere on the machine can take a picked port before the server listens,
// and the server then exits.
func withFreshPorts[T any](start func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range startAttempts {
		if v, err = start(); !errors.Is(err, errExitedAtStart) {
			break
		}
	}
	return v, err
}

// errExitedAtStart marks a nats-server process that exited before it
// accepted connections, most often because a port of its was taken.
var errExitedAtStart = errors.New("bench: nats-server exited at start")

// checkServerVersion warns when binary is not the release the figures are
// meant for.
func checkServerVersion(ctx context.Context, binary string, stderr io.Writer) error {
	out, err := exec.CommandContext(ctx, binary, "--version").Output()
	if err != nil {
		return fmt.Errorf("bench: %s --version: %w", binary, err)
	}
	if v := strings.TrimSpace(string(out)); !strings.HasSuffix(v, natsServerVersion) {
		fmt.Fprintf(stderr, "bench: warning: %s is %q, the figures are meant for %s\n", binary, v, natsServerVersion)
	}
	return nil
}

// startServer starts nats-server named name from binary on 127.0.0.1:port
// with JetStream, a file store in a new temporary directory and the extra
// arguments, and waits until it accepts connections: a server of that name,
// not another that took the port.
func startServer(ctx context.Context, binary, name string, port int, extra ...string) (_ *standalone, err error) {
	s := &standalone{exit: make(chan error, 1)}
	if s.dir, err = os.MkdirTemp("", "jetflow-bench-tcp-"); err != nil {
		return nil, fmt.Errorf("bench: store dir: %w", err)
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.url = "nats://127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "--server_name", name}, extra...)
	s.cmd = exec.Command(binary, args...)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", binary, err)
	}
	go func() { s.exit <- s.cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		nc, err := nats.Connect(s.url, nats.Timeout(time.Second))
		if err == nil {
			got := nc.ConnectedServerName()
			nc.Close()
			if got == name {
				return s, nil
			}
			err = fmt.Errorf("server %q answers on the port", got)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: nats-server on %s did not accept connections: %w", s.url, err)
		}
		select {
		case err := <-s.exit:
			s.exit <- err
			return nil, fmt.Errorf("%w: %v", errExitedAtStart, err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startCluster starts a cluster of n nats-server processes from binary on
// free ports of 127.0.0.1, routed to each other, and returns them once each
// accepts connections (JetStream needs a moment more to elect its meta
// leader: the first API calls wait for it).
func startCluster(ctx context.Context, binary string, n int, stderr io.Writer) (_ []*standalone, err error) {
	if err := checkServerVersion(ctx, binary, stderr); err != nil {
		return nil, err
	}
	return withFreshPorts(func() ([]*standalone, error) { return startClusterOnce(ctx, binary, n) })
}

func startClusterOnce(ctx context.Context, binary string, n int, extra ...[]string) (_ []*standalone, err error) {
	ports := make([]int, 2*n) // client ports, then cluster ports
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(ports[n+i])
	}
	var servers []*standalone
	defer func() {
		if err != nil {
			stopAll(servers)
		}
	}()
	for i := range n {
		args := []string{"--cluster_name", "bench", "--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		if i < len(extra) {
			args = append(args, extra[i]...)
		}
		s, err := startServer(ctx, binary, "bench-n"+strconv.Itoa(i+1), ports[i], args...)
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// stopAll stops the servers.
func stopAll(servers []*standalone) {
	for _, s := range servers {
		s.stop()
	}
}

// rssOf returns the summed resident set size of the servers' processes in
// bytes (0 where it cannot be read).
func rssOf(servers []*standalone) uint64 {
	var sum uint64
	for _, s := range servers {
		if s.cmd != nil && s.cmd.Process != nil {
			sum += procRSS("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
		}
	}
	return sum
}

// stop ends the server process and removes its store.
func (s *standalone) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.exit:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exit
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tcpEnv returns the env of the figures over TCP, creating it at first use:
// connections to -url, or to a nats-server process the bench starts.
func (e *env) tcpEnv(ctx context.Context) (*env, error) {
	if e.tcp != nil {
		return e.tcp, nil
	}
	url := e.cfg.url
	var s *standalone
	if url == "" {
		bin, err := findNATSServer()
		if err != nil {
			return nil, err
		}
		if s, err = startStandalone(ctx, bin, e.stderr); err != nil {
			return nil, err
		}
		url = s.url
		e.progress("standalone %s on %s (store %s)", bin, url, s.dir)
	}
	t, err := newURLEnv(ctx, e.cfg, e.stderr, url)
	if err != nil {
		if s != nil {
			s.stop()
		}
		return nil, err
	}
	t.server = s
	e.tcp = t
	return t, nil
}

// newURLEnv returns an env whose connections go to url over TCP, with the
// topology ensured there (file storage, one replica).
func newURLEnv(ctx context.Context, cfg config, stderr io.Writer, url string) (_ *env, err error) {
	e := &env{cfg: cfg, stderr: stderr, names: streams.MustNames(""), url: url}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.admin, err = e.connect(); err != nil {
		return nil, err
	}
	if e.js, err = jetstream.New(e.admin); err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	if _, err := streams.Ensure(ctx, e.js, benchConfig); err != nil {
		return nil, fmt.Errorf("bench: ensure topology on %s: %w", url, err)
	}
	if err := framework.EnsureBuckets(ctx, e.js); err != nil {
		return nil, fmt.Errorf("bench: ensure buckets: %w", err)
	}
	if e.stream, err = e.js.Stream(ctx, e.names.TaskStream()); err != nil {
		return nil, fmt.Errorf("bench: task stream: %w", err)
	}
	// The figures purge what they leave; a shared -url server may hold
	// leftovers of an interrupted run on the bench's subjects.
	// A leftover latency task would be read as a sample of the next run.
	for _, typ := range []string{typeDrain, typeRawDrain, typeEnqueue, typeRawEnq, typeBacklog, typeBacklogRef, typeLatency, typeRawLat} {
		if err := e.purge(ctx, e.names.TaskSubject(streams.PriorityNormal, typ)); err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	pad := max(cfg.payloadSize-len(`{"pad":""}`), 0)
	e.payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	return e, nil
}

// figureDrainTCP is the drain figure against the server over TCP.
func (e *env) figureDrainTCP(ctx context.Context, out io.Writer) error {
	t, err := e.tcpEnv(ctx)
	if err != nil {
		return err
	}
	return t.compare(ctx, out, figDrainTCP, t.fresh(t.drainRawWithDedup), t.fresh(t.drainJetflowRun), fint("n", e.cfg.n))
}

// figureLatencyTCP is figureLatencyAt against the server over TCP: the
// server runs in its own process, as in production, instead of sharing the
// bench's processors' run queues and garbage collector with the worker and
// the sender.
func (e *env) figureLatencyTCP(ctx context.Context, out io.Writer, figure string, rate int) error {
	t, err := e.tcpEnv(ctx)
	if err != nil {
		return err
	}
	return t.figureLatencyAt(ctx, out, figure, rate)
}
