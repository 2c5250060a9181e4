package testutil_test

import (
	"testing"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestSetupExistingServer connects to a listening server, ensures the
// topology there, and leaves the server and its streams alone on Close.
func TestSetupExistingServer(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	emb, err := testutil.Setup(t.Context(), srv.ClientURL(), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if emb.Server != nil || emb.URL() != srv.ClientURL() {
		t.Fatalf("Setup with a URL: server %v, URL %q", emb.Server, emb.URL())
	}
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	if nc.ConnectedUrl() != srv.ClientURL() {
		t.Errorf("Connect went to %s", nc.ConnectedUrl())
	}
	nc.Close()
	emb.Close()
	if !emb.Conn.IsClosed() {
		t.Error("connection still open after Close")
	}
	_, js := testutil.JetStream(t, srv)
	if _, err := js.Stream(t.Context(), streams.MustNames("").TaskStream()); err != nil {
		t.Fatalf("the task stream did not survive Close: %v", err)
	}
	if _, err := testutil.Setup(t.Context(), "nats://127.0.0.1:1", streams.Config{}); err == nil {
		t.Fatal("Setup with an unreachable URL succeeded")
	}
}
