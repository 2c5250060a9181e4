package faulttest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestDelayedTasksSurviveLeaderChanges fires delayed tasks from the schedule
// stream into the task stream (durable sourcing with flow-control acks,
// decision 012) on an R3 cluster while the leaders of the task stream and of
// the schedule stream step down, one after the other, during the firing
// window. Every acknowledged delayed task runs, none early, and every fired
// copy leaves the schedule stream once the task stream stored it.
func TestDelayedTasksSurviveLeaderChanges(t *testing.T) {
	t.Parallel()
	const typ = "fault.sourced"
	n := 300
	if heavy() {
		n = 3000
	}
	names := streams.MustNames("")
	c := testutil.RunCluster(t, 3)
	js, err := jetstream.New(c.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, js, 3)

	l := newLedger()
	var ranCount atomic.Int64
	progress := make(chan struct{}, 1)
	var earlyMu sync.Mutex
	var early []string
	w := newWorker(t, c.Connect(t), framework.WithConcurrency(32),
		framework.WithHooks(framework.Hooks{Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck {
				l.success(task.ID)
			}
		}}))
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		if now := time.Now(); now.Before(task.ScheduledFor) {
			earlyMu.Lock()
			early = append(early, fmt.Sprintf("%s by %v", task.ID, task.ScheduledFor.Sub(now)))
			earlyMu.Unlock()
		}
		if l.ran(task.ID) == 1 {
			ranCount.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		return nil
	}, framework.WithAckWait(5*time.Second))
	start(t, w)

	cl, err := framework.NewClient(c.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// Due over two seconds, starting once every enqueue is acknowledged.
	base := time.Now().Add(5 * time.Second)
	for i := range n {
		if i == n/2 {
			// The delay stream's leader changes while workers move the
			// first half into their schedules.
			c.StepDownStream(t, names.DelayStream())
			t.Logf("stepped down %s after %d of %d enqueued", names.DelayStream(), i, n)
		}
		id := fmt.Sprintf("d-%d", i)
		if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID(id), framework.At(base.Add(time.Duration(i)*2*time.Second/time.Duration(n)))); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
		l.enqueued(id)
	}
	l.enqueueingDone()
	if late := time.Since(base); late > 0 {
		t.Logf("enqueueing ended %v after the first due time", late)
	}

	// Leader changes while the tasks fire: after a quarter, half and three
	// quarters of them ran.
	for i, stream := range []string{names.TaskStream(), names.ScheduleStream(), names.TaskStream()} {
		for ranCount.Load() < int64(n*(i+1)/4) {
			testutil.Recv(t, progress, time.Minute, "delayed tasks running")
		}
		c.StepDownStream(t, stream)
		t.Logf("stepped down %s after %d of %d ran", stream, ranCount.Load(), n)
	}
	waitDone(t, l, 2*time.Minute)
	rep := l.report()
	t.Logf("%v", rep)
	if rep.Lost != 0 || rep.Enqueued != n {
		t.Errorf("lost delayed tasks: %v: %v", rep, rep.LostIDs)
	}
	earlyMu.Lock()
	for _, e := range early {
		t.Errorf("delayed task ran early: %s", e)
	}
	earlyMu.Unlock()
	testutil.Wait(t, time.Minute, "schedule and task streams empty", func() bool {
		for _, name := range []string{names.ScheduleStream(), names.TaskStream()} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			if err != nil || info.State.Msgs != 0 {
				return false
			}
		}
		return true
	})
}
