package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// stateTimeout bounds one read-modify-write of a run document made on behalf
// of a task. It does not inherit the handler's cancellation: a step that
// finished should get its result recorded even while the worker shuts down.
const stateTimeout = 30 * time.Second

// missingRunAttempts is how many deliveries a task whose run document cannot
// be found gets before it is failed permanently (the document may lag
// behind on a replica for a moment; after that it expired or was purged).
const missingRunAttempts = 3

// runtime runs the steps and compensations of the workflows registered on
// one worker.
type runtime struct {
	store *store
	names streams.Names
	types map[string]typeRef
	// chains says, by definition, whether its steps are chained on this
	// worker ([WithChaining]).
	chains map[*Definition]bool
	// counting serialises the counts of a fan-out's items (fanout.go).
	counting countLocks
}

type typeRef struct {
	def  *Definition
	step *stepDef
	comp bool
}

// Register registers on w a handler for every step of defs (task type
// [StepTaskType]) and for every compensation ([CompensationTaskType]), for
// each workflow's priority, and adds a Finished hook ([framework.Hooks],
// with [framework.Worker.AddHooks], beside the worker's own) that records
// the final failures ([framework.ActionFail]) the step handlers did not see
// themselves. When a definition has [WaitEvent] steps, it also installs the
// event router (see [EventRouterStats]), which creates the event and wait
// streams at start where they are missing. The child workflows of [Child]
// steps are validated with defs; they run on the workers they are
// registered on (pass them here too to run them on w). Call it before the
// worker starts.
//
// It panics on programmer errors, like [framework.Worker.Register]: an
// invalid definition (the panic value is the *[DefinitionError]), two
// definitions with one name, a workflow registered twice on w, or a call
// after w started.
func Register(w *framework.Worker, defs ...*Definition) {
	m, err := index(defs)
	if err != nil {
		panic(err)
	}
	rt := &runtime{store: newStore(w.JetStream(), w.Names(), m), names: w.Names(), types: make(map[string]typeRef),
		chains: chainsOn(w, defs)} // chain.go
	for _, d := range defs {
		for _, sd := range d.order {
			typ := StepTaskType(d.name, sd.name)
			opts := append([]framework.HandlerOption{framework.WithServedPriorities(d.priority)}, sd.taskOpts...)
			w.Register(typ, rt.handler(d, sd), opts...)
			rt.types[typ] = typeRef{def: d, step: sd}
			if sd.compensate != nil {
				typ := CompensationTaskType(d.name, sd.name)
				opts := append([]framework.HandlerOption{framework.WithServedPriorities(d.priority)}, sd.compOpts...)
				w.Register(typ, rt.compensationHandler(d, sd), opts...)
				rt.types[typ] = typeRef{def: d, step: sd, comp: true}
			}
		}
	}
	for _, d := range defs {
		for _, sd := range d.order {
			if sd.kind == kindWait {
				installRouter(w, rt.store)
			}
		}
	}
	w.AddHooks(framework.Hooks{Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
		if o.Action == framework.ActionFail {
			rt.failed(t, o.Err)
		}
	}})
}

// stepHandler runs one step: read the run, skip if there is nothing to do,
// run the step function, then commit the outcome together with the tasks it
// unlocks (see store.commit).
func (rt *runtime) stepHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		r, st, err := rt.readStep(sctx, t, d, sd)
		if err != nil {
			return err
		}
		if !st.open() {
			// A duplicate delivery, or a retry after the outcome was
			// recorded but before the task was acknowledged.
			t.Logger().Debug("jetflow workflow step already settled", slog.String("run", runID), slog.String("state", string(st.State)))
			return rt.resend(sctx, t, d, r, sd.name)
		}
		if r.Status != RunRunning {
			return rt.skip(sctx, t, r, sd.name)
		}
		started := time.Now().UTC()
		sc := &stepCtx{info: StepInfo{RunID: runID, Workflow: d.name, Step: sd.name, Attempt: t.Attempt}, run: r, def: d, store: rt.store}
		out, err := runStep(ctx, t, d, sd, sc)
		if err != nil {
			return rt.stepFailed(sctx, t, d, r, sd.name, err)
		}
		r, chained, err := rt.recordDone(sctx, d, sd, r, out, t.Attempt, started)
		if err != nil {
			return err
		}
		return rt.runChain(ctx, sctx, t, d, r, chained)
	}
}

