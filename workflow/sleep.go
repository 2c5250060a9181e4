package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Sleep adds the step name to d: a durable sleep of dur, counted from when
// the step starts (its dependencies completed). It is [SleepUntil] with a
// wake time of the start plus dur; dur must be positive. Its output is the
// wake time (a time.Time), which the steps after it may read with
// [Output].
func Sleep(d *Definition, name string, dur time.Duration, opts ...StepOption) {
	if dur <= 0 {
		d.mu.Lock()
		d.problems = append(d.problems, fmt.Errorf("step %q: %w: sleep of %v, want > 0", name, ErrInvalidOption, dur))
		d.mu.Unlock()
		return
	}
	SleepUntil(d, name, func(context.Context, struct{}) (time.Time, error) {
		return time.Now().Add(dur), nil
	}, opts...)
}

// SleepUntil adds the step name to d: a durable sleep until the time fn
// returns. fn runs once, when the step starts, like a step's function (it
// gets the run's input and may read the outputs of the steps it depends on
// with [Output]; an error retries it, as for any step). The step then
// records its wake time in the run document (state [StepSleeping],
// [StepStatus.WakeAt]), hands its wake-up to a server-side message
// schedule, the same path as a delayed task ([framework.At]), and lets go of
// its task: a sleeping run holds no worker slot, no goroutine and no memory
// in any worker, and survives worker and server restarts. When the schedule
// fires, the step completes (its output is the wake time) and the steps
// after it are enqueued. It never completes before the wake time: the
// worker holds a task that the server fires early, and the step checks the
// time again. A wake time in the past completes the step at once.
//
// A run that fails or is cancelled while a step sleeps marks that step
// skipped; the wake-up then does nothing. Options are those of [Step]
// ([After], [Compensate] with an Out of time.Time, [WithTaskOptions]). A
// sleep step is never chained ([WithChaining]).
func SleepUntil[In any](d *Definition, name string, fn func(ctx context.Context, in In) (time.Time, error), opts ...StepOption) {
	if fn == nil {
		d.mu.Lock()
		d.problems = append(d.problems, fmt.Errorf("step %q: %w: nil wake time function", name, ErrInvalidOption))
		d.mu.Unlock()
		return
	}
	Step(d, name, func(ctx context.Context, in In) (time.Time, error) {
		t, err := fn(ctx, in)
		if err != nil {
			return time.Time{}, err
		}
		if t.IsZero() || t.After(taskmsg.MaxDue) {
			return time.Time{}, framework.Permanent(fmt.Errorf("%w: wake time %s of step %q: want a time before %s",
				ErrInvalidOption, t.Format(time.RFC3339), name, taskmsg.MaxDue.Format(time.RFC3339)))
		}
		return t.UTC(), nil
	}, opts...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if sd := d.byName[name]; sd != nil && !d.frozen {
		sd.kind = kindSleep
	}
}

// wakeTaskID returns the ID of the delayed task that wakes a sleeping step.
func wakeTaskID(runID, step string) string { return runID + ":" + step + ":wake" }

// wakeTask builds the delayed task that brings a sleeping step back at
// wake: it goes to the delay stream, where a worker's delay mover turns it
// into a one-shot schedule firing into the step's work subject (see
// [framework.At]). Its ID is "<run>:<step>:wake", so a repeated send is
// dropped as a duplicate.
func wakeTask(n streams.Names, d *Definition, runID, step string, wake time.Time) *nats.Msg {
	return delayedTask(n, d, StepTaskType(d.name, step), runID, wakeTaskID(runID, step), wake)
}

// delayedTask builds a workflow task of taskType due at due, through the
// delay stream.
func delayedTask(n streams.Names, d *Definition, taskType, runID, id string, due time.Time) *nats.Msg {
	now := time.Now()
	if !due.After(now) {
		// Due now: the mover fires a past due time at once; keep the
		// delay path anyway so that the ID is that of the delayed task.
		now = due.Add(-time.Nanosecond)
	}
	msg, _ := taskmsg.Build(taskmsg.Spec{
		Target:         n.TaskSubject(d.priority, taskType),
		ID:             id,
		Headers:        map[string]string{HeaderRun: runID},
		Data:           nil,
		Due:            due,
		Now:            now,
		DelaySubject:   n.DelaySubject(id),
		ScheduleTarget: n.FiredSubject(d.priority, taskType),
	})
	return msg
}

// handler returns the task handler of step sd.
func (rt *runtime) handler(d *Definition, sd *stepDef) framework.HandlerFunc {
	switch sd.kind {
	case kindSleep:
		return rt.sleepHandler(d, sd)
	case kindWait:
		return rt.waitHandler(d, sd)
	case kindFanOut:
		return rt.fanOutHandler(d, sd)
	case kindChild:
		return rt.childHandler(d, sd)
	}
	return rt.stepHandler(d, sd)
}

// sleepHandler runs a sleep step. Its first task computes the wake time and
// stores it with the step's new state, sleeping, and the delayed task that
// wakes it; that wake task (or the first one redelivered after the wake
// time) completes it.
func (rt *runtime) sleepHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		r, st, err := rt.readStep(sctx, t, d, sd)
		if err != nil {
			return err
		}
		switch {
		case st.State == StepSleeping:
			return rt.wake(ctx, sctx, t, d, sd, r, st)
		case !st.open():
			return rt.resend(sctx, t, d, r, sd.name)
		case r.Status != RunRunning:
			return rt.skip(sctx, t, r, sd.name)
		}
		started := time.Now().UTC()
		sc := &stepCtx{info: StepInfo{RunID: runID, Workflow: d.name, Step: sd.name, Attempt: t.Attempt}, run: r, def: d, store: rt.store}
		out, err := runStep(ctx, t, d, sd, sc)
		if err != nil {
			return rt.stepFailed(sctx, t, d, r, sd.name, err)
		}
		var wake time.Time
		if err := json.Unmarshal(out, &wake); err != nil {
			return framework.Permanent(fmt.Errorf("workflow: wake time of step %s: %w", sd.name, err))
		}
		if !wake.After(time.Now()) {
			// Past already: nothing to sleep.
			r, chained, err := rt.recordDone(sctx, d, sd, r, out, t.Attempt, started)
			if err != nil {
				return err
			}
			return rt.runChain(ctx, sctx, t, d, r, chained)
		}
		r, err = rt.update(sctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
			st := r.Step(sd.name)
			if st == nil || !st.open() || r.Status != RunRunning {
				return nil, false, nil
			}
			st.State = StepSleeping
			st.WakeAt = wake
			st.Output = out
			st.Error = ""
			st.Attempts = t.Attempt
			st.StartedAt = started
			r.UpdatedAt = time.Now().UTC()
			return []*nats.Msg{wakeTask(rt.names, d, runID, sd.name, wake)}, true, nil
		})
		if err != nil {
			return fmt.Errorf("workflow: record the sleep of step %s of run %s: %w", sd.name, runID, err)
		}
		if st := r.Step(sd.name); st != nil && st.State == StepSleeping {
			t.Logger().Debug("jetflow workflow step sleeps", slog.String("run", runID), slog.Time("wake", wake))
		}
		return nil
	}
}

