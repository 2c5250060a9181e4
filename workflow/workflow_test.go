package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

type order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
}

type reservation struct {
	Ref   string `json:"ref"`
	Items int    `json:"items"`
}

func TestChain(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		runs := newCounter()
		d := workflow.New("chain")
		workflow.Step(d, "reserve", func(ctx context.Context, o order) (reservation, error) {
			runs.inc("reserve")
			return reservation{Ref: "r-" + o.ID, Items: o.Items}, nil
		})
		workflow.Step(d, "charge", func(ctx context.Context, o order) (int, error) {
			runs.inc("charge")
			res, err := workflow.Output[reservation](ctx, "reserve")
			if err != nil {
				return 0, err
			}
			return res.Items * 100, nil
		}, workflow.After("reserve"))
		workflow.Step(d, "ship", func(ctx context.Context, o order) (string, error) {
			runs.inc("ship")
			res, err := workflow.Output[reservation](ctx, "reserve") // transitive dependency
			if err != nil {
				return "", err
			}
			cents, err := workflow.Output[int](ctx, "charge")
			if err != nil {
				return "", err
			}
			info, _ := workflow.Info(ctx)
			return fmt.Sprintf("%s/%s/%d/%s", info.Step, res.Ref, cents, o.ID), nil
		}, workflow.After("charge"))
		c := e.run(t, d)

		id := start(t, c, "chain", order{ID: "o1", Items: 3})
		r := wait(t, c, id)
		if r.Status != workflow.RunCompleted || r.Error != "" || r.EndedAt.IsZero() {
			t.Fatalf("run %+v", r)
		}
		var out string
		if err := json.Unmarshal(r.Step("ship").Output, &out); err != nil || out != "ship/r-o1/300/o1" {
			t.Fatalf("ship output %s (%v)", r.Step("ship").Output, err)
		}
		for i, s := range []string{"reserve", "charge", "ship"} {
			st := r.Step(s)
			checkState(t, r, s, workflow.StepDone)
			if st.Completion != i+1 || st.Attempts != 1 || st.EnqueuedAt.IsZero() || st.StartedAt.IsZero() || st.EndedAt.IsZero() {
				t.Errorf("step %s: %+v", s, st)
			}
			if n := runs.get(s); n != 1 {
				t.Errorf("step %s ran %d times", s, n)
			}
		}
	})
}

func TestFanOutFanIn(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		const width = 8
		runs := newCounter()
		d := workflow.New("fan")
		workflow.Step(d, "split", func(ctx context.Context, n int) (int, error) {
			runs.inc("split")
			return n * 10, nil
		})
		var branches []string
		for i := range width {
			name := "branch" + strconv.Itoa(i)
			branches = append(branches, name)
			workflow.Step(d, name, func(ctx context.Context, n int) (int, error) {
				runs.inc(name)
				base, err := workflow.Output[int](ctx, "split")
				if err != nil {
					return 0, err
				}
				// Outputs of steps it does not depend on are refused.
				sibling := "branch" + strconv.Itoa((i+1)%width)
				if _, err := workflow.Output[int](ctx, sibling); !errors.Is(err, workflow.ErrNoOutput) {
					return 0, framework.Permanent(fmt.Errorf("Output of sibling %s: %v, want ErrNoOutput", sibling, err))
				}
				return base + i, nil
			}, workflow.After("split"))
		}
		workflow.Step(d, "join", func(ctx context.Context, n int) (int, error) {
			runs.inc("join")
			sum := 0
			for _, b := range branches {
				v, err := workflow.Output[int](ctx, b)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}, workflow.After(branches...))
		c := e.run(t, d)

		// Several runs at once, so that parents of the join finish together.
		ids := make([]string, 5)
		for i := range ids {
			ids[i] = start(t, c, "fan", i)
		}
		for i, id := range ids {
			r := wait(t, c, id)
			if r.Status != workflow.RunCompleted {
				t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
			}
			var sum int
			if err := json.Unmarshal(r.Step("join").Output, &sum); err != nil {
				t.Fatal(err)
			}
			if want := width*i*10 + width*(width-1)/2; sum != want {
				t.Errorf("run %d: join = %d, want %d", i, sum, want)
			}
			if got := r.Step("join").Completion; got != width+2 {
				t.Errorf("join completed as step %d, want %d", got, width+2)
			}
		}
		for _, s := range append([]string{"split", "join"}, branches...) {
			if n := runs.get(s); n != len(ids) {
				t.Errorf("step %s ran %d times for %d runs", s, n, len(ids))
			}
		}
	})
}

func TestStepRetryThenSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var attempts atomic.Int32
	var seen []int
	var mu sync.Mutex
	d := workflow.New("flaky")
	workflow.Step(d, "call", func(ctx context.Context, _ struct{}) (string, error) {
		n := attempts.Add(1)
		info, _ := workflow.Info(ctx)
		mu.Lock()
		seen = append(seen, info.Attempt)
		mu.Unlock()
		if n < 3 {
			return "", fmt.Errorf("gateway 503 (attempt %d)", n)
		}
		return "ok", nil
	}, workflow.WithTaskOptions(framework.WithMaxAttempts(5), fast))
	c := e.run(t, d)

	r := wait(t, c, start(t, c, "flaky", nil))
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	st := r.Step("call")
	if st.State != workflow.StepDone || st.Attempts != 3 || st.Error != "" || string(st.Output) != `"ok"` {
		t.Fatalf("step %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Fatalf("attempts seen by the step: %v", seen)
	}
}

func TestFailureCompensatesInReverseOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fail    func(attempt int) error
		attempt int // attempts of the failing step
	}{
		{"permanent error", func(int) error { return framework.Permanent(errors.New("card declined")) }, 1},
		{"attempts exhausted", func(n int) error { return fmt.Errorf("timeout %d", n) }, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forModes(t, func(t *testing.T, e *env) {
				var undo log
				runs := newCounter()
				// a → b → c → d (fails). b has no compensation.
				d := workflow.New("saga")
				step := func(name string) func(context.Context, order) (string, error) {
					return func(ctx context.Context, o order) (string, error) {
						runs.inc(name)
						return name + "-" + o.ID, nil
					}
				}
				comp := func(name string) workflow.StepOption {
					return workflow.Compensate(func(ctx context.Context, o order, out string) error {
						info, _ := workflow.Info(ctx)
						if !info.Compensation || info.Step != name || out != name+"-"+o.ID {
							return framework.Permanent(fmt.Errorf("compensation %s got info %+v, output %q", name, info, out))
						}
						undo.add(name)
						return nil
					})
				}
				workflow.Step(d, "a", step("a"), comp("a"))
				workflow.Step(d, "b", step("b"), workflow.After("a"))
				workflow.Step(d, "c", step("c"), workflow.After("b"), comp("c"))
				workflow.Step(d, "d", func(ctx context.Context, o order) (string, error) {
					info, _ := workflow.Info(ctx)
					runs.inc("d")
					return "", tc.fail(info.Attempt)
				}, workflow.After("c"), comp("d"), workflow.WithTaskOptions(framework.WithMaxAttempts(2), fast))
				workflow.Step(d, "e", step("e"), workflow.After("d"), comp("e"))
				c := e.run(t, d)

				r := wait(t, c, start(t, c, "saga", order{ID: "o7"}))
				if r.Status != workflow.RunFailed {
					t.Fatalf("run status %s, want failed", r.Status)
				}
				if got, want := undo.all(), []string{"c", "a"}; !slices.Equal(got, want) {
					t.Fatalf("compensations ran in order %v, want %v", got, want)
				}
				checkState(t, r, "a", workflow.StepCompensated)
				checkState(t, r, "b", workflow.StepDone)
				checkState(t, r, "c", workflow.StepCompensated)
				checkState(t, r, "d", workflow.StepFailed)
				checkState(t, r, "e", workflow.StepSkipped)
				if st := r.Step("d"); st.Attempts != tc.attempt || st.Error == "" {
					t.Errorf("failed step: %+v", st)
				}
				if runs.get("d") != tc.attempt || runs.get("e") != 0 {
					t.Errorf("d ran %d times, e %d times", runs.get("d"), runs.get("e"))
				}
				if r.Error == "" || r.Step("a").CompensatedAt.IsZero() {
					t.Errorf("run error %q, a compensated at %v", r.Error, r.Step("a").CompensatedAt)
				}
			})
		})
	}
}

