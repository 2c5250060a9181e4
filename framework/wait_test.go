package framework_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

type receipt struct {
	ChargeID string `json:"charge_id"`
}

// waitCtx is a context for one Wait of a test.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// A task of an untracked type that calls SetResult gets its final record,
// and only that one; Wait finds it although the task ended before Wait
// started.
func TestSetResultWithoutTracking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	ran := make(chan struct{})
	w := e.worker(t) // no state tracking
	w.HandleFunc("wait.result", func(ctx context.Context, task *framework.Task) error {
		defer close(ran)
		return framework.SetResult(ctx, receipt{ChargeID: "ch-" + task.ID})
	})
	startWorker(t, w)
	e.enqueue(t, "wait.result", nil, framework.WithID("res1"))
	testutil.Recv(t, ran, waitLong, "handler")
	e.waitSettled(t, "wait.result", framework.PriorityNormal)

	got, err := framework.WaitResult[receipt](waitCtx(t), e.cl, "res1")
	if err != nil || got.ChargeID != "ch-res1" {
		t.Fatalf("WaitResult = %+v, %v", got, err)
	}
	if h := states(t, kv, "res1"); stateNames(h) != "succeeded" {
		t.Fatalf("records %s, want the final one only", stateNames(h))
	}
}

// Awaited makes a task of an untracked type write its final record; a task
// that asks for nothing writes none.
func TestAwaitedWithoutTracking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	w := e.worker(t)
	w.HandleFunc("wait.plain", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, w)
	e.enqueue(t, "wait.plain", nil, framework.WithID("plain1"))
	e.enqueue(t, "wait.plain", nil, framework.WithID("awaited1"), framework.Awaited())

	rec, err := e.cl.Wait(waitCtx(t), "awaited1")
	if err != nil || rec.State != framework.StateSucceeded || rec.Type != "wait.plain" || rec.FinishedAt.IsZero() {
		t.Fatalf("Wait = %+v, %v", rec, err)
	}
	if _, err := framework.WaitResult[receipt](waitCtx(t), e.cl, "awaited1"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("WaitResult of a task without a result: %v, want ErrNotFound", err)
	}
	e.waitSettled(t, "wait.plain", framework.PriorityNormal)
	if h := states(t, kv, "awaited1"); stateNames(h) != "succeeded" {
		t.Fatalf("records of the awaited task %s, want the final one only", stateNames(h))
	}
	if h := states(t, kv, "plain1"); len(h) != 0 {
		t.Fatalf("a task that asked for nothing has records %s", stateNames(h))
	}
}

// Wait on a running task returns once it ends; a Wait whose context ends
// first returns the context's error and the last record seen.
func TestWaitRunningAndTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, release := make(chan struct{}), make(chan struct{})
	w := e.worker(t, framework.WithStateTracking(true), framework.WithTimings(framework.Timings{StateRunningAfter: -1}))
	w.HandleFunc("wait.slow", func(ctx context.Context, task *framework.Task) error {
		close(started)
		<-release
		return framework.SetResult(ctx, receipt{ChargeID: "slow"})
	})
	startWorker(t, w)
	e.enqueue(t, "wait.slow", nil, framework.WithID("slow1"))
	testutil.Recv(t, started, waitLong, "handler")

	// The "running" record is written as the attempt starts.
	testutil.Wait(t, waitLong, "running record", func() bool {
		rec, err := e.cl.Inspector().GetTask(t.Context(), "slow1")
		return err == nil && rec.State == framework.StateRunning
	})
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	rec, err := e.cl.Wait(short, "slow1")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, framework.ErrNotFound) ||
		rec == nil || rec.State != framework.StateRunning || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Wait on a running task past its deadline = %+v, %v", rec, err)
	}

	done := make(chan error, 1)
	go func() {
		got, err := framework.WaitResult[receipt](waitCtx(t), e.cl, "slow1")
		if err == nil && got.ChargeID != "slow" {
			err = errors.New("result " + got.ChargeID)
		}
		done <- err
	}()
	close(release)
	if err := testutil.Recv(t, done, waitLong, "Wait"); err != nil {
		t.Fatal(err)
	}
}

// A task that failed for good makes Wait return its record and an error
// with its last error, saying it was dead-lettered.
func TestWaitFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		deadLetters bool
		want        framework.TaskState
	}{
		{"dead-lettered", true, framework.StateDead},
		{"no dead letters", false, framework.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			w := e.worker(t, framework.WithDeadLetters(tc.deadLetters))
			w.HandleFunc("wait.doomed", func(context.Context, *framework.Task) error {
				return framework.Permanent(errors.New("card declined"))
			})
			startWorker(t, w)
			e.enqueue(t, "wait.doomed", nil, framework.WithID("doomed1"), framework.Awaited())
			rec, err := e.cl.Wait(waitCtx(t), "doomed1")
			var fe *framework.TaskFailedError
			if !errors.As(err, &fe) || !errors.Is(err, framework.ErrTaskFailed) || fe.State != tc.want ||
				!strings.Contains(err.Error(), "card declined") || rec == nil || rec.State != tc.want {
				t.Fatalf("Wait = %+v, %v", rec, err)
			}
			if dead := strings.Contains(err.Error(), "dead-lettered"); dead != tc.deadLetters {
				t.Fatalf("error %q: says dead-lettered = %v, want %v", err, dead, tc.deadLetters)
			}
		})
	}
}