// wake completes sleeping step sd of run r once its wake time has come. A
// task that comes before it is the step's first task, redelivered after the
// sleep was recorded: it sends the wake task again (a duplicate if the
// first send got through) and lets go. The wake task itself is never early
// (the worker holds a task the server fires early); should it be, it is
// retried at the wake time.
func (rt *runtime) wake(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, st *StepStatus) error {
	if r.Status != RunRunning {
		return rt.skipSleeping(sctx, t, r, sd.name)
	}
	if early := time.Until(st.WakeAt); early > 0 {
		if t.ID == wakeTaskID(r.ID, sd.name) {
			return framework.RetryAfterErr(early, fmt.Errorf("workflow: run %s: step %s woken %v before its wake time", r.ID, sd.name, early))
		}
		return rt.resendDelayed(sctx, t, wakeTask(rt.names, d, r.ID, sd.name, st.WakeAt))
	}
	r, chained, err := rt.recordDone(sctx, d, sd, r, st.Output, st.Attempts, st.StartedAt)
	if err != nil {
		return err
	}
	return rt.runChain(ctx, sctx, t, d, r, chained)
}

// resendDelayed publishes the delayed task msg again, when a redelivered
// task finds that its first attempt recorded it, unless it is still on its
// way: in the delay stream, or a pending schedule. (Sent again after the
// duplicate window while its schedule is pending, the delay mover would
// refuse it as a conflict.)
func (rt *runtime) resendDelayed(ctx context.Context, t *framework.Task, msg *nats.Msg) error {
	id := msg.Header.Get(taskmsg.HeaderTaskID)
	for _, at := range []struct{ stream, subject string }{
		{rt.names.DelayStream(), rt.names.DelaySubject(id)},
		{rt.names.ScheduleStream(), rt.names.ScheduleSubject(id)},
	} {
		pending, err := rt.store.holds(ctx, at.stream, at.subject)
		if err != nil {
			return fmt.Errorf("workflow: look for the delayed task %s: %w", id, err)
		}
		if pending {
			return nil
		}
	}
	if err := rt.store.publishTasks(ctx, []*nats.Msg{msg}); err != nil {
		return fmt.Errorf("workflow: resend the delayed task %s: %w", id, err)
	}
	t.Logger().Info("jetflow workflow re-sent a delayed task after a redelivery", slog.String("task_id", id))
	return nil
}

// skipSleeping records that a sleeping step will not complete because its
// run is no longer running (a document written before skipPending marked
// sleeping steps skipped).
func (rt *runtime) skipSleeping(ctx context.Context, t *framework.Task, r *Run, step string) error {
	return rt.skipHeld(ctx, r, step, StepSleeping)
}

// skipHeld records that a step held in state (sleeping, waiting for an
// event or for its child) will not complete because its run is no longer
// running: skipped, unless it left that state meanwhile.
func (rt *runtime) skipHeld(ctx context.Context, r *Run, step string, state StepState) error {
	_, err := rt.store.update(ctx, r.ID, r, func(r *Run) ([]*nats.Msg, bool, error) {
		st := r.Step(step)
		if st == nil || st.State != state || r.Status == RunRunning {
			return nil, false, nil
		}
		st.State = StepSkipped
		st.EndedAt = time.Now().UTC()
		r.UpdatedAt = st.EndedAt
		return nil, true, nil
	})
	if err != nil {
		return fmt.Errorf("workflow: record skipped step %s of run %s: %w", step, r.ID, err)
	}
	return nil
}
