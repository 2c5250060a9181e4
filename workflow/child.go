package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// ErrChildFailed reports a step of [Child] whose child run failed or was
// cancelled: the step fails with it, and so does the parent run.
var ErrChildFailed = errors.New("workflow: child run failed")

// Child adds the step name to d: a run of the workflow child, which the
// step starts with the input fn returns and waits for. fn runs once, when
// the step starts, like a step's function (it gets the run's input and may
// read its ancestors' outputs with [Output]; an error retries it). The
// input must decode into the input type of every step of child.
//
// The child run's ID is [ChildRunID] of the run's ID and name, so a step
// retried after a crash finds the child it started and never starts a
// second one; its document names its parent ([Run.Parent]). The step
// records the child's ID (state [StepChildRunning], [StepStatus.ChildRun])
// and lets go of its task: a parent waiting for its child holds no worker
// slot and no goroutine. When the child run ends, its last write sends the
// step a task, which reads the child's document:
//
//   - completed: the step completes with the output of the child's last
//     step (in [Definition.Steps] order), which the steps after it read
//     with [Output];
//   - failed or cancelled: the step fails with [ErrChildFailed], and the
//     run fails and compensates as for any failed step.
//
// A parent run that is cancelled or fails while the child runs cancels the
// child (without compensation), and the child cancels its own children in
// turn. The child's document expires with the child workflow's retention.
//
// child must be registered on a worker ([Register]; usually the same one,
// Register(w, parent, child)). [Register] and [NewClient] validate it with
// d. Options are those of [Step] except [Compensate] (a completed child is
// not undone); a child step is never chained ([WithChaining]).
func Child[In, ChildIn any](d *Definition, name string, child *Definition, fn func(ctx context.Context, in In) (ChildIn, error), opts ...StepOption) {
	if fn == nil || child == nil {
		d.mu.Lock()
		d.problems = append(d.problems, fmt.Errorf("step %q: %w: nil child definition or input function", name, ErrInvalidOption))
		d.mu.Unlock()
		return
	}
	Step(d, name, fn, opts...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if sd := d.byName[name]; sd != nil && !d.frozen && sd.kind == kindStep {
		sd.kind = kindChild
		sd.child = child
		if sd.compensate != nil {
			d.problems = append(d.problems, fmt.Errorf("step %q: %w: a Child step has no compensation", name, ErrInvalidOption))
		}
	}
}

// indexChildren freezes the child workflows of the definitions of m and
// adds them to m, transitively: a worker starts their runs, and a store
// keeps them for their retention. A child that is invalid, or has the
// name of another definition, is refused.
func indexChildren(m map[string]*Definition, defs []*Definition) error {
	queue := append([]*Definition(nil), defs...)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, sd := range d.order {
			c := sd.child
			if c == nil {
				continue
			}
			if err := c.freeze(); err != nil {
				return err
			}
			switch prev := m[c.name]; {
			case prev == c:
			case prev != nil:
				return fmt.Errorf("%w: two definitions named %q (step %s of %s starts one)", ErrInvalidOption, c.name, sd.name, d.name)
			default:
				m[c.name] = c
				queue = append(queue, c)
			}
		}
	}
	return nil
}

// ChildRunID returns the ID of the run that step of run parent starts
// ([Child]): "<parent>=<step>", or, when that is longer than
// [MaxRunIDLen], its first 41 bytes, '=' and 22 bytes of its SHA-256 hash.
// Step names have no '=', so two steps never share a child.
func ChildRunID(parent, step string) string {
	id := parent + "=" + step
	if len(id) <= MaxRunIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:MaxRunIDLen-23] + "=" + base64.RawURLEncoding.EncodeToString(sum[:])[:22]
}

// childDoneTaskID is the ID of the task that tells a parent's step that its
// child run ended.
func childDoneTaskID(parentRun, step string) string { return parentRun + ":" + step + ":child" }

// parentTask builds the task that tells the parent of child run r that r
// ended. Its ID is "<parent>:<step>:child", so repeated sends are dropped
// within the duplicate window; a later one finds the step settled.
func parentTask(n streams.Names, r *Run) *nats.Msg {
	p, _ := streams.ParsePriority(r.Parent.Priority) // checked by checkParent
	return taskMsg(n, p, StepTaskType(r.Parent.Workflow, r.Parent.Step), r.Parent.Run, childDoneTaskID(r.Parent.Run, r.Parent.Step))
}

