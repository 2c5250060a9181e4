package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestServerRestartLosesNothing restarts a single server on the same store
// while tasks wait in the stream, run in a worker and wait in delay
// schedules. None is lost, the running ones finish, and the delayed ones fire
// after the restart, none before its time.
//
// A repeating schedule ("@every 1s") ticks before the restart and keeps
// ticking after it, each tick running once.
func TestServerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	serverRestart(t, 1)
}

// TestServerRestartLosesNothingPartitioned is the restart on a deployment
// of three task partitions: waiting, running and delayed tasks of every
// partition survive it.
func TestServerRestartLosesNothingPartitioned(t *testing.T) {
	t.Parallel()
	serverRestart(t, 3)
}

func serverRestart(t *testing.T, partitions int) {
	const (
		running = 4
		waiting = 50
		delayed = 20
		delay   = 4 * time.Second
	)
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ensure(t, js, 1, partitions)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	logs := newLogCounter()
	release := make(chan struct{})
	started := make(chan string, running)
	type early struct {
		id          string
		by          time.Duration
		due, before time.Time
	}
	var (
		mu       sync.Mutex
		earlies  []early
		firedAt  = make(map[string]time.Time)
		restarts time.Time
	)
	hooks := framework.WithHooks(framework.Hooks{Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
		if o.Action != framework.ActionAck {
			return
		}
		l.success(task.ID)
	}})
	opts := []framework.HandlerOption{framework.WithAckWait(3 * time.Second)}

	// Worker 1 runs the "slow" tasks (held until released) and the delayed
	// ones. It is connected before the restart and reconnects after it.
	w1 := newWorker(t, testutil.Connect(t, srv), hooks, framework.WithLogger(slog.New(logs)))
	w1.HandleFunc("fault.restart", func(ctx context.Context, task *framework.Task) error {
		now := time.Now()
		l.ran(task.ID)
		if strings.HasPrefix(task.ID, "slow-") {
			started <- task.ID
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if now.Before(task.ScheduledFor) {
			earlies = append(earlies, early{task.ID, task.ScheduledFor.Sub(now), task.ScheduledFor, now})
		}
		if _, ok := firedAt[task.ID]; !ok {
			firedAt[task.ID] = now
		}
		return nil
	}, opts...)
	cronTicks := make(chan time.Time, 256)
	cronRuns := make(map[string]int)
	w1.HandleFunc("fault.cron", func(ctx context.Context, task *framework.Task) error {
		mu.Lock()
		cronRuns[task.ID]++
		mu.Unlock()
		select {
		case cronTicks <- time.Now():
		default:
		}
		return nil
	}, opts...)
	start(t, w1)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	enqueue := func(typ, id string, o ...framework.EnqueueOption) {
		t.Helper()
		if _, err := cl.Enqueue(ctx, typ, nil, append(o, framework.WithID(id))...); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
		l.enqueued(id)
	}
	sched := schedule.New(cl)
	if _, err := sched.Register(ctx, schedule.Definition{Name: "restart-tick", Spec: "@every 1s", Type: "fault.cron"}); err != nil {
		t.Fatalf("register schedule: %v", err)
	}
	testutil.Recv(t, cronTicks, 30*time.Second, "a schedule tick before the restart")
	for i := range running {
		enqueue("fault.restart", fmt.Sprintf("slow-%d", i))
	}
	for range running {
		testutil.Recv(t, started, 30*time.Second, "slow tasks running")
	}
	for i := range delayed {
		enqueue("fault.restart", fmt.Sprintf("delayed-%d", i), framework.In(delay))
	}
	// Nobody serves fault.waiting yet: these stay in the stream.
	for i := range waiting {
		enqueue("fault.waiting", fmt.Sprintf("waiting-%d", i))
	}

	restartBegan := time.Now()
	srv2 := testutil.RestartServer(t, srv)
	mu.Lock()
	restarts = time.Now()
	mu.Unlock()
	t.Logf("server restarted in %v", restarts.Sub(restartBegan).Round(time.Millisecond))
	close(release)

	w2 := newWorker(t, testutil.Connect(t, srv2), hooks, framework.WithLogger(slog.New(logs)))
	w2.HandleFunc("fault.waiting", func(ctx context.Context, task *framework.Task) error {
		l.ran(task.ID)
		return nil
	}, opts...)
	start(t, w2)

	l.enqueueingDone()
	waitDone(t, l, 2*time.Minute)
	ticksAfter := 0
	for ticksAfter < 2 {
		if at := testutil.Recv(t, cronTicks, 30*time.Second, "schedule ticks after the restart"); at.After(restarts) {
			ticksAfter++
		}
	}
	if err := sched.Remove(ctx, "restart-tick"); err != nil {
		t.Fatalf("remove schedule: %v", err)
	}
	testutil.Wait(t, 30*time.Second, "task stream empty", func() bool { return taskStreamMsgs(t, js) == 0 })

	rep := l.report()
	mu.Lock()
	afterRestart := 0
	for _, at := range firedAt {
		if at.After(restarts) {
			afterRestart++
		}
	}
	t.Logf("server restart: running=%d waiting=%d delayed=%d: %v; delayed tasks run after the restart: %d of %d",
		running, waiting, delayed, rep, afterRestart, delayed)
	cronDup := 0
	for id, n := range cronRuns {
		if n > 1 {
			cronDup++
			t.Errorf("schedule tick %s ran %d times", id, n)
		}
	}
	t.Logf("schedule: %d ticks run, %d more than once", len(cronRuns), cronDup)
	for _, e := range earlies {
		t.Errorf("delayed task %s started %v early (due %v, started %v)", e.id, e.by, e.due, e.before)
	}
	mu.Unlock()
	t.Logf("worker logs: %s", logs.summary())
	if rep.Lost != 0 || rep.Enqueued != running+waiting+delayed {
		t.Errorf("lost tasks: %v: %v", rep, rep.LostIDs)
	}
}