// readStep reads the run of t and the state of its step sd, as a step's
// task starts. The error is the one the task returns: a run that cannot be
// read (loadErr), a step the document does not have (the definition changed
// under the run: permanent), or a step still pending (a replica lagging
// behind: a step whose task exists is at least enqueued; retried).
func (rt *runtime) readStep(sctx context.Context, t *framework.Task, d *Definition, sd *stepDef) (*Run, *StepStatus, error) {
	runID := runIDOf(t)
	r, st, err := rt.read(sctx, d, runID, sd.name, func(st *StepStatus) bool { return st.State == StepPending })
	switch {
	case err != nil:
		return nil, nil, loadErr(t, err)
	case st == nil:
		return nil, nil, framework.Permanent(fmt.Errorf("workflow: run %s of %s has no step %q: the definition changed under a running run (give a changed workflow a new name)",
			runID, d.name, sd.name))
	case st.State == StepPending:
		return nil, nil, framework.RetryAfterErr(time.Second, fmt.Errorf("workflow: run %s: step %s has a task but is still pending in the run document", runID, sd.name))
	}
	return r, st, nil
}

// recordDone records the output of step sd and enqueues the steps its
// completion makes ready, chaining the first it may chain (see
// [WithChaining]): that one is marked Chained and gets no task. It returns
// the document as written and the chained step, if any.
func (rt *runtime) recordDone(ctx context.Context, d *Definition, sd *stepDef, r *Run, out json.RawMessage, attempt int, started time.Time) (*Run, *stepDef, error) {
	var chained *stepDef
	id := r.ID
	r, err := rt.update(ctx, d, id, r, func(r *Run) ([]*nats.Msg, bool, error) {
		chained = nil
		st := r.Step(sd.name)
		if st == nil || !(st.open() || st.parked()) {
			return nil, false, nil
		}
		next, comp := r.complete(st, out, attempt, started, time.Now().UTC())
		if sd.fan != nil {
			fanDone(st, out)
		}
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
		return nil, nil, fmt.Errorf("workflow: record output of step %s of run %s: %w", sd.name, id, err)
	}
	return r, chained, nil
}

// read loads run id of workflow d and its step, and reads again from the
// stream leader when the run is missing or stale reports that the step's
// state cannot be current (see store.loadLeader). A document that does not
// match d is refused with an error wrapping errMismatch (see
// checkDefinition).
func (rt *runtime) read(ctx context.Context, d *Definition, id, step string, stale func(*StepStatus) bool) (*Run, *StepStatus, error) {
	// The run ID comes from the task (a header anyone who may enqueue can
	// set): it becomes a subject.
	if err := validateRunID(id); err != nil {
		return nil, nil, err
	}
	r, err := rt.store.load(ctx, id)
	if err == nil {
		if err := checkDefinition(d, r); err != nil {
			return nil, nil, err
		}
		st := r.Step(step)
		if st == nil || !stale(st) {
			return r, st, nil
		}
	} else if !errors.Is(err, ErrRunNotFound) {
		return nil, nil, err
	}
	if r, err = rt.store.loadLeader(ctx, id); err != nil {
		return nil, nil, err
	}
	if err := checkDefinition(d, r); err != nil {
		return nil, nil, err
	}
	return r, r.Step(step), nil
}

// update is store.update for a change made by a task of workflow d: a
// document that does not match d, as read again after a conflicting write,
// is refused with an error wrapping errMismatch.
func (rt *runtime) update(ctx context.Context, d *Definition, id string, r *Run, fn mutation) (*Run, error) {
	return rt.store.update(ctx, id, r, func(r *Run) ([]*nats.Msg, bool, error) {
		if err := checkDefinition(d, r); err != nil {
			return nil, false, err
		}
		return fn(r)
	})
}

// stepFailed records a failed attempt of a step. A final failure (permanent
// error or last attempt) fails the run and starts its compensations.
func (rt *runtime) stepFailed(ctx context.Context, t *framework.Task, d *Definition, r *Run, step string, cause error) error {
	if errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrRunFailed) {
		// The step stopped because the run ended ([Check]).
		cur, err := rt.store.load(ctx, r.ID)
		if err == nil && cur.Status != RunRunning {
			return rt.skip(ctx, t, cur, step)
		}
	}
	final := isFinal(t, cause)
	if !final {
		_, err := rt.store.update(ctx, r.ID, r, func(r *Run) ([]*nats.Msg, bool, error) {
			st := r.Step(step)
			if st == nil || !st.open() {
				return nil, false, nil
			}
			st.State = StepRetrying
			st.Error = errString(cause)
			st.Attempts = t.Attempt
			r.UpdatedAt = time.Now().UTC()
			return nil, true, nil
		})
		if err != nil {
			t.Logger().Warn("jetflow workflow could not record a failed attempt", slog.String("run", r.ID), slog.Any(framework.LogKeyError, err))
		}
		return cause
	}
	if err := rt.failStep(ctx, d, r.ID, r, step, cause, t.Attempt); err != nil {
		t.Logger().Error("jetflow workflow could not record a step failure", slog.String("run", r.ID), slog.Any(framework.LogKeyError, err))
		if t.Attempt < t.MaxAttempts {
			// Not permanent: the task comes back and the failure is
			// recorded then.
			return fmt.Errorf("workflow: record failure of step %s (%v): %w", step, cause, err)
		}
	}
	return cause
}

