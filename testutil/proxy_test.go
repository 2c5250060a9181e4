package testutil_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestProxyCutAndRestore(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	p := testutil.NewProxy(t, srv.Addr().String())

	disconnected := make(chan struct{}, 8)
	reconnected := make(chan struct{}, 8)
	nc, err := nats.Connect(p.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	direct := testutil.Connect(t, srv)
	sub, err := direct.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request("echo", []byte("a"), 5*time.Second); err != nil {
		t.Fatalf("request through proxy: %v", err)
	}

	p.Cut()
	testutil.Recv(t, disconnected, 10*time.Second, "client notices the cut")
	if _, err := nc.Request("echo", []byte("b"), 200*time.Millisecond); err == nil {
		t.Fatal("request went through a cut proxy")
	}
	if nc.IsConnected() {
		t.Fatal("client connected through a cut proxy")
	}

	p.Restore()
	testutil.Recv(t, reconnected, 10*time.Second, "client reconnects after restore")
	if _, err := nc.Request("echo", []byte("c"), 5*time.Second); err != nil {
		t.Fatalf("request after restore: %v", err)
	}
}

// A muted proxy passes what the client sends and drops what the server
// sends, until the next Cut.
func TestProxyMute(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	p := testutil.NewProxy(t, srv.Addr().String())
	nc, err := nats.Connect(p.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	direct := testutil.Connect(t, srv)
	heard := make(chan string, 8)
	sub, err := direct.Subscribe("echo", func(m *nats.Msg) {
		heard <- string(m.Data)
		_ = m.Respond(m.Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}

	p.Mute()
	if _, err := nc.Request("echo", []byte("a"), 300*time.Millisecond); err == nil {
		t.Fatal("a reply came through a muted proxy")
	}
	if got := testutil.Recv(t, heard, 10*time.Second, "the request reaches the server"); got != "a" {
		t.Fatalf("server heard %q", got)
	}

	p.Cut()
	p.Restore()
	testutil.Wait(t, 10*time.Second, "a reply after the cut", func() bool {
		_, err := nc.Request("echo", []byte("b"), time.Second)
		return err == nil
	})
}