func TestCompensationFailureContinues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var undo log
	d := workflow.New("saga2")
	workflow.Step(d, "a", noop, workflow.Compensate(func(context.Context, struct{}, struct{}) error {
		undo.add("a")
		return nil
	}))
	workflow.Step(d, "b", noop, workflow.After("a"), workflow.Compensate(func(context.Context, struct{}, struct{}) error {
		undo.add("b")
		return framework.Permanent(errors.New("refund API gone"))
	}))
	workflow.Step(d, "c", func(context.Context, struct{}) (struct{}, error) {
		return struct{}{}, framework.Permanent(errors.New("out of stock"))
	}, workflow.After("b"))
	c := e.run(t, d)

	r := wait(t, c, start(t, c, "saga2", nil))
	if r.Status != workflow.RunFailed || !slices.Equal(undo.all(), []string{"b", "a"}) {
		t.Fatalf("status %s, compensations %v", r.Status, undo.all())
	}
	checkState(t, r, "b", workflow.StepCompensationFailed)
	checkState(t, r, "a", workflow.StepCompensated)
	if st := r.Step("b"); st.CompensationError == "" {
		t.Errorf("b: %+v", st)
	}
}

// TestWorkerKilledMidRun kills the worker running the second step of a chain
// and checks that another worker finishes the run without running the
// completed first step again.
func TestWorkerKilledMidRun(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"shutdown deadline", "connection closed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			forModes(t, func(t *testing.T, e *env) {
				runs := newCounter()
				blocked := make(chan struct{}, 1)
				release := make(chan struct{})
				defer close(release)
				newDef := func() *workflow.Definition {
					d := workflow.New("crash")
					workflow.Step(d, "a", func(ctx context.Context, _ struct{}) (int, error) {
						runs.inc("a")
						return 1, nil
					})
					workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (int, error) {
						if runs.inc("b") == 1 {
							blocked <- struct{}{}
							select { // the first execution never finishes on its own
							case <-ctx.Done():
								return 0, ctx.Err()
							case <-release:
								return 0, errors.New("released after the test")
							}
						}
						a, err := workflow.Output[int](ctx, "a")
						return a + 1, err
					}, workflow.After("a"), workflow.WithTaskOptions(framework.WithAckWait(time.Second), fast))
					workflow.Step(d, "c", func(ctx context.Context, _ struct{}) (int, error) {
						runs.inc("c")
						b, err := workflow.Output[int](ctx, "b")
						return b + 1, err
					}, workflow.After("b"))
					return d
				}
				// Each worker gets its own definition value, as separate
				// processes would.
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
				id := start(t, c, "crash", nil)
				testutil.Recv(t, blocked, waitLong, "step b started on the first worker")

				switch mode {
				case "shutdown deadline":
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					if err := w1.Shutdown(ctx); err == nil {
						t.Fatal("Shutdown with an expired context reported a clean stop")
					}
				case "connection closed":
					nc1.Close()
				}
				w2, _ := e.worker(t, []*workflow.Definition{newDef()})
				startWorker(t, w2)

				r := wait(t, c, id)
				if r.Status != workflow.RunCompleted || string(r.Step("c").Output) != "3" {
					t.Fatalf("run %s (%s), c output %s", r.Status, r.Error, r.Step("c").Output)
				}
				if runs.get("a") != 1 || runs.get("b") != 2 || runs.get("c") != 1 {
					t.Fatalf("executions a=%d b=%d c=%d, want 1, 2, 1", runs.get("a"), runs.get("b"), runs.get("c"))
				}
				if st := r.Step("b"); st.Attempts != 2 {
					t.Errorf("b attempts %d, want 2", st.Attempts)
				}
			})
		})
	}
}

