package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestWaitAndSleepAcrossLeaderElections: on a three-node cluster with R3
// streams, a run waits for an event while the leaders of the run, event and
// wait streams change, resumes once with the event, then sleeps while the
// schedule stream's leader changes, and wakes not before its wake time.
func TestWaitAndSleepAcrossLeaderElections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c, connect := r3Cluster(t) // helpers_test.go

	ships := newCounter()
	at := newStamps()
	def := workflow.New("elect")
	workflow.WaitEvent(def, "paid", func(ctx context.Context, id string) (string, error) { return "paid." + id, nil })
	workflow.Sleep(def, "settle", 2*time.Second, workflow.After("paid"))
	workflow.Step(def, "ship", func(ctx context.Context, id string) (string, error) {
		ships.inc(stepKey(ctx))
		at.set(ctx)
		return workflow.Output[string](ctx, "paid")
	}, workflow.After("settle"))
	w, err := framework.NewWorker(connect(1))
	if err != nil {
		t.Fatal(err)
	}
	workflow.Register(w, def)
	startWorker(t, w)
	fc, err := framework.NewClient(connect(2))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		t.Fatal(err)
	}
	n := streams.MustNames("")
	id := start(t, wc, "elect", "o-1")
	waitStatus(t, wc, id, "paid waiting", func(r *workflow.Run) bool { return r.Step("paid").State == workflow.StepWaiting })
	for _, s := range []string{n.RunStream(), n.EventStream(), n.WaitStream()} {
		c.StepDownStream(t, s)
	}
	testutil.Wait(t, waitLong, "signal after the elections", func() bool {
		_, err := wc.Signal(t.Context(), "paid.o-1", "p-1")
		return err == nil
	})
	r := waitStatus(t, wc, id, "settle sleeping", func(r *workflow.Run) bool { return r.Step("settle").State == workflow.StepSleeping })
	wake := r.Step("settle").WakeAt
	c.StepDownStream(t, n.ScheduleStream())
	c.StepDownStream(t, n.RunStream())
	var done *workflow.Run
	testutil.Wait(t, waitLong, "run final", func() bool {
		var err error
		done, err = wc.Status(t.Context(), id)
		return err == nil && done.Status.Final()
	})
	if done.Status != workflow.RunCompleted || string(done.Step("ship").Output) != `"p-1"` {
		t.Fatalf("run %s (%s), ship %s", done.Status, done.Error, done.Step("ship").Output)
	}
	if k := ships.get(id + "/ship"); k != 1 {
		t.Fatalf("ship ran %d times", k)
	}
	if b := at.get(id + "/ship"); b.Before(wake) {
		t.Fatalf("ship ran %v before the wake time", wake.Sub(b))
	}
}
