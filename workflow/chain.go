package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/nats-io/nats.go"
)

// Chained steps (WithChaining, decision 034): a step run on the task of the
// step before it, and handing a step to a task of its own (worker.go).

// maxChain is how many steps one task runs in a row after its own; the
// next one gets a task of its own, so that a long chain does not hold one
// executor and one task for its whole length.
const maxChain = 16

// runChain runs the chained step sd, and those each chained step chains in
// turn, on task t, whose own step completed with document r. Each runs from
// the document its predecessor wrote, without reading it again. A step that
// may not run here (the worker is stopping, the chain is long, or the step
// failed with an error that is not permanent) is handed to a task of its
// own.
func (rt *runtime) runChain(ctx, sctx context.Context, t *framework.Task, d *Definition, r *Run, sd *stepDef) error {
	for depth := 0; sd != nil; depth++ {
		if depth >= maxChain || ctx.Err() != nil {
			return rt.handOff(sctx, t, d, r.ID, sd.name, nil)
		}
		started := time.Now().UTC()
		sc := &stepCtx{info: StepInfo{RunID: r.ID, Workflow: d.name, Step: sd.name, Attempt: 1}, run: r, def: d, store: rt.store}
		out, err := runStep(ctx, t, d, sd, sc)
		if err != nil {
			return rt.chainFailed(sctx, t, d, r, sd.name, err)
		}
		if r, sd, err = rt.recordDone(sctx, d, sd, r, out, 1, started); err != nil {
			return err
		}
	}
	return nil
}

// handOff publishes the task of a chained step that will not run on the
// task that chained it. Its document says it is enqueued, like any step
// whose task is queued.
func (rt *runtime) handOff(ctx context.Context, t *framework.Task, d *Definition, runID, step string, cause error) error {
	if err := rt.store.publishTasks(ctx, []*nats.Msg{stepTask(rt.names, d, runID, step)}); err != nil {
		// The task that carries the chain comes back and sends it then
		// (resend).
		return fmt.Errorf("workflow: hand chained step %s of run %s to a task of its own: %w", step, runID, err)
	}
	if cause != nil {
		t.Logger().Info("jetflow workflow chained step failed; its own task retries it",
			slog.String("run", runID), slog.String("step", step), slog.Any(framework.LogKeyError, cause))
	}
	return nil
}

// chainFailed handles the failure of a chained step: a run that ended under
// it skips it, a permanent failure fails it (and the run) for good, and any
// other error hands it to a task of its own, whose attempts retry it.
func (rt *runtime) chainFailed(ctx context.Context, t *framework.Task, d *Definition, r *Run, step string, cause error) error {
	if errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrRunFailed) {
		if cur, err := rt.store.load(ctx, r.ID); err == nil && cur.Status != RunRunning {
			return rt.skipAttempt(ctx, t, cur, step, 1)
		}
	}
	if !framework.IsPermanent(cause) {
		return rt.handOff(ctx, t, d, r.ID, step, cause)
	}
	if err := rt.failStep(ctx, d, r.ID, r, step, cause, 1); err != nil {
		// Not recorded: the carrying task comes back and resend hands the
		// step to its own task, which fails it again.
		return fmt.Errorf("workflow: record failure of chained step %s (%v): %w", step, cause, err)
	}
	return nil
}

// chainsOn says, for each of defs, whether its steps are chained on w:
// with WithChaining, or by default on a worker without middleware of its
// own, which would not wrap a chained step (decision 048).
func chainsOn(w *framework.Worker, defs []*Definition) map[*Definition]bool {
	out := make(map[*Definition]bool, len(defs))
	for _, d := range defs {
		out[d] = d.chain == chainOn || (d.chain == chainAuto && !w.HasMiddleware())
	}
	return out
}

// carriedBy returns parent and the chained steps that completed after it,
// transitively: the steps whose completions the task of parent may have
// recorded, and so whose children it may have left without their tasks.
func carriedBy(r *Run, parent string) map[string]bool {
	if parent == "" {
		return nil
	}
	set := map[string]bool{parent: true}
	for _, s := range r.Steps { // topological order: parents first
		if s.Chained && s.State == StepDone && dependsOnAny(s, set) {
			set[s.Name] = true
		}
	}
	return set
}

// dependsOnAny reports whether s depends directly on a step of set.
func dependsOnAny(s *StepStatus, set map[string]bool) bool {
	for _, a := range s.After {
		if set[a] {
			return true
		}
	}
	return false
}
