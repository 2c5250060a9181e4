package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
)

// Cancelling the child runs of a run that stopped (child.go): a parent
// cancelled, or failed, cancels the children its steps of [Child] started,
// and each child its own.

// maxChildDepth bounds how deep a cancellation follows children of
// children. Child IDs grow with each level until they are hashed, so a
// document can only loop back to an ancestor if someone wrote it so.
const maxChildDepth = 32

// cancelChildren cancels, without compensation, the child runs of the
// steps of r that stopped waiting for them (skipped or failed), and their
// children in turn. A child that ended already is left as it is, but its
// own children are still looked at: a cancellation interrupted midway is
// finished by the next. It does nothing while r runs.
func (s *store) cancelChildren(ctx context.Context, r *Run) error {
	return s.cancelChildrenDepth(ctx, r, 0)
}

func (s *store) cancelChildrenDepth(ctx context.Context, r *Run, depth int) error {
	if r.Status == RunRunning {
		return nil
	}
	var errs []error
	for _, st := range r.Steps {
		if st.ChildRun == "" || (st.State != StepSkipped && st.State != StepFailed) {
			continue
		}
		if err := s.cancelTree(ctx, st.ChildRun, r.ID, st.Name, depth); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cancelTree cancels run id, the child of step of run parent, and its
// children. A run that does not exist (never started, or expired) is
// fine; one that is not that step's child is refused: a document names
// its child, and must not cancel another run.
func (s *store) cancelTree(ctx context.Context, id, parent, step string, depth int) error {
	if depth >= maxChildDepth {
		return fmt.Errorf("workflow: cancel child run %s: more than %d levels of children", id, maxChildDepth)
	}
	if err := validateRunID(id); err != nil {
		return err
	}
	reason := "parent run " + parent + " stopped"
	r, err := s.update(ctx, id, nil, func(r *Run) ([]*nats.Msg, bool, error) {
		if r.Parent == nil || r.Parent.Run != parent || r.Parent.Step != step {
			return nil, false, fmt.Errorf("%w: run %s is not the child of step %s of run %s", ErrRunExists, id, step, parent)
		}
		if r.Status != RunRunning {
			return nil, false, nil
		}
		r.cancel(reason, false, time.Now().UTC())
		return nil, true, nil
	})
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("workflow: cancel child run %s: %w", id, err)
	}
	for _, st := range r.Steps {
		if st.State == StepSkipped && st.EventKey != "" {
			// As Client.Cancel: best effort, the entry expires anyway.
			_ = s.removeWait(ctx, st.EventKey, id)
		}
	}
	return s.cancelChildrenDepth(ctx, r, depth+1)
}

// cancelChild cancels the child run id of step of run r, which stopped,
// logging a failure: the task that called it acts on a run that no longer
// runs, and the child's own end settles nothing.
func (rt *runtime) cancelChild(ctx context.Context, t *framework.Task, id string, r *Run, step string) {
	if err := rt.store.cancelTree(ctx, id, r.ID, step, 0); err != nil {
		t.Logger().Warn("jetflow workflow could not cancel a child run", slog.String("run", r.ID), slog.String("child", id), slog.Any(framework.LogKeyError, err))
	}
}

// stopChildren cancels the children of run r when it stopped (see
// store.cancelChildren), logging a failure.
func (rt *runtime) stopChildren(ctx context.Context, t *framework.Task, r *Run) {
	if err := rt.store.cancelChildren(ctx, r); err != nil {
		t.Logger().Warn("jetflow workflow could not cancel the child runs of a run that stopped", slog.String("run", r.ID), slog.Any(framework.LogKeyError, err))
	}
}

// hasChildren reports whether a step of r records a child run.
func (r *Run) hasChildren() bool {
	for _, st := range r.Steps {
		if st.ChildRun != "" {
			return true
		}
	}
	return false
}
