package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
)

// Limits and defaults of [ForEach].
const (
	// MaxItems is the largest number of items one [ForEach] step fans out
	// to. A longer list fails the step with [ErrTooManyItems].
	MaxItems = 100_000
	// DefaultMaxParallel is how many items of one [ForEach] step of one run
	// run at once unless [MaxParallel] says otherwise.
	DefaultMaxParallel = 100
)

// HeaderItem carries the index of the item an item task of a [ForEach]
// step runs.
const HeaderItem = "Jetflow-Item"

var (
	// ErrTooManyItems reports a [ForEach] step whose list has more than
	// [MaxItems] items. The step fails permanently.
	ErrTooManyItems = errors.New("workflow: too many fan-out items")
	// ErrItemFailed wraps the error of an item of a [ForEach] step with
	// [CollectErrors], as [ItemResults] reports it, and is what [Results]
	// returns when an item failed.
	ErrItemFailed = errors.New("workflow: fan-out item failed")
)

// FanOut is the output of a [ForEach] step: how many items it ran, and how
// many of them failed ([CollectErrors]).
type FanOut struct {
	Items  int `json:"items"`
	Failed int `json:"failed"`
}

// ItemResult is the result of one item of a [ForEach] step, as
// [ItemResults] returns it: its Value, or its Err (wrapping
// [ErrItemFailed]) when it failed with [CollectErrors].
type ItemResult[R any] struct {
	Value R
	Err   error
}

// MaxParallel bounds how many items of a [ForEach] step of one run are
// enqueued or running at once, to n (1 to [MaxItems]): the step starts the
// first n, and each item that gets its result starts the next one. Only
// for ForEach steps. Default [DefaultMaxParallel].
func MaxParallel(n int) StepOption {
	return func(c *stepConfig) error {
		if n < 1 || n > MaxItems {
			return fmt.Errorf("%w: max parallel %d, want 1 to %d", ErrInvalidOption, n, MaxItems)
		}
		c.parallel = n
		return nil
	}
}

// CollectErrors lets every item of a [ForEach] step run even when some
// fail for good: a failed item's error becomes its result, which
// [ItemResults] reports, and the step completes when every item has a
// result. Only for ForEach steps. Default: fail fast (the first item to
// fail for good fails the step and the run, and the compensations of the
// completed steps run; items still running finish but start no others).
func CollectErrors() StepOption {
	return func(c *stepConfig) error {
		c.collect = true
		return nil
	}
}

// fanDef is what a [ForEach] step adds to its stepDef.
type fanDef struct {
	itemsFrom string
	itemType  reflect.Type
	run       func(ctx context.Context, item json.RawMessage) (json.RawMessage, error)
}

// ForEach adds the step name to d: a fan-out over the list that step
// itemsFrom returns (its output must be a []Item). It runs after
// itemsFrom (and any step of [After]) and calls fn once per item, each
// item on a task of its own (task type [StepTaskType] of name, with header
// [HeaderItem]), with the usual retries; at most [MaxParallel] items of a
// run at once. fn may read the outputs of the step's ancestors with
// [Output]. The step completes when every item has its result; its output
// is a [FanOut]. The steps after it read the results, in item order, with
// [Results] or [ItemResults].
//
// An item that fails for good fails the step and the run (compensations of
// the completed steps run as for any step), unless the step has
// [CollectErrors]. A list of more than [MaxItems] items fails the step with
// [ErrTooManyItems]; an item or a result whose JSON is over the workflow's
// [WithMaxOutputBytes] fails it with [ErrOutputTooLarge]. The itemsFrom
// step's output lives in the run document: raise WithMaxOutputBytes for a
// long list, or keep its items small (IDs).
//
// Items and results are kept out of the run document, each in a message of
// its own in the run stream, for the workflow's retention ([WithRetention])
// after they were written: the steps after the fan-out must start within
// it. An item runs at least once; its first result is kept and counted
// once. See docs/decisions/044-workflow-fan-out.md.
//
// Options are those of [Step] plus [MaxParallel] and [CollectErrors]. A
// ForEach step is never chained ([WithChaining]).
func ForEach[Item, Result any](d *Definition, name, itemsFrom string, fn func(ctx context.Context, item Item) (Result, error), opts ...StepOption) {
	if fn == nil {
		d.mu.Lock()
		d.problems = append(d.problems, fmt.Errorf("step %q: %w: nil item function", name, ErrInvalidOption))
		d.mu.Unlock()
		return
	}
	Step(d, name, func(context.Context, struct{}) (FanOut, error) {
		// Never called: the fan-out handler runs the items.
		return FanOut{}, nil
	}, append([]StepOption{After(itemsFrom)}, opts...)...)
	itemT, resT := reflect.TypeFor[Item](), reflect.TypeFor[Result]()
	d.mu.Lock()
	defer d.mu.Unlock()
	sd := d.byName[name]
	if sd == nil || d.frozen || sd.kind != kindStep || sd.fan != nil {
		return
	}
	sd.kind = kindFanOut
	sd.fan = &fanDef{itemsFrom: itemsFrom, itemType: itemT, run: func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		var v Item
		if err := decode(raw, &v); err != nil {
			return nil, framework.Permanent(fmt.Errorf("%w: decode item into %v: %w", ErrInvalidInput, itemT, err))
		}
		out, err := fn(ctx, v)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, framework.Permanent(fmt.Errorf("workflow: encode result %v of step %q: %w", resT, name, err))
		}
		return b, nil
	}}
}