// TestCrashAfterCommitBeforeAck makes a step's task fail after its result was
// committed (as if the worker died before acknowledging it): the redelivery
// must not run the step again.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		runs := newCounter()
		d := workflow.New("ackloss")
		workflow.Step(d, "a", func(ctx context.Context, _ struct{}) (struct{}, error) {
			runs.inc("a")
			return struct{}{}, nil
		}, workflow.WithTaskOptions(fast))
		workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (struct{}, error) {
			runs.inc("b")
			return struct{}{}, nil
		}, workflow.After("a"))
		var lost atomic.Int32
		loseFirstAck := func(next framework.Handler) framework.Handler {
			return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
				err := next.Handle(ctx, t)
				if err == nil && t.Type == workflow.StepTaskType("ackloss", "a") && lost.Add(1) == 1 {
					return errors.New("simulated crash before the ack")
				}
				return err
			})
		}
		w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithMiddleware(loseFirstAck))
		startWorker(t, w)
		c := e.client(t, d)

		r := wait(t, c, start(t, c, "ackloss", nil))
		if r.Status != workflow.RunCompleted {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		// The run may complete before a's task comes back: wait for the
		// redelivery, then check it did not run the step again.
		testutil.Wait(t, waitLong, "step a's task redelivered", func() bool { return lost.Load() >= 2 })
		if runs.get("a") != 1 || runs.get("b") != 1 {
			t.Fatalf("executions a=%d b=%d, want 1 and 1", runs.get("a"), runs.get("b"))
		}
	})
}

// TestMiddlewareFailureFailsRun checks the Failed hook: a final failure that
// the step handler did not see (produced by middleware) still fails the run.
func TestMiddlewareFailureFailsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var undo log
	d := workflow.New("mwfail")
	workflow.Step(d, "a", noop, workflow.Compensate(func(context.Context, struct{}, struct{}) error {
		undo.add("a")
		return nil
	}))
	workflow.Step(d, "b", noop, workflow.After("a"))
	reject := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			if t.Type == workflow.StepTaskType("mwfail", "b") {
				return framework.Permanent(errors.New("rejected by middleware"))
			}
			return next.Handle(ctx, t)
		})
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithMiddleware(reject))
	startWorker(t, w)
	c := e.client(t, d)

	r := wait(t, c, start(t, c, "mwfail", nil))
	if r.Status != workflow.RunFailed || !slices.Equal(undo.all(), []string{"a"}) {
		t.Fatalf("status %s, compensations %v", r.Status, undo.all())
	}
	checkState(t, r, "b", workflow.StepFailed)
}

