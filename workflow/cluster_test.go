package workflow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestReplicatedStream runs fan-out/fan-in workflows on a three-node cluster
// with R3 streams, with the worker and the producer on
// different nodes, so that run documents are also read from replicas that
// may lag behind the leader.
func TestReplicatedStream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	_, connect := r3Cluster(t) // helpers_test.go

	runs := newCounter()
	step := func(ctx context.Context, n int) (int, error) {
		runs.inc(stepKey(ctx))
		return n, nil
	}
	d := workflow.New("replicated")
	workflow.Step(d, "a", step)
	workflow.Step(d, "b", step, workflow.After("a"))
	workflow.Step(d, "c", step, workflow.After("a"))
	workflow.Step(d, "d", func(ctx context.Context, n int) (int, error) {
		runs.inc(stepKey(ctx))
		b, err := workflow.Output[int](ctx, "b")
		if err != nil {
			return 0, err
		}
		cv, err := workflow.Output[int](ctx, "c")
		return b + cv, err
	}, workflow.After("b", "c"))

	w, err := framework.NewWorker(connect(1))
	if err != nil {
		t.Fatal(err)
	}
	workflow.Register(w, d)
	startWorker(t, w)
	fc, err := framework.NewClient(connect(2))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient(fc, d)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = start(t, wc, "replicated", i)
	}
	for i, id := range ids {
		r := wait(t, wc, id)
		var sum int
		if r.Status != workflow.RunCompleted || json.Unmarshal(r.Step("d").Output, &sum) != nil || sum != 2*i {
			t.Fatalf("run %d: %s (%s), d output %s", i, r.Status, r.Error, r.Step("d").Output)
		}
		for _, s := range []string{"a", "b", "c", "d"} {
			if k := runs.get(id + "/" + s); k != 1 {
				t.Errorf("run %d step %s ran %d times", i, s, k)
			}
		}
	}
}