// checkParent refuses a parent reference that could not have been written
// by this package: it chooses the subject and ID of a task.
func checkParent(p *ParentRef) error {
	if p == nil {
		return nil
	}
	if err := validateRunID(p.Run); err != nil {
		return fmt.Errorf("parent: %w", err)
	}
	if err := validateName(p.Workflow, false); err != nil {
		return fmt.Errorf("parent: %w", err)
	}
	if err := validateName(p.Step, true); err != nil {
		return fmt.Errorf("parent: %w", err)
	}
	if _, err := streams.ParsePriority(p.Priority); err != nil {
		return fmt.Errorf("parent: %w", err)
	}
	return nil
}

// childOf reports why run c is not the child that step sd of run parent
// of workflow d starts, or nil.
func childOf(c *Run, d *Definition, sd *stepDef, parent string) error {
	if c.Workflow != sd.child.name || c.Parent == nil || c.Parent.Run != parent || c.Parent.Workflow != d.name || c.Parent.Step != sd.name {
		return fmt.Errorf("%w: run %s (of %s) is not the child of step %s of run %s: the ID is taken", ErrRunExists, c.ID, c.Workflow, sd.name, parent)
	}
	return nil
}

// childHandler runs a step of Child. Its first task computes the child's
// input, starts the child run, records its ID and lets go; the task the
// child's end sends (or the first one, redelivered) settles it from the
// child's document (awaitChild).
func (rt *runtime) childHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		if t.ID == childDoneTaskID(runID, sd.name) {
			return rt.childEnded(ctx, sctx, t, d, sd)
		}
		r, st, err := rt.readStep(sctx, t, d, sd)
		if err != nil {
			return err
		}
		childID := ChildRunID(runID, sd.name)
		switch {
		case st.State == StepChildRunning:
			return rt.awaitChild(ctx, sctx, t, d, sd, r, st)
		case !st.open():
			return rt.resend(sctx, t, d, r, sd.name)
		case r.Status != RunRunning:
			// A previous attempt may have started the child.
			rt.cancelChild(sctx, t, childID, r, sd.name)
			return rt.skip(sctx, t, r, sd.name)
		}
		started := time.Now().UTC()
		sc := &stepCtx{info: StepInfo{RunID: runID, Workflow: d.name, Step: sd.name, Attempt: t.Attempt}, run: r, def: d, store: rt.store}
		in, err := runStep(ctx, t, d, sd, sc)
		if err == nil {
			// The child first, then the document: a child started by an
			// attempt that died before recording it is found again by
			// its ID.
			err = rt.startChild(sctx, d, sd, runID, childID, in)
		}
		if err != nil {
			return rt.stepFailed(sctx, t, d, r, sd.name, err)
		}
		r, err = rt.update(sctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
			st := r.Step(sd.name)
			if st == nil || !st.open() || r.Status != RunRunning {
				return nil, false, nil
			}
			st.State = StepChildRunning
			st.ChildRun = childID
			st.Error = ""
			st.Attempts = t.Attempt
			st.StartedAt = started
			r.UpdatedAt = time.Now().UTC()
			return nil, true, nil
		})
		if err != nil {
			return fmt.Errorf("workflow: record the child run of step %s of run %s: %w", sd.name, runID, err)
		}
		if st := r.Step(sd.name); st != nil && st.State == StepChildRunning {
			// The child may have ended already: its notice found the
			// step not yet waiting for it.
			return rt.awaitChild(ctx, sctx, t, d, sd, r, st)
		}
		if r.Status != RunRunning {
			rt.cancelChild(sctx, t, childID, r, sd.name)
		}
		return nil
	}
}

// startChild stores the document of child run childID with its parent and
// sends its first tasks. A child that exists already (started by an
// earlier attempt) gets the first tasks that attempt may not have sent.
func (rt *runtime) startChild(ctx context.Context, d *Definition, sd *stepDef, parent, childID string, in json.RawMessage) error {
	cd := sd.child
	for _, csd := range cd.order {
		if err := csd.checkInput(in); err != nil {
			return framework.Permanent(fmt.Errorf("%w: child workflow %s: step %s takes %v: %w", ErrInvalidInput, cd.name, csd.name, csd.inType, err))
		}
	}
	c, roots := newRun(cd, childID, in, time.Now().UTC())
	c.Parent = &ParentRef{Run: parent, Workflow: d.name, Step: sd.name, Priority: d.priority.String()}
	tasks := make([]*nats.Msg, len(roots))
	for i, s := range roots {
		tasks[i] = stepTask(rt.names, cd, childID, s)
	}
	err := rt.store.commit(ctx, c, 0, tasks)
	if !errors.Is(err, errConflict) {
		return err
	}
	if c, err = rt.store.loadLeader(ctx, childID); err != nil {
		return err
	}
	if err := childOf(c, d, sd, parent); err != nil {
		return framework.Permanent(err)
	}
	if err := checkDefinition(cd, c); err != nil || c.Status != RunRunning {
		return err
	}
	return rt.store.publishTasks(ctx, queuedTasks(rt.names, cd, c, "", true))
}

