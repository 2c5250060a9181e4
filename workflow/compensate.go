package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/nats-io/nats.go"
)

// Compensations: one task per compensated step, in reverse completion
// order (worker.go).

// compensationHandler runs the compensation of one step, then commits its
// outcome together with the task of the next compensation (in reverse
// completion order).
func (rt *runtime) compensationHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		// A compensation whose task exists follows a completed step: a
		// document saying the step is merely done may be a lagging replica.
		r, st, err := rt.read(sctx, d, runID, sd.name, func(st *StepStatus) bool { return st.State == StepDone })
		if err != nil {
			return loadErr(t, err)
		}
		if st == nil {
			return framework.Permanent(fmt.Errorf("workflow: run %s of %s has no step %q", runID, d.name, sd.name))
		}
		if st.State != StepCompensating {
			// A duplicate delivery, or a retry after the outcome was
			// recorded but before the task was acknowledged.
			return rt.resend(sctx, t, d, r, "")
		}
		sc := &stepCtx{info: StepInfo{RunID: runID, Workflow: d.name, Step: sd.name, Attempt: t.Attempt, Compensation: true}, run: r, def: d, store: rt.store}
		_, err = callStep(t, func() (json.RawMessage, error) {
			return nil, sd.compensate(withStep(ctx, sc), r.Input, st.Output)
		})
		final := err == nil || isFinal(t, err)
		if !final {
			_, uerr := rt.store.update(sctx, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
				st := r.Step(sd.name)
				if st == nil || st.State != StepCompensating {
					return nil, false, nil
				}
				st.CompensationError = errString(err)
				st.CompensationAttempts = t.Attempt
				r.UpdatedAt = time.Now().UTC()
				return nil, true, nil
			})
			if uerr != nil {
				t.Logger().Warn("jetflow workflow could not record a failed compensation attempt", slog.String("run", runID), slog.Any(framework.LogKeyError, uerr))
			}
			return err
		}
		if uerr := rt.settleCompensation(sctx, d, runID, r, sd.name, err, t.Attempt); uerr != nil {
			if err == nil || t.Attempt < t.MaxAttempts {
				return fmt.Errorf("workflow: record compensation of step %s of run %s: %w", sd.name, runID, uerr)
			}
			t.Logger().Error("jetflow workflow could not record a compensation failure", slog.String("run", runID), slog.Any(framework.LogKeyError, uerr))
		}
		return err
	}
}

// settleCompensation records the outcome of a step's compensation (cause nil:
// compensated) and starts the next compensation, or ends the run.
func (rt *runtime) settleCompensation(ctx context.Context, d *Definition, runID string, r *Run, step string, cause error, attempt int) error {
	_, err := rt.update(ctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
		st := r.Step(step)
		if st == nil || st.State != StepCompensating {
			return nil, false, nil
		}
		now := time.Now().UTC()
		st.CompensationAttempts = attempt
		st.CompensatedAt = now
		r.UpdatedAt = now
		if cause == nil {
			st.State = StepCompensated
			st.CompensationError = ""
		} else {
			st.State = StepCompensationFailed
			st.CompensationError = errString(cause)
			r.Error += "; compensation of step " + step + " failed: " + st.CompensationError
		}
		next := r.nextCompensation(now)
		if next == "" {
			return nil, true, nil
		}
		return []*nats.Msg{compensationTask(rt.names, d, runID, next)}, true, nil
	})
	return err
}
