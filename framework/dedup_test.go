package framework_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// WithDedup(false) drops the Nats-Msg-Id of immediate tasks without a caller
// ID; the task ID is then derived from the stream sequence on both sides.
func TestEnqueueWithoutDedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cl, err := framework.NewClient(e.nc, framework.WithDedup(false))
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t)
	type seen struct {
		id    string
		msgID string
	}
	got := make(chan seen, 8)
	w.HandleFunc("nodedup.run", func(ctx context.Context, task *framework.Task) error {
		got <- seen{task.ID, task.Header(jetstream.MsgIDHeader)}
		return nil
	})
	startWorker(t, w)

	info, err := cl.Enqueue(t.Context(), "nodedup.run", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.ID, "seq-") || info.Sequence == 0 {
		t.Fatalf("info = %+v, want a seq- ID", info)
	}
	s := testutil.Recv(t, got, 10*time.Second, "first task")
	if s.id != info.ID || s.msgID != "" {
		t.Fatalf("handler saw ID %q with Nats-Msg-Id %q, want %q and none", s.id, s.msgID, info.ID)
	}

	// A caller-supplied ID keeps its dedup header even in this mode.
	first, err := cl.Enqueue(t.Context(), "nodedup.run", nil, framework.WithID("fixed-1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := cl.Enqueue(t.Context(), "nodedup.run", nil, framework.WithID("fixed-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate {
		t.Fatalf("duplicates = %v, %v; want false, true", first.Duplicate, second.Duplicate)
	}
	s = testutil.Recv(t, got, 10*time.Second, "fixed-ID task")
	if s.id != "fixed-1" || s.msgID != "fixed-1" {
		t.Fatalf("handler saw %+v", s)
	}

	// EnqueueMany fills the IDs from the acknowledgements.
	infos, err := cl.EnqueueMany(t.Context(), []framework.TaskSpec{{Type: "nodedup.run"}, {Type: "nodedup.run"}})
	if err != nil {
		t.Fatal(err)
	}
	if infos[0].ID == infos[1].ID || !strings.HasPrefix(infos[1].ID, "seq-") {
		t.Fatalf("batch IDs %q, %q", infos[0].ID, infos[1].ID)
	}
	want := map[string]bool{infos[0].ID: true, infos[1].ID: true}
	for range 2 {
		s := testutil.Recv(t, got, 10*time.Second, "batch task")
		if !want[s.id] {
			t.Fatalf("unexpected task ID %q, want one of %v", s.id, want)
		}
		delete(want, s.id)
	}
}