// Wait on a task nothing knows of ends with its context, saying no record
// appeared; a malformed ID is refused at once.
func TestWaitUnknownTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	rec, err := e.cl.Wait(ctx, "nobody")
	if !errors.Is(err, framework.ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) || rec != nil ||
		!strings.Contains(err.Error(), "no state record") {
		t.Fatalf("Wait on an unknown task = %+v, %v", rec, err)
	}
	if _, err := e.cl.Wait(t.Context(), "a b"); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a malformed ID = %v", err)
	}
}

// A cancelled delayed task ends Wait with ErrTaskCancelled.
func TestWaitCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "wait.later", nil, framework.WithID("later1"), framework.In(time.Hour), framework.Awaited())
	done := make(chan error, 1)
	go func() {
		_, err := e.cl.Wait(waitCtx(t), "later1")
		done <- err
	}()
	testutil.Wait(t, waitLong, "pending schedule", func() bool {
		rec, err := e.cl.Inspector().GetTask(t.Context(), "later1")
		return err == nil && rec.State == framework.StateScheduled
	})
	if err := e.cl.Cancel(t.Context(), "later1"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, done, waitLong, "Wait"); !errors.Is(err, framework.ErrTaskCancelled) || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("Wait on a cancelled task: %v", err)
	}
}

// A Wait that started before a server restart sees the task end after it.
func TestWaitAcrossServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	started, release := make(chan struct{}), make(chan struct{})
	w := e.worker(t)
	w.HandleFunc("wait.restart", func(ctx context.Context, task *framework.Task) error {
		close(started)
		<-release
		return framework.SetResult(ctx, receipt{ChargeID: "after-restart"})
	})
	startWorker(t, w)
	e.enqueue(t, "wait.restart", nil, framework.WithID("restart1"), framework.Awaited())
	testutil.Recv(t, started, waitLong, "handler")
	done := make(chan error, 1)
	go func() {
		got, err := framework.WaitResult[receipt](waitCtx(t), e.cl, "restart1")
		if err == nil && got.ChargeID != "after-restart" {
			err = errors.New("result " + got.ChargeID)
		}
		done <- err
	}()
	// Wait's watch is a consumer of the bucket's stream.
	testutil.Wait(t, waitLong, "Wait watching", func() bool {
		s, err := e.js.Stream(t.Context(), "KV_"+streams.MustNames("").StateBucket())
		if err != nil {
			return false
		}
		si, err := s.Info(t.Context())
		return err == nil && si.State.Consumers > 0
	})

	srv := testutil.RestartServer(t, e.srv)
	// Let the worker's connection and the bucket's stream come back before
	// the task ends, so that its record is stored.
	testutil.Wait(t, waitLong, "bucket back after the restart", func() bool {
		_, err := e.js.KeyValue(t.Context(), streams.MustNames("").StateBucket())
		return err == nil && srv.JetStreamEnabled()
	})
	close(release)
	if err := testutil.Recv(t, done, waitLong, "Wait across the restart"); err != nil {
		t.Fatal(err)
	}
}

// The final record of an awaited task is confirmed by the server: written
// while the state bucket is gone, it is tried again until the bucket is
// back, and Wait finds it.
func TestAwaitedRecordOutlastsMissingBucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, release, ran := make(chan struct{}), make(chan struct{}), make(chan struct{})
	w := e.worker(t)
	w.HandleFunc("wait.outage", func(ctx context.Context, task *framework.Task) error {
		close(started)
		<-release
		defer close(ran)
		return framework.SetResult(ctx, receipt{ChargeID: "kept"})
	})
	startWorker(t, w)
	e.enqueue(t, "wait.outage", nil, framework.WithID("outage1"), framework.Awaited())
	testutil.Recv(t, started, waitLong, "handler")
	if err := e.js.DeleteKeyValue(t.Context(), streams.MustNames("").StateBucket()); err != nil {
		t.Fatal(err)
	}
	close(release)
	testutil.Recv(t, ran, waitLong, "handler returned")
	e.waitSettled(t, "wait.outage", framework.PriorityNormal)
	if err := framework.EnsureBuckets(t.Context(), e.js); err != nil {
		t.Fatal(err)
	}
	got, err := framework.WaitResult[receipt](waitCtx(t), e.cl, "outage1")
	if err != nil || got.ChargeID != "kept" {
		t.Fatalf("WaitResult = %+v, %v", got, err)
	}
}