func TestManyConcurrentRuns(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		const n = 1000
		runs := newCounter()
		var finished atomic.Int32
		done := make(chan struct{})
		d := workflow.New("many")
		workflow.Step(d, "first", func(ctx context.Context, i int) (int, error) {
			runs.inc(stepKey(ctx))
			return i, nil
		})
		workflow.Step(d, "second", func(ctx context.Context, i int) (int, error) {
			runs.inc(stepKey(ctx))
			v, err := workflow.Output[int](ctx, "first")
			if err != nil || v != i {
				return 0, framework.Permanent(fmt.Errorf("first output %d (%v), want %d", v, err, i))
			}
			return v * 2, nil
		}, workflow.After("first"))
		workflow.Step(d, "third", func(ctx context.Context, i int) (int, error) {
			runs.inc(stepKey(ctx))
			if finished.Add(1) == n {
				close(done)
			}
			return i, nil
		}, workflow.After("second"))
		w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithConcurrency(64))
		startWorker(t, w)
		c := e.client(t, d)

		ids := make([]string, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < n; i += 8 {
					id, err := c.Start(t.Context(), "many", i)
					if err != nil {
						errs <- err
						return
					}
					ids[i] = id
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("start: %v", err)
		}
		select {
		case <-done:
		case <-time.After(2 * waitLong):
			t.Fatalf("only %d of %d runs reached their last step", finished.Load(), n)
		}
		for i, id := range ids {
			r := waitStatus(t, c, id, "run "+id+" completed", func(r *workflow.Run) bool { return r.Status.Final() })
			if r.Status != workflow.RunCompleted || string(r.Step("second").Output) != strconv.Itoa(2*i) {
				t.Fatalf("run %d: %s, second output %s", i, r.Status, r.Step("second").Output)
			}
			for _, s := range []string{"first", "second", "third"} {
				if k := runs.get(id + "/" + s); k != 1 {
					t.Fatalf("run %d step %s ran %d times", i, s, k)
				}
			}
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		runs := newCounter()
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		d := workflow.New("cancel")
		workflow.Step(d, "a", func(ctx context.Context, _ struct{}) (int, error) {
			runs.inc("a")
			started <- struct{}{}
			<-release
			return 1, nil
		})
		workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (int, error) {
			runs.inc("b")
			return 2, nil
		}, workflow.After("a"))
		c := e.run(t, d)

		id := start(t, c, "cancel", nil)
		testutil.Recv(t, started, waitLong, "step a started")
		// A reason longer than an error may be is refused and changes nothing.
		if err := c.Cancel(t.Context(), id, workflow.WithReason(strings.Repeat("x", 1025))); !errors.Is(err, workflow.ErrInvalidOption) {
			t.Fatalf("Cancel with a 1,025-byte reason: %v, want ErrInvalidOption", err)
		}
		if err := c.Cancel(t.Context(), id, workflow.WithReason("customer changed their mind")); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(t.Context(), id); !errors.Is(err, workflow.ErrRunEnded) {
			t.Fatalf("second Cancel: %v, want ErrRunEnded", err)
		}
		close(release)
		// a finishes after the cancellation: its output is recorded, b is not
		// enqueued.
		r := waitStatus(t, c, id, "step a recorded", func(r *workflow.Run) bool { return r.Step("a").State == workflow.StepDone })
		if r.Status != workflow.RunCancelled || r.Error != "customer changed their mind" {
			t.Fatalf("run %s (%q)", r.Status, r.Error)
		}
		checkState(t, r, "b", workflow.StepSkipped)
		names := streams.MustNames("")
		if n := subjectCount(t, e, names.TaskSubject(framework.PriorityNormal, workflow.StepTaskType("cancel", "b"))); n != 0 {
			t.Fatalf("%d tasks of step b are queued after the cancellation", n)
		}
		if runs.get("b") != 0 {
			t.Fatalf("b ran %d times", runs.get("b"))
		}
	})
}

func TestCancelSeenByCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	d := workflow.New("longstep")
	workflow.Step(d, "poll", func(ctx context.Context, _ struct{}) (struct{}, error) {
		started <- struct{}{}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := workflow.Check(ctx); err != nil {
				stopped <- err
				return struct{}{}, err
			}
			select {
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			case <-tick.C:
			}
		}
	})
	c := e.run(t, d)

	id := start(t, c, "longstep", nil)
	testutil.Recv(t, started, waitLong, "step started")
	if err := c.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, stopped, waitLong, "step saw the cancellation"); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Check returned %v, want ErrCancelled", err)
	}
	r := waitStatus(t, c, id, "step skipped", func(r *workflow.Run) bool { return r.Step("poll").State != workflow.StepEnqueued })
	checkState(t, r, "poll", workflow.StepSkipped)
	if r.Status != workflow.RunCancelled {
		t.Fatalf("run %s", r.Status)
	}
}