// childEnded handles the task a child run's end sends its parent's step.
// It comes from the wire: a run that does not exist or a step that never
// started its child is refused; the child's own document, not the task,
// says how it ended.
func (rt *runtime) childEnded(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef) error {
	runID := runIDOf(t)
	// A step whose child ended is past pending and open: a document that
	// says otherwise may be a lagging replica.
	r, st, err := rt.read(sctx, d, runID, sd.name, func(st *StepStatus) bool { return st.State == StepPending || st.open() })
	switch {
	case errors.Is(err, ErrRunNotFound):
		return framework.Permanent(fmt.Errorf("workflow: task %s: a child's end for a run that does not exist: %w", t.ID, err))
	case err != nil:
		return loadErr(t, err)
	case st == nil:
		return framework.Permanent(fmt.Errorf("workflow: task %s: run %s has no step %q", t.ID, runID, sd.name))
	case st.State == StepPending:
		return framework.Permanent(fmt.Errorf("workflow: task %s: step %s of run %s has not started a child", t.ID, sd.name, runID))
	case st.State == StepChildRunning:
		return rt.awaitChild(ctx, sctx, t, d, sd, r, st)
	}
	// Open: the step's own task records the child and then reads it, and
	// finds it ended. Settled: a late or repeated end.
	t.Logger().Debug("jetflow workflow child end for a step not waiting", slog.String("run", runID), slog.String("state", string(st.State)))
	return nil
}

// awaitChild settles step sd of run r, which waits for its child, when the
// child run has ended: with the output of its last step, or a failure.
// While the child runs it does nothing: the child's end sends the step a
// task.
func (rt *runtime) awaitChild(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, st *StepStatus) error {
	childID := ChildRunID(r.ID, sd.name)
	if r.Status != RunRunning {
		// A document written before skipPending marked the step skipped.
		rt.cancelChild(sctx, t, childID, r, sd.name)
		return rt.endChild(sctx, r, sd.name)
	}
	c, err := rt.store.loadLeader(sctx, childID)
	switch {
	case errors.Is(err, ErrRunNotFound):
		err = framework.Permanent(fmt.Errorf("%w: child run %s is gone (expired after its retention, or purged)", ErrChildFailed, childID))
	case errors.Is(err, errCorrupt):
		err = framework.Permanent(fmt.Errorf("%w: %w", ErrChildFailed, err))
	case err != nil:
		return fmt.Errorf("workflow: read child run %s: %w", childID, err)
	default:
		if err = childOf(c, d, sd, r.ID); err != nil {
			err = framework.Permanent(err)
		}
	}
	var out json.RawMessage
	switch {
	case err != nil:
	case !c.Status.Final():
		return nil
	case c.Status != RunCompleted:
		err = framework.Permanent(fmt.Errorf("%w: child run %s %s: %s", ErrChildFailed, childID, c.Status, c.Error))
	case len(c.Steps) > 0:
		out = c.Steps[len(c.Steps)-1].Output
		if len(out) > d.maxOutput {
			err = framework.Permanent(fmt.Errorf("%w: child run %s returned %d bytes of JSON, the limit is %d (workflow.WithMaxOutputBytes)",
				ErrOutputTooLarge, childID, len(out), d.maxOutput))
		}
	}
	if err != nil {
		if ferr := rt.failStep(sctx, d, r.ID, r, sd.name, err, st.Attempts); ferr != nil {
			return fmt.Errorf("workflow: record the failure of step %s of run %s (%v): %w", sd.name, r.ID, err, ferr)
		}
		t.Logger().Info("jetflow workflow child step failed", slog.String("run", r.ID), slog.String("step", sd.name), slog.Any(framework.LogKeyError, err))
		return nil
	}
	nr, chained, err := rt.recordDone(sctx, d, sd, r, out, st.Attempts, st.StartedAt)
	if err != nil {
		return err
	}
	return rt.runChain(ctx, sctx, t, d, nr, chained)
}

// endChild records that a step waiting for its child will not complete
// because its run is no longer running.
func (rt *runtime) endChild(ctx context.Context, r *Run, step string) error {
	return rt.skipHeld(ctx, r, step, StepChildRunning) // sleep.go
}