// A Wait outlasts the death of the worker running the task: the task is
// redelivered after its ack wait, and the worker that finishes it writes
// the final record.
func TestWaitAcrossWorkerKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, dead := make(chan struct{}), make(chan struct{})
	nc1 := testutil.Connect(t, e.srv)
	w1, err := framework.NewWorker(nc1)
	if err != nil {
		t.Fatal(err)
	}
	w1.HandleFunc("wait.kill", func(ctx context.Context, task *framework.Task) error {
		if err := framework.ReportProgress(ctx, 1, 2, "half way"); err != nil {
			return err
		}
		close(started)
		<-dead // until the test ends: this worker is dead
		return nil
	}, framework.WithAckWait(time.Second))
	startWorker(t, w1)
	t.Cleanup(func() { close(dead) }) // before the worker's shutdown
	e.enqueue(t, "wait.kill", nil, framework.WithID("kill1"), framework.Awaited())
	testutil.Recv(t, started, waitLong, "first worker's handler")

	done := make(chan *framework.TaskRecord, 1)
	go func() {
		rec, err := e.cl.Wait(waitCtx(t), "kill1")
		if err != nil {
			t.Error(err)
		}
		done <- rec
	}()
	nc1.Close() // the worker's connection dies with its process

	w2 := e.worker(t)
	w2.HandleFunc("wait.kill", func(ctx context.Context, task *framework.Task) error {
		return framework.SetResult(ctx, receipt{ChargeID: "second"})
	}, framework.WithAckWait(time.Second))
	startWorker(t, w2)
	rec := testutil.Recv(t, done, waitLong, "Wait")
	if rec == nil || rec.State != framework.StateSucceeded || rec.Attempt != 2 || !strings.Contains(string(rec.Result), "second") {
		t.Fatalf("record %+v", rec)
	}
}

// A user not allowed to watch the state bucket gets no answer from the
// server: Wait says so at its deadline, naming the permissions it needs.
func TestWaitWithoutPermission(t *testing.T) {
	t.Parallel()
	s := testutil.RunSecured(t, testutil.SecuredConfig{})
	cl, err := framework.NewClient(s.Connect(t, testutil.SecuredProducer), framework.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = cl.Wait(ctx, "t1")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "permissions violation") ||
		!strings.Contains(err.Error(), "$JS.API.CONSUMER.CREATE.KV_JETFLOW_STATE.>") {
		t.Fatalf("Wait as a producer: %v", err)
	}
}

// Awaited travels with a delayed task through its schedule: the worker that
// runs it when due writes its final record.
func TestWaitDelayedAwaited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc("wait.delayed", func(ctx context.Context, task *framework.Task) error {
		if task.Header(framework.HeaderAwaited) == "" {
			return framework.Permanent(errors.New("the Awaited header was lost on the way"))
		}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "wait.delayed", nil, framework.WithID("delayed1"), framework.In(300*time.Millisecond), framework.Awaited())
	rec, err := e.cl.Wait(waitCtx(t), "delayed1")
	if err != nil || rec.State != framework.StateSucceeded || rec.ScheduledFor.IsZero() {
		t.Fatalf("Wait on a delayed task = %+v, %v", rec, err)
	}
}

// A task whose worker dies on its last delivery is dead-lettered by
// another worker's router: that worker writes its "dead" record, so a Wait
// on it returns the failure instead of lasting until its deadline.
func TestWaitOnTaskTheRouterDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, dead := make(chan struct{}), make(chan struct{})
	nc1 := testutil.Connect(t, e.srv)
	w1, err := framework.NewWorker(nc1, framework.WithDeadLetterRouter(false))
	if err != nil {
		t.Fatal(err)
	}
	w1.HandleFunc("wait.lastdelivery", func(ctx context.Context, task *framework.Task) error {
		close(started)
		<-dead
		return nil
	}, framework.WithAckWait(time.Second), framework.WithMaxAttempts(1))
	startWorker(t, w1)
	t.Cleanup(func() { close(dead) })
	e.enqueue(t, "wait.lastdelivery", nil, framework.WithID("last1"), framework.Awaited())
	testutil.Recv(t, started, waitLong, "the handler of the only delivery")

	errc := make(chan error, 1)
	go func() {
		_, err := e.cl.Wait(waitCtx(t), "last1")
		errc <- err
	}()
	nc1.Close() // dies on its last delivery
	// Another worker, of another type, runs the router.
	w2 := e.worker(t)
	w2.HandleFunc("wait.other", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, w2)
	err = testutil.Recv(t, errc, waitLong, "Wait")
	var failed *framework.TaskFailedError
	if !errors.As(err, &failed) || !errors.Is(err, framework.ErrTaskFailed) || !strings.Contains(err.Error(), "deliveries") {
		t.Fatalf("Wait: %v, want the task failed, dead-lettered after its deliveries", err)
	}
}
