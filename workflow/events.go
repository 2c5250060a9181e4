package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// TimeoutAction says what a [WaitEvent] step does when its [Timeout] runs
// out before the event came.
type TimeoutAction uint8

const (
	// TimeoutFail fails the step with [ErrEventTimeout]: the run fails and
	// compensates, as when any step fails for good. The default.
	TimeoutFail TimeoutAction = iota
	// TimeoutContinue completes the step without an event
	// ([StepStatus.TimedOut]): the steps after it run, and [Output] of the
	// step returns an error wrapping [ErrEventTimeout], so that they can
	// take the timeout branch.
	TimeoutContinue
)

// Timeout bounds the wait of a [WaitEvent] step: d after the step starts
// waiting, a server-side schedule (the delayed-task path) brings its task
// back, and when the event has still not come, action runs (default
// [TimeoutFail]). d must be at least one second. Only for WaitEvent steps.
// Default: no timeout (the run waits until the event comes or the run is
// cancelled).
func Timeout(d time.Duration, action ...TimeoutAction) StepOption {
	return func(c *stepConfig) error {
		if d < time.Second {
			return fmt.Errorf("%w: event timeout %v, want ≥ 1s", ErrInvalidOption, d)
		}
		c.timeout = d
		for _, a := range action {
			if a > TimeoutContinue {
				return fmt.Errorf("%w: timeout action %d", ErrInvalidOption, a)
			}
			c.onTimeout = a
		}
		return nil
	}
}

