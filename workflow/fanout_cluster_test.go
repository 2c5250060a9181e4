package workflow_test

import (
	"context"
	"os"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestForEachAcrossLeaderElections: on a three-node cluster with R3
// streams, a fan-out runs on two workers on different nodes while the
// leaders of the run and task streams change; the join runs once, with
// every result in item order.
func TestForEachAcrossLeaderElections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	// It failed once in fourteen runs, without a message, and the cause is
	// not found yet: until it is, it runs on demand (JETFLOW_HEAVY=1), not
	// in every CI run. The open question is written in decision 044.
	if os.Getenv("JETFLOW_HEAVY") != "1" {
		t.Skip("set JETFLOW_HEAVY=1: an intermittent failure under investigation (decision 044)")
	}
	const n = 300
	c, connect := r3Cluster(t) // helpers_test.go
	runs := newCounter()
	got := make(chan []int, 2)
	gate := make(chan struct{})
	held := make(chan struct{}, n)
	def := workflow.New("elect-fan", workflow.WithMaxOutputBytes(1<<20))
	workflow.Step(def, "list", listOf(n))
	workflow.ForEach(def, "each", "list", func(ctx context.Context, item int) (int, error) {
		if item >= 100 {
			select {
			case held <- struct{}{}:
			default:
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 2 * item, nil
	}, workflow.MaxParallel(20), workflow.WithTaskOptions(fast))
	workflow.Step(def, "join", joinInto(got, runs), workflow.After("each"))
	for _, node := range []int{0, 1} {
		w, err := framework.NewWorker(connect(node), framework.WithConcurrency(32))
		if err != nil {
			t.Fatal(err)
		}
		workflow.Register(w, def)
		startWorker(t, w)
	}
	fc, err := framework.NewClient(connect(2))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		t.Fatal(err)
	}
	id := start(t, wc, "elect-fan", nil)
	testutil.Recv(t, held, waitLong, "items held past item 100")
	names := streams.MustNames("")
	c.StepDownStream(t, names.RunStream())
	c.StepDownStream(t, names.TaskStream())
	close(gate)
	var done *workflow.Run
	testutil.Wait(t, waitLong, "run final", func() bool {
		var err error
		done, err = wc.Status(t.Context(), id)
		return err == nil && done.Status.Final()
	})
	if done.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", done.Status, done.Error)
	}
	checkDoubled(t, testutil.Recv(t, got, waitLong, "join results"), n)
	if runs.get("join") != 1 {
		t.Errorf("join ran %d times, want 1", runs.get("join"))
	}
}