func TestCancelWithCompensation(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		var undo log
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		d := workflow.New("abort")
		workflow.Step(d, "a", noop, workflow.Compensate(func(context.Context, struct{}, struct{}) error {
			undo.add("a")
			return nil
		}))
		workflow.Step(d, "b", func(ctx context.Context, _ struct{}) (struct{}, error) {
			started <- struct{}{}
			<-release
			return struct{}{}, nil
		}, workflow.After("a"), workflow.Compensate(func(context.Context, struct{}, struct{}) error {
			undo.add("b")
			return nil
		}))
		c := e.run(t, d)

		id := start(t, c, "abort", nil)
		testutil.Recv(t, started, waitLong, "step b started")
		if err := c.Cancel(t.Context(), id, workflow.WithCompensation()); err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, id)
		if r.Status != workflow.RunCancelled || !slices.Equal(undo.all(), []string{"a"}) {
			t.Fatalf("status %s, compensations %v", r.Status, undo.all())
		}
		// b completes after the run was compensated: it is undone too.
		close(release)
		r = waitStatus(t, c, id, "late step compensated", func(r *workflow.Run) bool {
			return r.Step("b").State == workflow.StepCompensated && r.Status.Final()
		})
		if r.Status != workflow.RunCancelled || !slices.Equal(undo.all(), []string{"a", "b"}) {
			t.Fatalf("status %s, compensations %v", r.Status, undo.all())
		}
	})
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := workflow.New("typed")
	workflow.Step(d, "a", func(ctx context.Context, o order) (int, error) { return o.Items, nil })
	c := e.client(t, d) // no worker: runs stay pending

	if _, err := c.Start(t.Context(), "nope", nil); !errors.Is(err, workflow.ErrUnknownWorkflow) {
		t.Errorf("unknown workflow: %v", err)
	}
	if _, err := c.Start(t.Context(), "typed", "not an order"); !errors.Is(err, workflow.ErrInvalidInput) {
		t.Errorf("wrong input type: %v", err)
	}
	if _, err := c.Start(t.Context(), "typed", order{}, workflow.WithRunID("bad:id")); !errors.Is(err, workflow.ErrInvalidOption) {
		t.Errorf("invalid run ID: %v", err)
	}
	if _, err := c.Start(t.Context(), "typed", order{}, workflow.WithRunID("cron-daily-20261204T000000Z")); !errors.Is(err, workflow.ErrInvalidOption) {
		t.Errorf("run ID of a cron tick's form: %v", err)
	}
	id := start(t, c, "typed", order{ID: "x"}, workflow.WithRunID("order-42"))
	if id != "order-42" {
		t.Fatalf("run ID %q", id)
	}
	if _, err := c.Start(t.Context(), "typed", order{ID: "y"}, workflow.WithRunID("order-42")); !errors.Is(err, workflow.ErrRunExists) {
		t.Errorf("second start with the same ID: %v, want ErrRunExists", err)
	}
	r, err := c.Status(t.Context(), "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Input) != `{"id":"x","items":0}` || r.Status != workflow.RunRunning {
		t.Errorf("run after a duplicate start: %s, input %s", r.Status, r.Input)
	}
	if _, err := c.Status(t.Context(), "missing"); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("status of a missing run: %v", err)
	}
	if err := c.Cancel(t.Context(), "missing"); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("cancel of a missing run: %v", err)
	}
	if _, err := workflow.Output[int](t.Context(), "a"); !errors.Is(err, workflow.ErrNotInStep) {
		t.Errorf("Output outside a step: %v", err)
	}
}

// TestRunDocumentReadableRaw reads a finished run the way the nats CLI does
// (last message on its subject) and checks it is plain JSON with a TTL.
func TestRunDocumentReadableRaw(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := workflow.New("raw", workflow.WithRetention(time.Hour))
	workflow.Step(d, "a", func(context.Context, struct{}) (map[string]int, error) { return map[string]int{"n": 1}, nil })
	c := e.run(t, d)
	id := start(t, c, "raw", nil)
	wait(t, c, id)

	names := streams.MustNames("")
	s, err := e.js.Stream(t.Context(), names.RunStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(t.Context(), "jetflow.wf."+id)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Status string `json:"status"`
		Steps  []struct {
			Name   string          `json:"name"`
			State  string          `json:"state"`
			Output json.RawMessage `json:"output"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(msg.Data, &doc); err != nil {
		t.Fatalf("document %s: %v", msg.Data, err)
	}
	if doc.Status != "completed" || len(doc.Steps) != 1 || doc.Steps[0].State != "done" || string(doc.Steps[0].Output) != `{"n":1}` {
		t.Fatalf("document %s", msg.Data)
	}
	if ttl := msg.Header.Get(jetstream.MsgTTLHeader); ttl != "3600" {
		t.Errorf("final document TTL header %q, want 3600", ttl)
	}
	// Only the newest version is kept (one message per subject).
	if n := subjectCount(t, e, "jetflow.wf."+id); n != 1 {
		t.Errorf("%d versions of the run document are stored, want 1", n)
	}
}

func subjectCount(t *testing.T, e *env, subject string) uint64 {
	t.Helper()
	s, err := e.js.Stream(t.Context(), streams.MustNames("").RunStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