// WaitEvent adds the step name to d: a wait for the event whose key fn
// returns. fn runs once, when the step starts, like a step's function (it
// gets the run's input and may read its ancestors' outputs with [Output];
// an error retries it). The key is 1 to [MaxEventKeyLen] bytes of tokens
// separated by single dots, each made of ASCII letters, digits and '_',
// '-', '=', ':', '/', for example "payment.confirmed.order-42"; a key
// names one occurrence of an event. It becomes a subject.
//
// The step records "waiting for key K (until the deadline)" in the run
// document (state [StepWaiting], [StepStatus.EventKey],
// [StepStatus.Deadline]), indexes the wait in the wait stream, and lets go
// of its task: a waiting run holds no worker slot, no goroutine and no
// memory in any worker. An event is published with [Client.Signal],
// [Client.SignalRun], "jetflow workflows signal", or a plain publish on
// "<prefix>.event.<key>" (for example `nats pub jetflow.event.K '{…}'`);
// its payload must be JSON (or empty, read as null) of at most
// [MaxEventBytes]. The event becomes the step's output: the steps
// after it read it with [Output]. Events are kept in the event stream for
// [DefaultEventRetention], the last one per key: an event published
// before the run starts waiting for it is found when the wait begins. The
// same event delivered twice resumes the run once.
//
// With [Timeout], the wait ends at its deadline with [TimeoutFail] (the
// default) or [TimeoutContinue]. A run that fails or is cancelled while a
// step waits marks that step skipped. Options are those of [Step] except
// [Compensate]; a wait step is never chained ([WithChaining]).
func WaitEvent[In any](d *Definition, name string, fn func(ctx context.Context, in In) (string, error), opts ...StepOption) {
	if fn == nil {
		d.mu.Lock()
		d.problems = append(d.problems, fmt.Errorf("step %q: %w: nil event key function", name, ErrInvalidOption))
		d.mu.Unlock()
		return
	}
	Step(d, name, func(ctx context.Context, in In) (string, error) {
		key, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		if err := streamdefs.ValidateEventKey(key); err != nil {
			return "", framework.Permanent(fmt.Errorf("%w: step %q: %w", ErrInvalidEvent, name, err))
		}
		return key, nil
	}, opts...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if sd := d.byName[name]; sd != nil && !d.frozen {
		sd.kind = kindWait
		if sd.compensate != nil {
			d.problems = append(d.problems, fmt.Errorf("step %q: %w: a WaitEvent step has no compensation", name, ErrInvalidOption))
		}
	}
}

// eventTaskID and timeoutTaskID are the IDs of the tasks that bring a
// waiting step back: when an event for its key comes (sent by the event
// router), and at its deadline (a delayed task).
func eventTaskID(runID, step string) string   { return runID + ":" + step + ":event" }
func timeoutTaskID(runID, step string) string { return runID + ":" + step + ":timeout" }

// waitEntry is the body of a wait stream message "<prefix>.waiting.<key>.<run>":
// enough for the event router to send the step's task without the
// definition. An empty body marks a wait that ended.
type waitEntry struct {
	Workflow string `json:"workflow"`
	Step     string `json:"step"`
	Priority string `json:"priority"`
}

// waitTTLSlack keeps a wait entry this long after its deadline, for the
// timeout task to find the wait registered.
const waitTTLSlack = time.Minute

// waitHandler runs a step of WaitEvent. Its first task computes the key and
// records the wait (document, then timeout task, then the wait entry), then
// looks for an event already stored; the event and timeout tasks, or the
// first one redelivered, resume it (resumeWait).
func (rt *runtime) waitHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		r, st, err := rt.readStep(sctx, t, d, sd)
		if err != nil {
			return err
		}
		switch {
		case st.State == StepWaiting:
			return rt.resumeWait(ctx, sctx, t, d, sd, r, st)
		case !st.open():
			if st.State == StepSkipped && st.EventKey != "" && t.ID == eventTaskID(runID, sd.name) {
				// Skipped while it waited (the run was cancelled or
				// failed): its entry outlived it.
				rt.store.unregisterWait(sctx, t, st.EventKey, runID)
			}
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
		var key string
		if err := json.Unmarshal(out, &key); err != nil {
			return framework.Permanent(fmt.Errorf("workflow: event key of step %s: %w", sd.name, err))
		}
		var deadline time.Time
		if sd.timeout > 0 {
			deadline = started.Add(sd.timeout)
		}
		r, err = rt.update(sctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
			st := r.Step(sd.name)
			if st == nil || !st.open() || r.Status != RunRunning {
				return nil, false, nil
			}
			st.State = StepWaiting
			st.EventKey = key
			st.Deadline = deadline
			st.Error = ""
			st.Attempts = t.Attempt
			st.StartedAt = started
			r.UpdatedAt = time.Now().UTC()
			if deadline.IsZero() {
				return nil, true, nil
			}
			return []*nats.Msg{delayedTask(rt.names, d, StepTaskType(d.name, sd.name), runID, timeoutTaskID(runID, sd.name), deadline)}, true, nil
		})
		if err != nil {
			return fmt.Errorf("workflow: record the wait of step %s of run %s: %w", sd.name, runID, err)
		}
		st = r.Step(sd.name)
		if st == nil || st.State != StepWaiting {
			return nil
		}
		// The entry first, then the look for an event: an event stored
		// before the entry is found here, one stored after it is routed by
		// the event router (which reads the entries after storing the
		// event); either way the run resumes, once (the document decides).
		if err := rt.store.registerWait(sctx, d, r.ID, sd.name, key, deadline); err != nil {
			return fmt.Errorf("workflow: register the wait of step %s of run %s: %w", sd.name, runID, err)
		}
		return rt.resumeWait(ctx, sctx, t, d, sd, r, st)
	}
}

// resumeWait completes waiting step sd of run r with the event of its key
// when the event stream holds one, ends the wait at its deadline, or else
// makes sure the wait is registered (the entry, and the timeout task) and
// lets go of the task.
func (rt *runtime) resumeWait(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, st *StepStatus) error {
	if r.Status != RunRunning {
		return rt.endWait(sctx, t, r, sd.name)
	}
	payload, found, err := rt.store.event(sctx, st.EventKey)
	if err != nil {
		return fmt.Errorf("workflow: read the event %s of run %s: %w", st.EventKey, r.ID, err)
	}
	switch {
	case found && len(payload) > d.maxOutput:
		err := framework.Permanent(fmt.Errorf("%w: the event %s is %d bytes of JSON, the limit of a step output is %d (workflow.WithMaxOutputBytes)",
			ErrOutputTooLarge, st.EventKey, len(payload), d.maxOutput))
		return rt.failWait(sctx, t, d, r, sd, err)
	case found:
		nr, chained, err := rt.recordDone(sctx, d, sd, r, payload, st.Attempts, st.StartedAt)
		if err != nil {
			return err
		}
		rt.store.unregisterWait(sctx, t, st.EventKey, r.ID)
		t.Logger().Debug("jetflow workflow run resumed by an event", slog.String("run", r.ID), slog.String("event_key", st.EventKey))
		return rt.runChain(ctx, sctx, t, d, nr, chained)
	case !st.Deadline.IsZero() && !time.Now().Before(st.Deadline):
		return rt.timeoutWait(ctx, sctx, t, d, sd, r, st)
	case !st.Deadline.IsZero() && t.ID == timeoutTaskID(r.ID, sd.name):
		early := time.Until(st.Deadline)
		return framework.RetryAfterErr(early, fmt.Errorf("workflow: run %s: timeout of step %s came %v before its deadline", r.ID, sd.name, early))
	}
	if t.Attempt > 1 || t.ID == eventTaskID(r.ID, sd.name) {
		// A redelivered first task (its attempt may have died before the
		// entry or the timeout task), or an event task whose event is
		// gone: make sure the wait is registered.
		if err := rt.store.registerWait(sctx, d, r.ID, sd.name, st.EventKey, st.Deadline); err != nil {
			return fmt.Errorf("workflow: register the wait of step %s of run %s: %w", sd.name, r.ID, err)
		}
		if !st.Deadline.IsZero() {
			return rt.resendDelayed(sctx, t, delayedTask(rt.names, d, StepTaskType(d.name, sd.name), r.ID, timeoutTaskID(r.ID, sd.name), st.Deadline))
		}
	}
	return nil
}