// failStep records the final failure of step and starts compensating if the
// run was running. It does nothing when the step is already settled.
func (rt *runtime) failStep(ctx context.Context, d *Definition, runID string, r *Run, step string, cause error, attempt int) error {
	r, err := rt.update(ctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
		st := r.Step(step)
		if st == nil || !(st.open() || st.parked()) {
			return nil, false, nil
		}
		comp := r.fail(st, errString(cause), attempt, time.Now().UTC())
		if comp == "" {
			return nil, true, nil
		}
		return []*nats.Msg{compensationTask(rt.names, d, runID, comp)}, true, nil
	})
	if err == nil && r.hasChildren() {
		err = rt.store.cancelChildren(ctx, r)
	}
	return err
}

// skip records that a step will not run because its run is no longer running.
func (rt *runtime) skip(ctx context.Context, t *framework.Task, r *Run, step string) error {
	return rt.skipAttempt(ctx, t, r, step, t.Attempt)
}

// skipAttempt is skip for a step whose attempt is not t's (a chained step).
func (rt *runtime) skipAttempt(ctx context.Context, t *framework.Task, r *Run, step string, attempt int) error {
	_, err := rt.store.update(ctx, r.ID, r, func(r *Run) ([]*nats.Msg, bool, error) {
		st := r.Step(step)
		if st == nil || !st.open() || r.Status == RunRunning {
			return nil, false, nil
		}
		st.State = StepSkipped
		st.Attempts = attempt
		st.EndedAt = time.Now().UTC()
		r.UpdatedAt = st.EndedAt
		return nil, true, nil
	})
	if err != nil {
		return fmt.Errorf("workflow: record skipped step %s of run %s: %w", step, r.ID, err)
	}
	t.Logger().Info("jetflow workflow step skipped: run no longer running", slog.String("run", r.ID), slog.String("status", string(r.Status)))
	return nil
}