// checkFanOut reports the problems of step s that concern fan-outs: the
// options of ForEach on another step, and a list step whose output is not
// a list of the items. d.mu is held.
func (d *Definition) checkFanOut(s *stepDef) []error {
	if s.fan == nil {
		if s.maxParallel != 0 || s.collect {
			return []error{fmt.Errorf("step %q: %w: MaxParallel and CollectErrors apply to ForEach steps only", s.name, ErrInvalidOption)}
		}
		return nil
	}
	src := d.byName[s.fan.itemsFrom]
	if src == nil || src.kind == kindChild {
		// Reported as an unknown dependency; or a child's output, whose
		// type is the child workflow's (checked when the items decode).
		return nil
	}
	if want := reflect.SliceOf(s.fan.itemType); src.outType != want {
		return []error{fmt.Errorf("step %q: %w: it fans out over the output of step %q, a %v; want a %v",
			s.name, ErrInvalidOption, src.name, src.outType, want)}
	}
	return nil
}

// parallel returns the step's bound on items in flight.
func (sd *stepDef) parallel() int {
	if sd.maxParallel > 0 {
		return sd.maxParallel
	}
	return DefaultMaxParallel
}

// The subjects of a fan-out, in the run stream beside the run document
// ("<prefix>.wf.<run>"): its state, and each item's input and result.
func (s *store) fanSubject(run, step string) string { return s.names.RunSubject(run + ".fan." + step) }
func (s *store) inSubject(run, step string, i int) string {
	return s.names.RunSubject(run + ".in." + step + "." + strconv.Itoa(i))
}
func (s *store) outSubject(run, step string, i int) string {
	return s.names.RunSubject(run + ".out." + step + "." + strconv.Itoa(i))
}

// fanState is the state of one fan-out of one run, on its own subject:
// how many items there are, how many were released (their tasks sent),
// and which were counted (their results stored and taken into account).
// Every change is guarded by the subject's last sequence, so an item is
// counted once and exactly one item counts the last.
type fanState struct {
	Total    int    `json:"total"`
	Released int    `json:"released"`
	Done     int    `json:"done"`
	Failed   int    `json:"failed"`
	Counted  []byte `json:"counted"` // bit i: item i counted
	seq      uint64
}

func (f *fanState) counted(i int) bool { return f.Counted[i/8]&(1<<(i%8)) != 0 }

// itemResult is the message stored for one item's result.
type itemResult struct {
	Value json.RawMessage `json:"value,omitempty"`
	Error string          `json:"error,omitempty"`
}

// itemTask builds the task of item i of fan-out step of run runID; its ID
// is "<run>:<step>:<i>".
func itemTask(rt *runtime, d *Definition, runID, step string, i int) *nats.Msg {
	m := taskMsg(rt.names, d.priority, StepTaskType(d.name, step), runID, runID+":"+step+":"+strconv.Itoa(i))
	m.Header.Set(HeaderItem, strconv.Itoa(i))
	return m
}

