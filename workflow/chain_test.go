package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// taskCounter is worker middleware that counts the tasks handled, by type.
func taskCounter(c *counter) framework.WorkerOption {
	return framework.WithMiddleware(func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			c.inc(t.Type)
			return next.Handle(ctx, t)
		})
	})
}

// TestChainingRunsStepsOnOneTask checks that with WithChaining the steps a
// completion makes ready run on the task of the step before them, with the
// outputs and states of an unchained run, and that the others get tasks.
func TestChainingRunsStepsOnOneTask(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		runs, tasks := newCounter(), newCounter()
		// a → b → c, and a → x: b is chained after a, c after b; x gets a
		// task of its own.
		d := workflow.New("chained", workflow.WithChaining())
		workflow.Step(d, "a", func(ctx context.Context, o order) (int, error) {
			runs.inc("a")
			return o.Items, nil
		})
		workflow.Step(d, "b", func(ctx context.Context, _ order) (int, error) {
			runs.inc("b")
			a, err := workflow.Output[int](ctx, "a")
			return a * 10, err
		}, workflow.After("a"))
		workflow.Step(d, "x", func(ctx context.Context, _ order) (string, error) {
			runs.inc("x")
			return "x", nil
		}, workflow.After("a"))
		workflow.Step(d, "c", func(ctx context.Context, o order) (string, error) {
			runs.inc("c")
			a, err := workflow.Output[int](ctx, "a")
			if err != nil {
				return "", err
			}
			b, err := workflow.Output[int](ctx, "b")
			if err != nil {
				return "", err
			}
			info, _ := workflow.Info(ctx)
			return fmt.Sprintf("%s/%d/%d/%d", info.Step, info.Attempt, a, b), nil
		}, workflow.After("b"))
		w, _ := e.worker(t, []*workflow.Definition{d}, taskCounter(tasks))
		startWorker(t, w)
		c := e.client(t, d)

		r := wait(t, c, start(t, c, "chained", order{ID: "o1", Items: 3}))
		if r.Status != workflow.RunCompleted {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		var out string
		if err := json.Unmarshal(r.Step("c").Output, &out); err != nil || out != "c/1/3/30" {
			t.Fatalf("c output %s (%v)", r.Step("c").Output, err)
		}
		for i, s := range []string{"a", "b", "c", "x"} {
			st := r.Step(s)
			checkState(t, r, s, workflow.StepDone)
			if st.Attempts != 1 || st.EnqueuedAt.IsZero() || st.StartedAt.IsZero() || st.EndedAt.IsZero() || st.Completion == 0 {
				t.Errorf("step %s: %+v", s, st)
			}
			if want := i == 1 || i == 2; st.Chained != want {
				t.Errorf("step %s chained %v, want %v", s, st.Chained, want)
			}
			if n := runs.get(s); n != 1 {
				t.Errorf("step %s ran %d times", s, n)
			}
		}
		for s, want := range map[string]int{"a": 1, "b": 0, "c": 0, "x": 1} {
			if got := tasks.get(workflow.StepTaskType("chained", s)); got != want {
				t.Errorf("tasks of step %s handled: %d, want %d", s, got, want)
			}
		}
	})
}

// TestChainingHandsEveryLongChainOn checks that a chain longer than 16 steps
// gives its 17th chained step a task of its own, which carries the rest.
func TestChainingHandsEveryLongChainOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tasks := newCounter()
	const n = 20
	d := workflow.New("long", workflow.WithChaining())
	for i := range n {
		var opts []workflow.StepOption
		if i > 0 {
			opts = append(opts, workflow.After(fmt.Sprintf("s%d", i-1)))
		}
		workflow.Step(d, fmt.Sprintf("s%d", i), func(ctx context.Context, _ struct{}) (int, error) { return i, nil }, opts...)
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, taskCounter(tasks))
	startWorker(t, w)
	c := e.client(t, d)

	r := wait(t, c, start(t, c, "long", nil))
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	for i := range n {
		s := fmt.Sprintf("s%d", i)
		want := 0
		if i == 0 || i == 17 {
			want = 1
		}
		if got := tasks.get(workflow.StepTaskType("long", s)); got != want {
			t.Errorf("tasks of step %s handled: %d, want %d", s, got, want)
		}
		if st := r.Step(s); st.Chained != (i > 0) || st.State != workflow.StepDone {
			t.Errorf("step %s: %+v", s, st)
		}
	}
}