// failed is called by the Finished hook on a final failure
// ([framework.ActionFail]): it records final failures of workflow
// tasks that the handlers above did not record themselves (for example an
// error produced by middleware around them). It is a no-op when the failure
// was already recorded.
func (rt *runtime) failed(t *framework.Task, cause error) {
	ref, ok := rt.types[t.Type]
	if !ok {
		return
	}
	runID := runIDOf(t)
	if validateRunID(runID) != nil || t.ID == childDoneTaskID(runID, ref.step.name) {
		// A child's end that failed is no failure of the step (child.go).
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	var err error
	if ref.comp {
		err = rt.settleCompensation(ctx, ref.def, runID, nil, ref.step.name, cause, t.Attempt)
	} else {
		err = rt.failStep(ctx, ref.def, runID, nil, ref.step.name, cause, t.Attempt)
	}
	if err == nil {
		// The handler may have recorded the failure but not sent the
		// compensation task before this last attempt ended.
		var r *Run
		if r, err = rt.store.load(ctx, runID); err == nil {
			err = checkDefinition(ref.def, r)
		}
		if err == nil {
			parent := ""
			if !ref.comp {
				// The step's task may have recorded its completion, and
				// chained steps after it, without sending their children.
				parent = ref.step.name
			}
			err = rt.store.publishTasks(ctx, queuedTasks(rt.names, ref.def, r, parent, false))
		}
	}
	if err != nil && !errors.Is(err, ErrRunNotFound) && !errors.Is(err, errMismatch) {
		// A document that does not match the task's workflow is not the
		// task's to record: its handler refused it already.
		t.Logger().Error("jetflow workflow could not record a failed task; the run may be stuck",
			slog.String("run", runID), slog.Any(framework.LogKeyError, err))
	}
}

// resend re-publishes the tasks that the run document says are queued
// because of step (its enqueued children; with step "" none) and the
// compensation in progress, when a redelivered task finds its outcome already
// recorded. The previous attempt may have stored the document and died
// before sending those tasks (see store.commit). Task IDs are deterministic,
// so a task that did get sent is dropped as a duplicate within the task
// stream's duplicate window (default 2 minutes); one sent again later finds
// its step settled and does nothing.
func (rt *runtime) resend(ctx context.Context, t *framework.Task, d *Definition, r *Run, step string) error {
	if t.Attempt <= 1 {
		return nil
	}
	if r.hasChildren() {
		rt.stopChildren(ctx, t, r) // an earlier attempt may have stopped before
	}
	tasks := queuedTasks(rt.names, d, r, step, false)
	if len(tasks) == 0 {
		return nil
	}
	if err := rt.store.publishTasks(ctx, tasks); err != nil {
		return fmt.Errorf("workflow: resend the tasks of run %s: %w", r.ID, err)
	}
	t.Logger().Info("jetflow workflow re-sent queued tasks after a redelivery", slog.String("run", r.ID), slog.Int("tasks", len(tasks)))
	return nil
}

// queuedTasks returns the task messages of the steps of r that are enqueued
// and depend on parent (the roots when roots is set), and of the
// compensation in progress.
func queuedTasks(n streams.Names, d *Definition, r *Run, parent string, roots bool) []*nats.Msg {
	var tasks []*nats.Msg
	carried := carriedBy(r, parent)
	for _, s := range r.Steps {
		switch {
		case s.State == StepEnqueued && s.Attempts == 0 && ((roots && len(s.After) == 0) || (parent != "" && dependsOnAny(s, carried))):
			tasks = append(tasks, stepTask(n, d, r.ID, s.Name))
		case s.State == StepCompensating:
			tasks = append(tasks, compensationTask(n, d, r.ID, s.Name))
		}
	}
	if r.Status.Final() && r.Parent != nil {
		tasks = append(tasks, parentTask(n, r))
	}
	return tasks
}

// runStep runs step sd with sc in its context, and fails it permanently when
// its output is over the workflow's limit.
func runStep(ctx context.Context, t *framework.Task, d *Definition, sd *stepDef, sc *stepCtx) (json.RawMessage, error) {
	out, err := callStep(t, func() (json.RawMessage, error) { return sd.run(withStep(ctx, sc), sc.run.Input) })
	if err == nil && len(out) > d.maxOutput {
		err = framework.Permanent(fmt.Errorf("%w: step %q returned %d bytes of JSON, the limit is %d (workflow.WithMaxOutputBytes)",
			ErrOutputTooLarge, sd.name, len(out), d.maxOutput))
	}
	return out, err
}

// callStep runs fn, turning a panic into an error so that the failure is
// recorded like any other.
func callStep(t *framework.Task, fn func() (json.RawMessage, error)) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			t.Logger().Error("jetflow workflow step panicked", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("%w: %v", framework.ErrPanic, p)
		}
	}()
	return fn()
}

// isFinal reports whether the worker will give up on t after this error:
// a permanent error, or the last attempt, except for an open circuit breaker,
// which the worker reruns in process without spending an attempt.
func isFinal(t *framework.Task, err error) bool {
	if framework.IsPermanent(err) {
		return true
	}
	var open *breaker.OpenError
	if errors.As(err, &open) {
		return false
	}
	return t.Attempt >= t.MaxAttempts
}

func stateContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
}

// runIDOf returns the run ID of a workflow task: its Jetflow-Run header, or
// the part of its task ID before the first ':'.
func runIDOf(t *framework.Task) string {
	if id := t.Header(HeaderRun); id != "" {
		return id
	}
	id, _, _ := strings.Cut(t.ID, ":")
	return id
}

func loadErr(t *framework.Task, err error) error {
	if errors.Is(err, errCorrupt) || errors.Is(err, errMismatch) || errors.Is(err, ErrInvalidOption) {
		return framework.Permanent(err)
	}
	if errors.Is(err, ErrRunNotFound) && t.Attempt >= missingRunAttempts {
		return framework.Permanent(fmt.Errorf("%w (expired after its retention, or purged): task %s is orphaned", err, t.ID))
	}
	if errors.Is(err, ErrRunNotFound) {
		return framework.RetryAfterErr(time.Second, err)
	}
	return err
}
