package framework_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestAckFailedHook closes the worker's connection while a handler runs:
// the heartbeat (InProgress) and then the Nak of the failed attempt cannot
// be sent, and the AckFailed hook reports both, with the task.
func TestAckFailedHook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type report struct {
		op string
		id string
	}
	reports := make(chan report, 64)
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithHooks(framework.Hooks{
		AckFailed: func(ctx context.Context, task *framework.Task, op string, err error) {
			if err == nil || framework.TaskFromContext(ctx) != task {
				t.Errorf("AckFailed(%s): err %v, task in ctx %v", op, err, framework.TaskFromContext(ctx))
			}
			reports <- report{op, task.ID}
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	release := make(chan struct{})
	w.HandleFunc("hooks.ackfail", func(ctx context.Context, task *framework.Task) error {
		close(running)
		<-release
		return errors.New("fails after the connection closed")
	}, framework.WithAckWait(time.Second), framework.WithHeartbeat(50*time.Millisecond))
	startWorker(t, w)
	info := e.enqueue(t, "hooks.ackfail", nil)
	<-running
	nc.Close()
	wait := func(op string) {
		t.Helper()
		deadline := time.After(waitLong)
		for {
			select {
			case r := <-reports:
				if r.id != info.ID {
					t.Fatalf("AckFailed for task %s, want %s", r.id, info.ID)
				}
				if r.op == op {
					return
				}
			case <-deadline:
				t.Fatalf("no AckFailed %q", op)
			}
		}
	}
	wait("in_progress")
	close(release)
	wait("nak")
	if st := w.Stats(); st.AckErrors < 2 {
		t.Errorf("AckErrors = %d, want ≥ 2", st.AckErrors)
	}
}

// TestPanickingHooksAreRecovered: hooks that panic cannot crash the worker;
// the task is settled as if they had returned, and the panics are counted.
func TestPanickingHooksAreRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var outcomes []framework.Action
	done := make(chan struct{}, 1)
	w := e.worker(t, framework.WithHooks(framework.Hooks{
		Started: func(context.Context, *framework.Task) { panic("started hook") },
		Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o.Action)
			mu.Unlock()
			done <- struct{}{}
			panic("finished hook")
		},
	}))
	ran := make(chan struct{}, 1)
	w.HandleFunc("hooks.panic", func(ctx context.Context, task *framework.Task) error {
		ran <- struct{}{}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "hooks.panic", nil)
	for _, ch := range []chan struct{}{ran, done} {
		select {
		case <-ch:
		case <-time.After(waitLong):
			t.Fatal("task did not run and finish")
		}
	}
	e.waitSettled(t, "hooks.panic", framework.PriorityNormal)
	testutil.Wait(t, waitLong, "hook panics counted", func() bool { return w.Stats().HookPanics == 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 1 || outcomes[0] != framework.ActionAck {
		t.Errorf("outcomes %v, want [ack]", outcomes)
	}
	if st := w.Stats(); st.Succeeded != 1 {
		t.Errorf("Succeeded = %d, want 1", st.Succeeded)
	}
}

// TestHooksCompose gives a client and a worker two WithHooks each, and the
// worker a set of AddHooks: every set runs, the added ones first, then the
// WithHooks ones in the order given (issue 37: a second WithHooks used to
// replace the first, so a hook beside the Prometheus adapter's silenced it).
func TestHooksCompose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var calls []string
	record := func(s string) {
		mu.Lock()
		calls = append(calls, s)
		mu.Unlock()
	}
	enqueued := func(name string) framework.Hooks {
		return framework.Hooks{Enqueued: func(context.Context, framework.TaskInfo) { record(name) }}
	}
	cl, err := framework.NewClient(e.nc, framework.WithHooks(enqueued("client-a")), framework.WithHooks(enqueued("client-b")))
	if err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{}, 3)
	started := func(name string) framework.Hooks {
		return framework.Hooks{
			Started:  func(context.Context, *framework.Task) { record(name) },
			Finished: func(context.Context, *framework.Task, framework.Outcome) { finished <- struct{}{} },
		}
	}
	w := e.worker(t, framework.WithHooks(started("worker-a")), framework.WithHooks(started("worker-b")))
	w.AddHooks(started("added"))
	w.HandleFunc("hooks.compose", func(context.Context, *framework.Task) error { return nil })
	if _, err := cl.Enqueue(t.Context(), "hooks.compose", nil); err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	for range 3 {
		select {
		case <-finished:
		case <-time.After(waitLong):
			t.Fatal("the Finished hooks did not all run")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"client-a", "client-b", "added", "worker-a", "worker-b"}
	if !slices.Equal(calls, want) {
		t.Errorf("hooks ran %v, want %v", calls, want)
	}
}

// pluginEvent is an event type of a plugin, for TestEmit.
type pluginEvent struct{ N int }

// Worker.Emit hands a plugin's event to the Event hook of every hook set,
// the AddHooks ones first, with the caller's context; an Event hook that
// panics is recovered and counted, and the sets after it still hear the
// event.
func TestEmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type ctxKey struct{}
	var got []string
	hear := func(name string) func(context.Context, any) {
		return func(ctx context.Context, ev any) {
			if ctx.Value(ctxKey{}) != "c" {
				t.Errorf("%s: the caller's context was not passed", name)
			}
			if p, ok := ev.(pluginEvent); ok {
				got = append(got, name+":"+string(rune('0'+p.N)))
			}
		}
	}
	w := e.worker(t,
		framework.WithHooks(framework.Hooks{Event: func(context.Context, any) { panic("event hook") }}),
		framework.WithHooks(framework.Hooks{Event: hear("own")}),
		framework.WithHooks(framework.Hooks{}))
	w.AddHooks(framework.Hooks{Event: hear("added")})
	w.Emit(context.WithValue(t.Context(), ctxKey{}, "c"), pluginEvent{N: 7})
	if want := []string{"added:7", "own:7"}; !slices.Equal(got, want) {
		t.Errorf("heard %v, want %v", got, want)
	}
	if n := w.Stats().HookPanics; n != 1 {
		t.Errorf("HookPanics = %d, want 1", n)
	}
}
