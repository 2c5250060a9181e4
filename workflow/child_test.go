package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// quoteDef is the child workflow "quote": price (items × 10) → total
// (price + 1); its output is total's. price waits for gate to close (nil:
// it does not wait).
func quoteDef(runs *counter, gate <-chan struct{}) *workflow.Definition {
	d := workflow.New("quote")
	workflow.Step(d, "price", func(ctx context.Context, o order) (int, error) {
		runs.inc("price")
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return o.Items * 10, nil
	})
	workflow.Step(d, "total", func(ctx context.Context, o order) (int, error) {
		p, err := workflow.Output[int](ctx, "price")
		return p + 1, err
	}, workflow.After("price"))
	return d
}

// buyDef is count → quote (a child run of child, on twice the items) →
// pay, which returns the child's output.
func buyDef(runs *counter, child *workflow.Definition, opts ...workflow.StepOption) *workflow.Definition {
	d := workflow.New("buy")
	workflow.Step(d, "count", func(ctx context.Context, o order) (int, error) { return o.Items, nil }, opts...)
	workflow.Child(d, "quote", child, func(ctx context.Context, o order) (order, error) {
		runs.inc("quote-input")
		n, err := workflow.Output[int](ctx, "count")
		return order{ID: o.ID + "-q", Items: 2 * n}, err
	}, workflow.After("count"))
	workflow.Step(d, "pay", func(ctx context.Context, o order) (int, error) {
		runs.inc("pay")
		return workflow.Output[int](ctx, "quote")
	}, workflow.After("quote"))
	return d
}

func outputInt(t *testing.T, r *workflow.Run, step string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(r.Step(step).Output, &n); err != nil {
		t.Fatalf("output of %s: %s: %v", step, r.Step(step).Output, err)
	}
	return n
}

// TestChildResultFlowsToParent: the child step starts a run of the child
// workflow under a derived ID, whose document names its parent, and the
// child's output becomes the step's, which the next step reads.
func TestChildResultFlowsToParent(t *testing.T) {
	t.Parallel()
	forModes(t, func(t *testing.T, e *env) {
		runs := newCounter()
		quote := quoteDef(runs, nil)
		buy := buyDef(runs, quote)
		c := e.run(t, buy, quote)

		id := start(t, c, "buy", order{ID: "o1", Items: 3})
		r := wait(t, c, id)
		if r.Status != workflow.RunCompleted || outputInt(t, r, "pay") != 61 {
			t.Fatalf("run %s (%s), pay %s", r.Status, r.Error, r.Step("pay").Output)
		}
		childID := workflow.ChildRunID(id, "quote")
		if st := r.Step("quote"); st.ChildRun != childID || outputInt(t, r, "quote") != 61 {
			t.Errorf("quote step: child %q, output %s", st.ChildRun, st.Output)
		}
		cr, err := c.Status(t.Context(), childID)
		if err != nil {
			t.Fatal(err)
		}
		want := workflow.ParentRef{Run: id, Workflow: "buy", Step: "quote", Priority: "normal"}
		if cr.Status != workflow.RunCompleted || cr.Workflow != "quote" || cr.Parent == nil || *cr.Parent != want {
			t.Errorf("child run %s of %s, parent %+v", cr.Status, cr.Workflow, cr.Parent)
		}
		if runs.get("price") != 1 || runs.get("pay") != 1 {
			t.Errorf("price ran %d times, pay %d, want once each", runs.get("price"), runs.get("pay"))
		}
	})
}