// timeoutWait ends the wait of step sd at its deadline: with
// TimeoutContinue the step completes without an event, else it fails with
// ErrEventTimeout.
func (rt *runtime) timeoutWait(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, st *StepStatus) error {
	if sd.onTimeout != TimeoutContinue {
		return rt.failWait(sctx, t, d, r, sd, framework.Permanent(fmt.Errorf("%w: no event %s by %s", ErrEventTimeout, st.EventKey, st.Deadline.Format(time.RFC3339))))
	}
	var chained *stepDef
	nr, err := rt.update(sctx, d, r.ID, r, func(r *Run) ([]*nats.Msg, bool, error) {
		chained = nil
		st := r.Step(sd.name)
		if st == nil || st.State != StepWaiting {
			return nil, false, nil
		}
		st.TimedOut = true
		next, comp := r.complete(st, nil, st.Attempts, st.StartedAt, time.Now().UTC())
		tasks := make([]*nats.Msg, 0, len(next)+1)
		for _, n := range next {
			if nd := d.step(n); rt.chains[d] && chained == nil && nd != nil && nd.chainable() {
				chained = nd
				r.Step(n).Chained = true
				continue
			}
			tasks = append(tasks, stepTask(rt.names, d, r.ID, n))
		}
		if comp != "" {
			tasks = append(tasks, compensationTask(rt.names, d, r.ID, comp))
		}
		return tasks, true, nil
	})
	if err != nil {
		return fmt.Errorf("workflow: record the timeout of step %s of run %s: %w", sd.name, r.ID, err)
	}
	rt.store.unregisterWait(sctx, t, st.EventKey, r.ID)
	return rt.runChain(ctx, sctx, t, d, nr, chained)
}

// failWait fails waiting step sd (and the run) for good with cause.
func (rt *runtime) failWait(ctx context.Context, t *framework.Task, d *Definition, r *Run, sd *stepDef, cause error) error {
	key := r.Step(sd.name).EventKey
	if err := rt.failStep(ctx, d, r.ID, r, sd.name, cause, t.Attempt); err != nil {
		return fmt.Errorf("workflow: record the failure of step %s of run %s (%v): %w", sd.name, r.ID, cause, err)
	}
	rt.store.unregisterWait(ctx, t, key, r.ID)
	t.Logger().Info("jetflow workflow wait failed", slog.String("run", r.ID), slog.String("step", sd.name), slog.Any(framework.LogKeyError, cause))
	return nil
}

// endWait records that a waiting step will not resume because its run is
// no longer running (a document written before skipPending marked waiting
// steps skipped), and removes its wait entry.
func (rt *runtime) endWait(ctx context.Context, t *framework.Task, r *Run, step string) error {
	key := r.Step(step).EventKey
	if err := rt.skipHeld(ctx, r, step, StepWaiting); err != nil { // sleep.go
		return err
	}
	rt.store.unregisterWait(ctx, t, key, r.ID)
	return nil
}

