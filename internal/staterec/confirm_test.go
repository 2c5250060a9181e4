package staterec_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/testutil"
)

// A confirmed write outlasts a bucket that cannot store it yet: it is
// tried again until the bucket exists. A plain write is lost.
func TestWriteConfirmedOutlastsMissingBucket(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	sw, err := staterec.NewWriter(nc, "STATE_T", 16, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	retried := make(chan struct{}, 1)
	sub, err := nc.Subscribe("$KV.STATE_T.sure", func(m *nats.Msg) {
		if m.Header.Get("Jetflow-Record-Try") == "2" {
			select {
			case retried <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	sw.Write("plain", []byte(`{"id":"plain"}`), false)
	sw.WriteConfirmed("sure", []byte(`{"id":"sure"}`))
	testutil.Recv(t, retried, 20*time.Second, "a second try of the confirmed write")

	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "STATE_T"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 30*time.Second, "the confirmed record stored", func() bool {
		e, err := kv.Get(t.Context(), "sure")
		return err == nil && string(e.Value()) == `{"id":"sure"}`
	})
	if _, err := kv.Get(t.Context(), "plain"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the plain write: %v, want it lost", err)
	}
}
