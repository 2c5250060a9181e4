package testutil_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestRunServerInProcess(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	if s.Addr() != nil {
		t.Errorf("server listens on %v by default", s.Addr())
	}
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream disabled")
	}
	if filepath.Dir(s.Opts.StoreDir) != filepath.Dir(t.TempDir()) {
		t.Errorf("store %s is not under the test's temp dir", s.Opts.StoreDir)
	}
	nc, js := testutil.JetStream(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := nc.MaxPayload(); got != 1<<20 {
		t.Errorf("default max payload %d", got)
	}
}

func TestServersAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := testutil.RunServer(t), testutil.RunServer(t)
	if a.Opts.StoreDir == b.Opts.StoreDir {
		t.Fatalf("two servers share store %s", a.Opts.StoreDir)
	}
	_, jsa := testutil.JetStream(t, a)
	_, jsb := testutil.JetStream(t, b)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := jsa.CreateStream(ctx, jetstream.StreamConfig{Name: "ONLY_A"}); err != nil {
		t.Fatal(err)
	}
	if _, err := jsb.Stream(ctx, "ONLY_A"); err == nil {
		t.Fatal("stream created on one server is visible on the other")
	}
}

func TestWithMaxPayload(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t, testutil.WithMaxPayload(2048))
	if got := testutil.Connect(t, s).MaxPayload(); got != 2048 {
		t.Fatalf("max payload %d, want 2048", got)
	}
}

func TestRestartServerKeepsStoreAndPort(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t, testutil.WithListen(), testutil.WithStoreDir(t.TempDir()))
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("client URL %q", url)
	}
	reconnected := make(chan struct{}, 1)
	nc := testutil.Connect(t, s, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep", []byte("before")); err != nil {
		t.Fatal(err)
	}

	s2 := testutil.RestartServer(t, s)
	if s2.ClientURL() != url {
		t.Errorf("restarted on %s, was %s", s2.ClientURL(), url)
	}
	testutil.Recv(t, reconnected, 20*time.Second, "client reconnected to the restarted server")
	var info *jetstream.StreamInfo
	testutil.Wait(t, 20*time.Second, "stream back with its message", func() bool {
		st, err := js.Stream(ctx, "KEEP")
		if err != nil {
			return false
		}
		info = st.CachedInfo()
		return info.State.Msgs == 1
	})
	if _, err := js.Publish(ctx, "keep", []byte("after")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
}

func TestStartServerRequiresStoreDir(t *testing.T) {
	t.Parallel()
	_, err := testutil.StartServer(&server.Options{JetStream: true, DontListen: true, NoSigs: true})
	if err == nil || !strings.Contains(err.Error(), "StoreDir") {
		t.Fatalf("StartServer without StoreDir = %v", err)
	}
	// StartServer and ShutdownServer work outside tests.
	s, err := testutil.StartServer(&server.Options{JetStream: true, DontListen: true, NoSigs: true, NoLog: true,
		StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := testutil.ConnectServer(s)
	if err != nil {
		t.Fatal(err)
	}
	if !nc.IsConnected() {
		t.Error("not connected")
	}
	nc.Close()
	testutil.ShutdownServer(s)
	if s.Running() {
		t.Error("server still running after ShutdownServer")
	}
}

// fakeTB records a fatal failure and ends its goroutine like testing.T does.
type fakeTB struct {
	ctx   context.Context
	dir   string
	mu    sync.Mutex
	fatal string
}

func (f *fakeTB) Helper()                  {}
func (f *fakeTB) Cleanup(func())           {}
func (f *fakeTB) TempDir() string          { return f.dir }
func (f *fakeTB) Context() context.Context { return f.ctx }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with a fake TB on its own goroutine and returns the fatal
// message, "" when fn returned normally.
func runFake(t *testing.T, ctx context.Context, fn func(tb testutil.TB)) string {
	t.Helper()
	f := &fakeTB{ctx: ctx, dir: t.TempDir()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	testutil.Recv(t, done, 20*time.Second, "fake test finished")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

func TestWait(t *testing.T) {
	t.Parallel()
	n := 0
	msg := runFake(t, t.Context(), func(tb testutil.TB) {
		testutil.Wait(tb, 5*time.Second, "third call", func() bool { n++; return n == 3 })
	})
	if msg != "" || n != 3 {
		t.Fatalf("Wait: fatal %q after %d calls", msg, n)
	}
	start := time.Now()
	msg = runFake(t, t.Context(), func(tb testutil.TB) {
		testutil.Wait(tb, 50*time.Millisecond, "never", func() bool { return false })
	})
	if !strings.Contains(msg, "timed out after 50ms waiting for: never") {
		t.Fatalf("Wait timeout message %q", msg)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Wait gave up after %v", took)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msg = runFake(t, ctx, func(tb testutil.TB) {
		testutil.Wait(tb, time.Hour, "ended test", func() bool { return false })
	})
	if !strings.Contains(msg, "test ended") {
		t.Fatalf("Wait on an ended test: %q", msg)
	}
}

func TestRecv(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	var got int
	msg := runFake(t, t.Context(), func(tb testutil.TB) { got = testutil.Recv(tb, ch, time.Second, "seven") })
	if msg != "" || got != 7 {
		t.Fatalf("Recv = %d, fatal %q", got, msg)
	}
	msg = runFake(t, t.Context(), func(tb testutil.TB) { testutil.Recv(tb, ch, 20*time.Millisecond, "nothing") })
	if !strings.Contains(msg, "timed out after 20ms waiting for: nothing") {
		t.Fatalf("Recv timeout message %q", msg)
	}
}