// fanOutHandler runs the task of a ForEach step, and the tasks of its
// items (those with a [HeaderItem]).
func (rt *runtime) fanOutHandler(d *Definition, sd *stepDef) framework.HandlerFunc {
	return func(ctx context.Context, t *framework.Task) error {
		if h := t.Header(HeaderItem); h != "" {
			i, err := strconv.Atoi(h)
			if err != nil || i < 0 || i >= MaxItems {
				return framework.Permanent(fmt.Errorf("workflow: task %s: item index %q", t.ID, h))
			}
			return rt.runItem(ctx, t, d, sd, i)
		}
		runID := runIDOf(t)
		sctx, cancel := stateContext(ctx)
		defer cancel()
		r, st, err := rt.readStep(sctx, t, d, sd)
		if err != nil {
			return err
		}
		switch {
		case st.State == StepFanningOut:
			// Redelivered after the fan-out started: send the tasks of
			// the items in flight again.
			return rt.releaseAgain(sctx, t, d, sd, r)
		case !st.open():
			return rt.resend(sctx, t, d, r, sd.name)
		case r.Status != RunRunning:
			return rt.skip(sctx, t, r, sd.name)
		}
		started := time.Now().UTC()
		items, err := rt.listItems(d, sd, r)
		if err != nil {
			return rt.stepFailed(sctx, t, d, r, sd.name, err)
		}
		if len(items) == 0 {
			out, _ := json.Marshal(FanOut{})
			r, chained, err := rt.recordDone(sctx, d, sd, r, out, t.Attempt, started)
			if err != nil {
				return err
			}
			return rt.runChain(ctx, sctx, t, d, r, chained)
		}
		// Inputs first, then the state, then the document, then the
		// tasks: a task that died between two of them is redelivered and
		// does the rest (the inputs are written again alike, the state
		// is kept).
		if err := rt.putInputs(sctx, d, r.ID, sd.name, items); err != nil {
			return fmt.Errorf("workflow: store the items of step %s of run %s: %w", sd.name, runID, err)
		}
		fs := &fanState{Total: len(items), Released: min(len(items), sd.parallel()), Counted: make([]byte, (len(items)+7)/8)}
		if err := rt.putFan(sctx, d, r.ID, sd.name, fs); err != nil && !errors.Is(err, errConflict) {
			return fmt.Errorf("workflow: store the fan-out of step %s of run %s: %w", sd.name, runID, err)
		}
		r, err = rt.update(sctx, d, runID, r, func(r *Run) ([]*nats.Msg, bool, error) {
			st := r.Step(sd.name)
			if st == nil || !st.open() || r.Status != RunRunning {
				return nil, false, nil
			}
			st.State = StepFanningOut
			st.Items = len(items)
			st.Error = ""
			st.Attempts = t.Attempt
			st.StartedAt = started
			r.UpdatedAt = time.Now().UTC()
			return nil, true, nil
		})
		if err != nil {
			return fmt.Errorf("workflow: record the fan-out of step %s of run %s: %w", sd.name, runID, err)
		}
		if st := r.Step(sd.name); st == nil || st.State != StepFanningOut {
			return nil
		}
		return rt.releaseAgain(sctx, t, d, sd, r)
	}
}