// registerWait stores the wait entry of run's step for key, expiring a
// minute after deadline (when there is one).
func (s *store) registerWait(ctx context.Context, d *Definition, run, step, key string, deadline time.Time) error {
	body, err := json.Marshal(waitEntry{Workflow: d.name, Step: step, Priority: d.priority.String()})
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: s.names.WaitSubject(key, run), Data: body, Header: nats.Header{}}
	if !deadline.IsZero() {
		ttl := time.Until(deadline) + waitTTLSlack
		m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64(max(ttl, time.Second)/time.Second), 10))
	}
	_, err = s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.names.WaitStream()))
	return eventsErr(s.names, err)
}

// unregisterWait replaces the wait entry of run for key by an empty one
// that expires at once. A failure is logged: the entry only costs the
// router a look at a run that no longer waits.
func (s *store) unregisterWait(ctx context.Context, t *framework.Task, key, run string) {
	if err := s.removeWait(ctx, key, run); err != nil {
		t.Logger().Warn("jetflow workflow could not remove a wait entry", slog.String("run", run), slog.String("event_key", key), slog.Any(framework.LogKeyError, err))
	}
}

// removeWait replaces the wait entry of run for key by an empty one that
// expires at once.
func (s *store) removeWait(ctx context.Context, key, run string) error {
	if key == "" {
		return nil
	}
	m := &nats.Msg{Subject: s.names.WaitSubject(key, run), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgTTLHeader, "1")
	_, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.names.WaitStream()))
	return err
}

// event returns the payload of the last event of key, as JSON ("null" for
// an empty one), and whether there is a usable one. An event that is not
// JSON or too large (published around [Client.Signal]) is ignored.
func (s *store) event(ctx context.Context, key string) (json.RawMessage, bool, error) {
	st, err := s.js.Stream(ctx, s.names.EventStream())
	if err != nil {
		return nil, false, eventsErr(s.names, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, s.names.EventSubject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	payload, err := eventPayload(m.Data)
	if err != nil {
		return nil, false, nil
	}
	return payload, true, nil
}

// eventPayload checks an event's payload and returns it as the JSON stored
// as the step's output.
func eventPayload(data []byte) (json.RawMessage, error) {
	if len(data) > MaxEventBytes {
		return nil, fmt.Errorf("%w: payload of %d bytes, the limit is %d", ErrEventTooLarge, len(data), MaxEventBytes)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: the payload is not JSON", ErrInvalidEvent)
	}
	return json.RawMessage(data), nil
}

// waiter is a run waiting for an event, as the wait stream lists it.
type waiter struct {
	run   string
	entry waitEntry
}

// maxWaiters bounds the wait entries of one key the router reads for one
// event.
const maxWaiters = 10_000

// waiters returns the runs the wait stream lists as waiting for key. It
// lists the key's subjects with a filtered stream info and reads each one
// directly: a wildcard get walking the stream by sequence ends with a
// lookup that finds nothing, which nats-server answers from its subject
// index only while the stream has fewer than 65,536 subjects; with 100,000
// waiting runs that last lookup read every block after the entry (6–18 ms
// per event, against 0.1–0.9 ms for the stream info), and events queued at
// the router (wait_event resume p99 at 200 events/s: 915 ms before, 22.6 ms
// after).
func (s *store) waiters(ctx context.Context, key string) ([]waiter, error) {
	st, err := s.js.Stream(ctx, s.names.WaitStream())
	if err != nil {
		return nil, eventsErr(s.names, err)
	}
	prefix := s.names.WaitSubject(key, "")
	filter := prefix + "*"
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	var out []waiter
	for subj := range info.State.Subjects {
		if len(out) >= maxWaiters {
			break
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		run := strings.TrimPrefix(m.Subject, prefix)
		var e waitEntry
		if len(m.Data) == 0 || validateRunID(run) != nil || json.Unmarshal(m.Data, &e) != nil ||
			validateName(e.Workflow, false) != nil || validateName(e.Step, true) != nil {
			continue
		}
		if _, err := streams.ParsePriority(e.Priority); err != nil {
			continue
		}
		out = append(out, waiter{run: run, entry: e})
	}
	return out, nil
}

// eventsErr explains a missing event or wait stream.
func eventsErr(n streams.Names, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("workflow: %w: the streams %s and %s are created by a worker that runs a workflow with WaitEvent steps (or streams.EnsureEvents): %w",
			framework.ErrTopologyMissing, n.EventStream(), n.WaitStream(), err)
	}
	return err
}
