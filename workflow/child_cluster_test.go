package workflow_test

import (
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestChildAcrossLeaderElections: on a three-node cluster with R3 streams,
// a parent waits on its child run while the leaders of the run stream and
// the task stream change; the child then completes, and the parent resumes
// once with the child's output.
func TestChildAcrossLeaderElections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c, connect := r3Cluster(t) // helpers_test.go
	runs := newCounter()
	gate := make(chan struct{})
	quote := quoteDef(runs, gate)
	buy := buyDef(runs, quote)
	w, err := framework.NewWorker(connect(1))
	if err != nil {
		t.Fatal(err)
	}
	workflow.Register(w, buy, quote)
	startWorker(t, w)
	fc, err := framework.NewClient(connect(2))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient(fc, buy, quote)
	if err != nil {
		t.Fatal(err)
	}
	id := start(t, wc, "buy", order{ID: "o1", Items: 3})
	waitStatus(t, wc, id, "quote waiting on its child", func(r *workflow.Run) bool {
		return r.Step("quote").State == workflow.StepChildRunning
	})
	testutil.Wait(t, waitLong, "the child's price step running", func() bool { return runs.get("price") > 0 })
	n := streams.MustNames("")
	c.StepDownStream(t, n.RunStream())
	c.StepDownStream(t, n.TaskStream())
	close(gate)
	var done *workflow.Run
	testutil.Wait(t, waitLong, "run final", func() bool {
		var err error
		done, err = wc.Status(t.Context(), id)
		return err == nil && done.Status.Final()
	})
	if done.Status != workflow.RunCompleted || outputInt(t, done, "pay") != 61 {
		t.Fatalf("run %s (%s), pay %s", done.Status, done.Error, done.Step("pay").Output)
	}
	if k := runs.get("pay"); k != 1 {
		t.Errorf("pay ran %d times, want once", k)
	}
}