// TestChainedStepFailures checks that a chained step failing with an error
// that is not permanent is retried on a task of its own, and that a
// permanent failure fails the run and compensates like any step's.
func TestChainedStepFailures(t *testing.T) {
	t.Parallel()
	t.Run("retried on its own task", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		runs, tasks := newCounter(), newCounter()
		d := workflow.New("flaky", workflow.WithChaining())
		workflow.Step(d, "a", func(ctx context.Context, _ struct{}) (int, error) { runs.inc("a"); return 1, nil })
		workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (int, error) {
			if runs.inc("b") == 1 {
				return 0, errors.New("dependency hiccup")
			}
			info, _ := workflow.Info(ctx)
			return info.Attempt, nil
		}, workflow.After("a"))
		workflow.Step(d, "c", func(ctx context.Context, _ struct{}) (int, error) { runs.inc("c"); return 3, nil }, workflow.After("b"))
		w, _ := e.worker(t, []*workflow.Definition{d}, taskCounter(tasks))
		startWorker(t, w)
		c := e.client(t, d)

		r := wait(t, c, start(t, c, "flaky", nil))
		if r.Status != workflow.RunCompleted {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		if runs.get("a") != 1 || runs.get("b") != 2 || runs.get("c") != 1 {
			t.Fatalf("executions a=%d b=%d c=%d, want 1, 2, 1", runs.get("a"), runs.get("b"), runs.get("c"))
		}
		// b's own task ran it (its first attempt) and carried c.
		if got := tasks.get(workflow.StepTaskType("flaky", "b")); got != 1 {
			t.Errorf("tasks of b handled: %d, want 1", got)
		}
		if got := tasks.get(workflow.StepTaskType("flaky", "c")); got != 0 {
			t.Errorf("tasks of c handled: %d, want 0", got)
		}
		if st := r.Step("b"); string(st.Output) != "1" || st.Attempts != 1 {
			t.Errorf("b: %+v", st)
		}
		if !r.Step("c").Chained {
			t.Error("c was not chained after b's own task")
		}
	})
	t.Run("permanent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var undo log
		tasks := newCounter()
		d := workflow.New("declined", workflow.WithChaining())
		workflow.Step(d, "a", func(ctx context.Context, _ struct{}) (string, error) { return "held", nil },
			workflow.Compensate(func(ctx context.Context, _ struct{}, out string) error {
				undo.add("a:" + out)
				return nil
			}))
		workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (int, error) {
			return 0, framework.Permanent(errors.New("card declined"))
		}, workflow.After("a"))
		workflow.Step(d, "c", func(ctx context.Context, _ struct{}) (int, error) { return 3, nil }, workflow.After("b"))
		w, _ := e.worker(t, []*workflow.Definition{d}, taskCounter(tasks))
		startWorker(t, w)
		c := e.client(t, d)

		r := wait(t, c, start(t, c, "declined", nil))
		if r.Status != workflow.RunFailed {
			t.Fatalf("run %s, want failed", r.Status)
		}
		checkState(t, r, "a", workflow.StepCompensated)
		checkState(t, r, "b", workflow.StepFailed)
		checkState(t, r, "c", workflow.StepSkipped)
		if st := r.Step("b"); st.Attempts != 1 || st.Error == "" {
			t.Errorf("b: %+v", st)
		}
		if got := undo.all(); len(got) != 1 || got[0] != "a:held" {
			t.Errorf("compensations %v, want [a:held]", got)
		}
		if got := tasks.get(workflow.StepTaskType("declined", "b")); got != 0 {
			t.Errorf("tasks of b handled: %d, want 0", got)
		}
	})
}