// listItems splits the output of the step's list step into its items,
// checking their number and sizes.
func (rt *runtime) listItems(d *Definition, sd *stepDef, r *Run) ([]json.RawMessage, error) {
	src := r.Step(sd.fan.itemsFrom)
	if src == nil || src.Output == nil {
		return nil, framework.Permanent(fmt.Errorf("%w: step %q of run %s has no output to fan out over", ErrNoOutput, sd.fan.itemsFrom, r.ID))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(src.Output, &items); err != nil {
		return nil, framework.Permanent(fmt.Errorf("%w: output of step %q is not a list: %w", ErrInvalidInput, sd.fan.itemsFrom, err))
	}
	if len(items) > MaxItems {
		return nil, framework.Permanent(fmt.Errorf("%w: step %q returned %d items to fan out over, the limit is %d",
			ErrTooManyItems, sd.fan.itemsFrom, len(items), MaxItems))
	}
	for i, it := range items {
		if len(it) > d.maxOutput {
			return nil, framework.Permanent(fmt.Errorf("%w: item %d of step %q is %d bytes of JSON, the limit is %d (workflow.WithMaxOutputBytes)",
				ErrOutputTooLarge, i, sd.fan.itemsFrom, len(it), d.maxOutput))
		}
	}
	return items, nil
}

// releaseAgain sends the tasks of the items released and not yet counted
// (a duplicate of a task still queued is dropped by its ID), and
// completes the step when every item is counted.
func (rt *runtime) releaseAgain(ctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run) error {
	fs, err := rt.store.loadFan(ctx, r.ID, sd.name, true)
	if err != nil {
		return fmt.Errorf("workflow: read the fan-out of step %s of run %s: %w", sd.name, r.ID, err)
	}
	if fs == nil {
		return framework.Permanent(fmt.Errorf("%w: run %s: step %s fans out, but its state is gone (expired after the workflow's retention, or purged)",
			ErrNoOutput, r.ID, sd.name))
	}
	if fs.Done == fs.Total {
		return rt.completeFanOut(ctx, ctx, t, d, sd, r.ID, fs)
	}
	var tasks []*nats.Msg
	for i := range fs.Released {
		if !fs.counted(i) {
			tasks = append(tasks, itemTask(rt, d, r.ID, sd.name, i))
		}
	}
	if err := rt.publishWindowed(ctx, tasks); err != nil {
		return fmt.Errorf("workflow: send the item tasks of step %s of run %s: %w", sd.name, r.ID, err)
	}
	return nil
}

// runItem runs item i of ForEach step sd: unless its result is stored
// already, run the item function and store its result (the first one
// stored wins); then count it, which releases the next item, and complete
// the step if it was the last.
func (rt *runtime) runItem(ctx context.Context, t *framework.Task, d *Definition, sd *stepDef, i int) error {
	runID := runIDOf(t)
	sctx, cancel := stateContext(ctx)
	defer cancel()
	// An item task exists once the step fans out.
	r, st, err := rt.read(sctx, d, runID, sd.name, func(st *StepStatus) bool { return st.State == StepPending || st.open() })
	if err != nil {
		return loadErr(t, err)
	}
	switch {
	case st == nil:
		return framework.Permanent(fmt.Errorf("workflow: run %s of %s has no step %q", runID, d.name, sd.name))
	case st.State == StepPending || st.open():
		return framework.RetryAfterErr(time.Second, fmt.Errorf("workflow: run %s: item %d of step %s has a task but the step does not fan out yet", runID, i, sd.name))
	case st.State != StepFanningOut || r.Status != RunRunning:
		return nil // the step ended (the run failed, was cancelled, or a duplicate came late)
	case i >= st.Items:
		return framework.Permanent(fmt.Errorf("workflow: run %s: item %d of step %s, which has %d", runID, i, sd.name, st.Items))
	}
	res, err := rt.loadResult(sctx, runID, sd.name, i, false)
	if err != nil {
		return err
	}
	if res == nil {
		if res, err = rt.callItem(ctx, sctx, t, d, sd, r, i); res == nil {
			return err
		}
	}
	return rt.count(ctx, sctx, t, d, sd, r, i, res.Error != "")
}

// loadResult reads the stored result of item i (from the stream leader when
// leader is set); nil when there is none.
func (rt *runtime) loadResult(ctx context.Context, runID, step string, i int, leader bool) (*itemResult, error) {
	data, _, err := rt.store.last(ctx, rt.store.outSubject(runID, step, i), leader)
	if err != nil {
		return nil, fmt.Errorf("workflow: read the result of item %d of step %s of run %s: %w", i, step, runID, err)
	}
	if data == nil {
		return nil, nil
	}
	res := new(itemResult)
	if err := json.Unmarshal(data, res); err != nil {
		return nil, fmt.Errorf("%w: result of item %d of step %s of run %s: %w", errCorrupt, i, step, runID, err)
	}
	return res, nil
}

// callItem runs the item function on item i and stores its result. It
// returns the result stored (nil with the error to return when there is
// none to count: a retry, or a failure that fails the step).
func (rt *runtime) callItem(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, i int) (*itemResult, error) {
	in := rt.store.inSubject(r.ID, sd.name, i)
	data, _, err := rt.store.last(sctx, in, false)
	if err == nil && data == nil {
		// A replica may lag behind the leader that stored it.
		data, _, err = rt.store.last(sctx, in, true)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: read item %d of step %s of run %s: %w", i, sd.name, r.ID, err)
	}
	if data == nil {
		return nil, framework.Permanent(fmt.Errorf("%w: item %d of step %s of run %s is gone (expired after the workflow's retention, or purged)",
			ErrNoOutput, i, sd.name, r.ID))
	}
	sc := &stepCtx{info: StepInfo{RunID: r.ID, Workflow: d.name, Step: sd.name, Attempt: t.Attempt}, run: r, def: d, store: rt.store}
	out, cause := callStep(t, func() (json.RawMessage, error) { return sd.fan.run(withStep(ctx, sc), data) })
	if cause == nil && len(out) > d.maxOutput {
		cause = framework.Permanent(fmt.Errorf("%w: item %d of step %q returned %d bytes of JSON, the limit is %d (workflow.WithMaxOutputBytes)",
			ErrOutputTooLarge, i, sd.name, len(out), d.maxOutput))
	}
	res := &itemResult{Value: out}
	if cause != nil {
		if errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrRunFailed) {
			return nil, nil // the run ended ([Check]): the step is skipped
		}
		if !isFinal(t, cause) {
			return nil, cause
		}
		if !sd.collect {
			// Fail fast: the step fails, and with it the run.
			return nil, rt.stepFailed(sctx, t, d, r, sd.name, fmt.Errorf("item %d: %w", i, cause))
		}
		res = &itemResult{Error: errString(cause)}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, framework.Permanent(err)
	}
	if _, err := rt.put(sctx, d, rt.store.outSubject(r.ID, sd.name, i), b, 0); err != nil {
		if !errors.Is(err, errConflict) {
			return nil, fmt.Errorf("workflow: store the result of item %d of step %s of run %s: %w", i, sd.name, r.ID, err)
		}
		// Another delivery stored one first: count that one (read from
		// the leader, which has it).
		stored, err := rt.loadResult(sctx, r.ID, sd.name, i, true)
		if err == nil && stored == nil {
			err = fmt.Errorf("workflow: result of item %d of step %s of run %s: stored by another delivery, but not found", i, sd.name, r.ID)
		}
		return stored, err
	}
	return res, nil
}