func TestChildRunID(t *testing.T) {
	t.Parallel()
	if got := workflow.ChildRunID("order-1", "quote"); got != "order-1=quote" {
		t.Errorf("ChildRunID = %q", got)
	}
	long := strings.Repeat("r", workflow.MaxRunIDLen)
	a, b := workflow.ChildRunID(long, "quote"), workflow.ChildRunID(long, "quote2")
	if len(a) != workflow.MaxRunIDLen || a == b || a != workflow.ChildRunID(long, "quote") {
		t.Errorf("long IDs %q and %q", a, b)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_=-]{1,64}$`)
	for _, id := range []string{a, b, workflow.ChildRunID(a, "s")} {
		if !valid.MatchString(id) {
			t.Errorf("child run ID %q is no valid run ID", id)
		}
	}
}

// TestChildFailureFailsParent: a child run that fails fails its parent's
// step with ErrChildFailed, and the parent's completed steps are
// compensated.
func TestChildFailureFailsParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	refuse := workflow.New("refuse")
	workflow.Step(refuse, "check", func(ctx context.Context, o order) (int, error) {
		return 0, framework.Permanent(errors.New("out of stock"))
	})
	d := workflow.New("sell")
	workflow.Step(d, "reserve", func(ctx context.Context, o order) (int, error) { return o.Items, nil },
		workflow.Compensate(func(ctx context.Context, o order, n int) error {
			runs.inc("release")
			return nil
		}))
	workflow.Child(d, "stock", refuse, func(ctx context.Context, o order) (order, error) { return o, nil }, workflow.After("reserve"))
	workflow.Step(d, "ship", func(ctx context.Context, o order) (int, error) {
		runs.inc("ship")
		return 0, nil
	}, workflow.After("stock"))
	c := e.run(t, d, refuse)

	id := start(t, c, "sell", order{ID: "o2", Items: 1})
	r := wait(t, c, id)
	if r.Status != workflow.RunFailed || !strings.Contains(r.Error, "child run failed") || !strings.Contains(r.Error, "out of stock") {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	checkState(t, r, "stock", workflow.StepFailed)
	checkState(t, r, "reserve", workflow.StepCompensated)
	checkState(t, r, "ship", workflow.StepSkipped)
	if runs.get("release") != 1 || runs.get("ship") != 0 {
		t.Errorf("release ran %d times, ship %d", runs.get("release"), runs.get("ship"))
	}
	if cr, err := c.Status(t.Context(), workflow.ChildRunID(id, "stock")); err != nil || cr.Status != workflow.RunFailed {
		t.Errorf("child run: %v, %v", cr, err)
	}
}

// nestDefs returns top → mid (a child run) → nap (a child run of mid,
// which sleeps an hour), and, when boom is not nil, a step of top beside
// mid that fails once boom is closed.
func nestDefs(boom <-chan struct{}) (top, mid, nap *workflow.Definition) {
	nap = workflow.New("nap")
	workflow.Sleep(nap, "sleep", time.Hour)
	mid = workflow.New("mid")
	workflow.Child(mid, "nap", nap, func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, nil })
	top = workflow.New("top")
	workflow.Child(top, "mid", mid, func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, nil })
	if boom != nil {
		workflow.Step(top, "boom", func(ctx context.Context, _ struct{}) (int, error) {
			select {
			case <-boom:
				return 0, framework.Permanent(errors.New("boom"))
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	}
	return top, mid, nap
}

// waitRun waits until run id exists and cond holds for it.
func waitRun(t *testing.T, c *workflow.Client, id, what string, cond func(*workflow.Run) bool) *workflow.Run {
	t.Helper()
	var r *workflow.Run
	testutil.Wait(t, waitLong, what, func() bool {
		var err error
		r, err = c.Status(t.Context(), id)
		if errors.Is(err, workflow.ErrRunNotFound) {
			return false
		}
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		return cond(r)
	})
	return r
}

// TestCancelParentCancelsChildren: cancelling a run whose child waits for
// its own child (asleep) cancels both, and the parent's step is skipped.
func TestCancelParentCancelsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	top, mid, nap := nestDefs(nil)
	c := e.run(t, top, mid, nap)

	id := start(t, c, "top", nil)
	midID := workflow.ChildRunID(id, "mid")
	napID := workflow.ChildRunID(midID, "nap")
	waitRun(t, c, napID, "grandchild asleep", func(r *workflow.Run) bool { return r.Step("sleep").State == workflow.StepSleeping })
	waitRun(t, c, midID, "child waits for the grandchild", func(r *workflow.Run) bool {
		return r.Step("nap").State == workflow.StepChildRunning
	})
	if err := c.Cancel(t.Context(), id, workflow.WithReason("customer left")); err != nil {
		t.Fatal(err)
	}
	r := wait(t, c, id)
	if r.Status != workflow.RunCancelled {
		t.Fatalf("parent %s", r.Status)
	}
	checkState(t, r, "mid", workflow.StepSkipped)
	for _, cid := range []string{midID, napID} {
		cr := wait(t, c, cid)
		if cr.Status != workflow.RunCancelled || !strings.Contains(cr.Error, "stopped") {
			t.Errorf("run %s: %s (%s)", cid, cr.Status, cr.Error)
		}
	}
	// Cancelling again says the run ended, and changes nothing.
	if err := c.Cancel(t.Context(), id); !errors.Is(err, workflow.ErrRunEnded) {
		t.Errorf("second cancel: %v", err)
	}
}

// TestParentFailureCancelsChildren: a parent that fails while its child
// runs cancels the child and the grandchild (the worker's path, not the
// client's).
func TestParentFailureCancelsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	boom := make(chan struct{})
	top, mid, nap := nestDefs(boom)
	c := e.run(t, top, mid, nap)

	id := start(t, c, "top", nil)
	midID := workflow.ChildRunID(id, "mid")
	napID := workflow.ChildRunID(midID, "nap")
	waitRun(t, c, napID, "grandchild asleep", func(r *workflow.Run) bool { return r.Step("sleep").State == workflow.StepSleeping })
	waitRun(t, c, id, "parent waits for the child", func(r *workflow.Run) bool {
		return r.Step("mid").State == workflow.StepChildRunning
	})
	close(boom)
	if r := wait(t, c, id); r.Status != workflow.RunFailed {
		t.Fatalf("parent %s (%s)", r.Status, r.Error)
	}
	for _, cid := range []string{midID, napID} {
		if cr := wait(t, c, cid); cr.Status != workflow.RunCancelled {
			t.Errorf("run %s: %s (%s)", cid, cr.Status, cr.Error)
		}
	}
}
