package workflow

import (
	"context"
	"fmt"
)

// StepInfo describes the step or compensation a handler runs for.
type StepInfo struct {
	// RunID identifies the run. Combined with Step it makes a good
	// idempotency key for external calls.
	RunID string
	// Workflow is the workflow's name.
	Workflow string
	// Step is the step's name.
	Step string
	// Attempt counts the deliveries of this task, starting at 1.
	Attempt int
	// Compensation is true in a compensation handler.
	Compensation bool
}

// stepCtx is what a running step can see of its run.
type stepCtx struct {
	info  StepInfo
	run   *Run // document read when the task started
	def   *Definition
	store *store
}

type stepCtxKey struct{}

func withStep(ctx context.Context, sc *stepCtx) context.Context {
	return context.WithValue(ctx, stepCtxKey{}, sc)
}

func fromContext(ctx context.Context) *stepCtx {
	sc, _ := ctx.Value(stepCtxKey{}).(*stepCtx)
	return sc
}

// Info returns what the handler's ctx runs for, and false outside workflow
// steps and compensations.
func Info(ctx context.Context) (StepInfo, bool) {
	sc := fromContext(ctx)
	if sc == nil {
		return StepInfo{}, false
	}
	return sc.info, true
}

// Output decodes the output of step into a T. In a step handler, step must
// be one of the steps it depends on, directly or transitively (their outputs
// are guaranteed to exist); in a compensation handler, any step that
// completed. It reads the run document loaded when the task started: no
// round trip.
//
// The output of a [WaitEvent] step is its event's payload; after a
// [Timeout] with [TimeoutContinue] there is none, and Output returns an
// error wrapping [ErrEventTimeout].
//
// Errors: [ErrNotInStep] outside a handler, [ErrNoOutput] for a step that is
// not an ancestor or has no output, [ErrEventTimeout], or the JSON decoding
// error.
func Output[T any](ctx context.Context, step string) (T, error) {
	var v T
	sc := fromContext(ctx)
	if sc == nil {
		return v, ErrNotInStep
	}
	if !sc.info.Compensation {
		if sd := sc.def.step(sc.info.Step); sd == nil || !sd.ancestors[step] {
			return v, fmt.Errorf("%w: step %q does not depend on %q (declare it with workflow.After)", ErrNoOutput, sc.info.Step, step)
		}
	}
	st := sc.run.Step(step)
	if st != nil && st.TimedOut {
		return v, fmt.Errorf("%w: step %q of run %s: no event %s by %s", ErrEventTimeout, step, sc.info.RunID, st.EventKey, st.Deadline.Format("2006-01-02T15:04:05Z07:00"))
	}
	if st == nil || st.Output == nil {
		return v, fmt.Errorf("%w: step %q of run %s has no output", ErrNoOutput, step, sc.info.RunID)
	}
	if err := decode(st.Output, &v); err != nil {
		return v, fmt.Errorf("workflow: decode output of step %q into %T: %w", step, v, err)
	}
	return v, nil
}

// Check reads the run's current status and reports whether the calling step
// should stop: [ErrCancelled] when the run was cancelled, [ErrRunFailed]
// when it failed or is compensating, nil while it runs. Long steps call it
// between units of work; returning its error ends the step without retries
// (the step is recorded as skipped). It costs one round trip.
func Check(ctx context.Context) error {
	sc := fromContext(ctx)
	if sc == nil {
		return ErrNotInStep
	}
	r, err := sc.store.load(ctx, sc.info.RunID)
	if err != nil {
		return err
	}
	return statusErr(r)
}

// statusErr maps a run that is no longer running to the error a step sees.
func statusErr(r *Run) error {
	switch {
	case r.Status == RunRunning:
		return nil
	case r.Status == RunCancelled || r.CompensateOnCancel:
		return fmt.Errorf("%w: run %s: %s", ErrCancelled, r.ID, r.Error)
	case r.Status == RunCompleted:
		return nil
	default:
		return fmt.Errorf("%w: run %s: %s", ErrRunFailed, r.ID, r.Error)
	}
}