// TestChainResumedAfterTheWorkerStops stops the worker while a chained step
// runs, by shutting it down (the step is handed to its own task) or by
// closing its connection (the task that carries the chain is redelivered
// and sends the tasks of the steps it left enqueued), in the first chained
// step and in the second, whose predecessor completed on the chain.
func TestChainResumedAfterTheWorkerStops(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"shutdown", "connection closed"} {
		for _, blockIn := range []string{"b", "c"} {
			t.Run(mode+" in "+blockIn, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				runs := newCounter()
				blocked := make(chan struct{}, 1)
				release := make(chan struct{})
				defer close(release)
				newDef := func() *workflow.Definition {
					d := workflow.New("resume", workflow.WithChaining())
					step := func(name string, v int) func(context.Context, struct{}) (int, error) {
						return func(ctx context.Context, _ struct{}) (int, error) {
							if runs.inc(name) == 1 && name == blockIn {
								blocked <- struct{}{}
								select { // the first execution never finishes on its own
								case <-ctx.Done():
									return 0, ctx.Err()
								case <-release:
									return 0, errors.New("released after the test")
								}
							}
							return v, nil
						}
					}
					// a's task carries the chain; its short ack wait brings it
					// back soon after its worker is gone.
					workflow.Step(d, "a", step("a", 1), workflow.WithTaskOptions(framework.WithAckWait(time.Second), fast))
					workflow.Step(d, "b", step("b", 2), workflow.After("a"))
					workflow.Step(d, "c", step("c", 3), workflow.After("b"))
					return d
				}
				w1, nc1 := e.worker(t, []*workflow.Definition{newDef()})
				if err := w1.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = w1.Shutdown(ctx)
				})
				c := e.client(t, newDef())
				id := start(t, c, "resume", nil)
				testutil.Recv(t, blocked, waitLong, "step "+blockIn+" started on the first worker")

				switch mode {
				case "shutdown":
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					_ = w1.Shutdown(ctx)
				case "connection closed":
					nc1.Close()
				}
				w2, _ := e.worker(t, []*workflow.Definition{newDef()})
				startWorker(t, w2)

				r := wait(t, c, id)
				if r.Status != workflow.RunCompleted || string(r.Step("c").Output) != "3" {
					t.Fatalf("run %s (%s), c output %s", r.Status, r.Error, r.Step("c").Output)
				}
				want := map[string]int{"a": 1, "b": 1, "c": 1}
				want[blockIn] = 2
				for s, n := range want {
					if got := runs.get(s); got != n {
						t.Errorf("step %s ran %d times, want %d", s, got, n)
					}
				}
			})
		}
	}
}

// TestChainingByDefault: a definition without a chaining option chains its
// steps on a worker without middleware of its own, and not on one with
// middleware, which would not wrap a chained step; WithChaining chains
// there too, and WithoutChaining nowhere.
func TestChainingByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	def := func(name string, opts ...workflow.Option) *workflow.Definition {
		d := workflow.New(name, opts...)
		workflow.Step(d, "a", noop)
		workflow.Step(d, "b", noop, workflow.After("a"))
		return d
	}
	pass := func(next framework.Handler) framework.Handler { return next }
	cases := []struct {
		name       string
		opts       []workflow.Option
		middleware bool
		chained    bool
	}{
		{"plain", nil, false, true},
		{"plain-mw", nil, true, false},
		{"on-mw", []workflow.Option{workflow.WithChaining()}, true, true},
		{"off", []workflow.Option{workflow.WithoutChaining()}, false, false},
	}
	for _, tc := range cases {
		d := def(tc.name, tc.opts...)
		var opts []framework.WorkerOption
		if tc.middleware {
			opts = append(opts, framework.WithMiddleware(pass))
		}
		w, _ := e.worker(t, []*workflow.Definition{d}, opts...)
		startWorker(t, w)
		c := e.client(t, d)
		r := wait(t, c, start(t, c, tc.name, nil))
		if r.Status != workflow.RunCompleted || r.Step("b").Chained != tc.chained {
			t.Errorf("%s: status %s, step b chained %v, want %v", tc.name, r.Status, r.Step("b").Chained, tc.chained)
		}
	}
}
