package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	if src == nil {
		return nil // reported as an unknown dependency
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
		r, st, err := rt.read(sctx, d, runID, sd.name, func(st *StepStatus) bool { return st.State == StepPending })
		if err != nil {
			return loadErr(t, err)
		}
		switch {
		case st == nil:
			return framework.Permanent(fmt.Errorf("workflow: run %s of %s has no step %q: the definition changed under a running run (give a changed workflow a new name)",
				runID, d.name, sd.name))
		case st.State == StepPending:
			return framework.RetryAfterErr(time.Second, fmt.Errorf("workflow: run %s: step %s has a task but is still pending in the run document", runID, sd.name))
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

// ttl sets the message TTL of a fan-out message: the workflow's
// retention.
func (rt *runtime) ttl(d *Definition, m *nats.Msg) {
	m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64(max(d.retention, time.Second)/time.Second), 10))
}

// putInputs stores each item on its subject.
func (rt *runtime) putInputs(ctx context.Context, d *Definition, runID, step string, items []json.RawMessage) error {
	msgs := make([]*nats.Msg, len(items))
	for i, it := range items {
		msgs[i] = &nats.Msg{Subject: rt.store.inSubject(runID, step, i), Data: it, Header: nats.Header{}}
		rt.ttl(d, msgs[i])
	}
	return rt.publishWindowed(ctx, msgs)
}

// publishWindowed publishes msgs as publishTasks does, at most 1,024
// awaiting their acknowledgements at a time (a fan-out may have 100,000).
func (rt *runtime) publishWindowed(ctx context.Context, msgs []*nats.Msg) error {
	const window = 1024
	for len(msgs) > 0 {
		n := min(len(msgs), window)
		if err := rt.store.publishTasks(ctx, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// put stores data on subject of the run stream, expecting its last
// sequence to be expect (0: no message); errConflict when it is not.
func (rt *runtime) put(ctx context.Context, d *Definition, subject string, data []byte, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	rt.ttl(d, m)
	resp, err := rt.store.nc.RequestMsgWithContext(ctx, m)
	var seq uint64
	if err == nil {
		seq, err = rt.store.parseAck(resp)
	}
	if err != nil {
		return 0, rt.store.publishErr(subject, err)
	}
	return seq, nil
}

// putFan creates the fan-out state fs (errConflict when it exists).
func (rt *runtime) putFan(ctx context.Context, d *Definition, runID, step string, fs *fanState) error {
	data, err := json.Marshal(fs)
	if err != nil {
		return err
	}
	_, err = rt.put(ctx, d, rt.store.fanSubject(runID, step), data, 0)
	return err
}

// last reads the last message on subject of the run stream: from the
// leader when leader is set, else by a direct get. It returns nil data
// and no error when there is none.
func (s *store) last(ctx context.Context, subject string, leader bool) ([]byte, uint64, error) {
	if leader {
		data, seq, err := s.lastFromLeader(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, nil
		}
		return data, seq, err
	}
	st, err := s.runStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return m.Data, m.Sequence, nil
}

// loadFan reads the fan-out state of step of run runID; nil when there is
// none.
func (s *store) loadFan(ctx context.Context, runID, step string, leader bool) (*fanState, error) {
	data, seq, err := s.last(ctx, s.fanSubject(runID, step), leader)
	if err != nil || data == nil {
		return nil, err
	}
	fs := new(fanState)
	if err := json.Unmarshal(data, fs); err != nil {
		return nil, fmt.Errorf("%w: fan-out %s of run %s: %w", errCorrupt, step, runID, err)
	}
	if fs.Total < 0 || fs.Total > MaxItems || len(fs.Counted) != (fs.Total+7)/8 || fs.Released > fs.Total || fs.Done > fs.Total {
		return nil, fmt.Errorf("%w: fan-out %s of run %s: inconsistent counts", errCorrupt, step, runID)
	}
	fs.seq = seq
	return fs, nil
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

// count counts item i (failed: its result is an error) in the fan-out
// state, releasing the next item, and completes the step when i was the
// last. An item counted already only sends the tasks in flight again.
func (rt *runtime) count(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, i int, failed bool) error {
	fs, next, unsure, err := rt.countLocked(sctx, d, sd, r.ID, i, failed)
	switch {
	case err != nil:
		return err
	case fs == nil && (t.Attempt > 1 || unsure):
		// Counted already, by this task's previous delivery (which may
		// have died before sending the task it released) or by a write
		// of this one whose answer was lost.
		return rt.releaseAgain(sctx, t, d, sd, r)
	case fs == nil:
		return nil
	}
	if err := rt.store.publishTasks(sctx, next); err != nil {
		// Sent again when this task is redelivered (releaseAgain).
		return fmt.Errorf("workflow: release the next item of step %s of run %s: %w", sd.name, r.ID, err)
	}
	if fs.Done < fs.Total {
		return nil
	}
	return rt.completeFanOut(ctx, sctx, t, d, sd, r.ID, fs)
}

// countLocked counts item i under the worker's lock of the fan-out and
// returns the state written and the task it released; a nil state when
// the item was counted already (unsure: maybe by a write of this call
// whose answer was lost). The items of one fan-out that finish on
// one worker count one at a time (a striped lock): they would only
// conflict on the guard otherwise, and each conflict costs a read and a
// retry (with 200 in flight, a fifth of the rate). The guard still orders
// the counts of different workers.
func (rt *runtime) countLocked(ctx context.Context, d *Definition, sd *stepDef, runID string, i int, failed bool) (fs *fanState, next []*nats.Msg, unsure bool, err error) {
	lock := rt.counting.lock(runID, sd.name)
	lock.Lock()
	defer lock.Unlock()
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, countWriteTimeout)
		fs, err := rt.store.loadFan(rctx, runID, sd.name, attempt > 0)
		cancel()
		if err != nil && ctx.Err() == nil && attempt < maxConflictRetries && !errors.Is(err, errCorrupt) {
			// Unanswered or refused during a leader change: try again.
			if !backOff(ctx, attempt) {
				return nil, nil, unsure, ctx.Err()
			}
			continue
		}
		if err != nil {
			return nil, nil, unsure, fmt.Errorf("workflow: read the fan-out of step %s of run %s: %w", sd.name, runID, err)
		}
		if fs == nil || i >= fs.Total {
			return nil, nil, unsure, framework.Permanent(fmt.Errorf("%w: run %s: fan-out of step %s has no item %d (its state expired, or was purged)", ErrNoOutput, runID, sd.name, i))
		}
		if fs.counted(i) {
			return nil, nil, unsure, nil
		}
		fs.Counted[i/8] |= 1 << (i % 8)
		fs.Done++
		if failed {
			fs.Failed++
		}
		var next []*nats.Msg
		if fs.Released < fs.Total {
			next = append(next, itemTask(rt, d, runID, sd.name, fs.Released))
			fs.Released++
		}
		data, err := json.Marshal(fs)
		if err != nil {
			return nil, nil, unsure, err
		}
		// A write whose answer is lost (a leader change) is not waited
		// for as long as ctx allows: other items wait for the lock. It is
		// read again from the leader, which says whether it was stored.
		pctx, cancel := context.WithTimeout(ctx, countWriteTimeout)
		_, err = rt.put(pctx, d, rt.store.fanSubject(runID, sd.name), data, fs.seq)
		cancel()
		if err == nil {
			return fs, next, unsure, nil
		}
		if !errors.Is(err, errConflict) {
			if ctx.Err() != nil || attempt >= maxConflictRetries {
				return nil, nil, true, fmt.Errorf("workflow: count item %d of step %s of run %s: %w", i, sd.name, runID, err)
			}
			unsure = true
		}
		if attempt >= maxConflictRetries {
			return nil, nil, unsure, fmt.Errorf("%w: fan-out %s of run %s after %d attempts", ErrConflict, sd.name, runID, attempt+1)
		}
		if !backOff(ctx, attempt) {
			return nil, nil, unsure, fmt.Errorf("workflow: count item %d of step %s of run %s: %w", i, sd.name, runID, ctx.Err())
		}
	}
}

// countWriteTimeout bounds one read and one write of a fan-out's count.
const countWriteTimeout = 5 * time.Second

// countLocks serialise the counts of the fan-outs of one worker: a fan-out
// always takes the same of its 64 locks.
type countLocks [64]sync.Mutex

func (l *countLocks) lock(runID, step string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(runID))
	h.Write([]byte(step))
	return &l[h.Sum32()%uint32(len(l))]
}

// completeFanOut completes the ForEach step whose items are all counted:
// the run document records its output, and the steps after it are
// enqueued, once (the document's guard decides among concurrent callers).
// A step chained after it runs on t, under ctx.
func (rt *runtime) completeFanOut(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, runID string, fs *fanState) error {
	out, _ := json.Marshal(FanOut{Items: fs.Total, Failed: fs.Failed})
	r, err := rt.store.load(sctx, runID)
	if err != nil {
		return loadErr(t, err)
	}
	st := r.Step(sd.name)
	if st == nil || st.State != StepFanningOut {
		// Completed already: its children may still lack their tasks.
		return rt.resend(sctx, t, d, r, sd.name)
	}
	r, chained, err := rt.recordDone(sctx, d, sd, r, out, st.Attempts, st.StartedAt)
	if err != nil {
		return err
	}
	return rt.runChain(ctx, sctx, t, d, r, chained)
}

// resultReaders bounds the concurrent reads of one [Results] call.
const resultReaders = 32

// ItemResults returns the results of ForEach step step, in item order: each
// item's value decoded into an R, or its error (wrapping [ErrItemFailed])
// with [CollectErrors]. The calling step must depend on step, directly or
// transitively. It reads one message per item, 32 at a time.
//
// Errors: [ErrNotInStep] outside a step handler, [ErrNoOutput] for a step
// that is not an ancestor, not a ForEach step or whose results expired,
// or a read or decoding error.
func ItemResults[R any](ctx context.Context, step string) ([]ItemResult[R], error) {
	sc := fromContext(ctx)
	if sc == nil {
		return nil, ErrNotInStep
	}
	if !sc.info.Compensation {
		if cur := sc.def.step(sc.info.Step); cur == nil || !cur.ancestors[step] {
			return nil, fmt.Errorf("%w: step %q does not depend on %q (declare it with workflow.After)", ErrNoOutput, sc.info.Step, step)
		}
	}
	sd := sc.def.step(step)
	st := sc.run.Step(step)
	if sd == nil || sd.fan == nil || st == nil || st.State != StepDone {
		return nil, fmt.Errorf("%w: step %q of run %s is no completed ForEach step", ErrNoOutput, step, sc.info.RunID)
	}
	out := make([]ItemResult[R], st.Items)
	errs := make([]error, st.Items)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(resultReaders, st.Items) {
		wg.Go(func() {
			for i := range next {
				subj := sc.store.outSubject(sc.info.RunID, step, i)
				data, _, err := sc.store.last(ctx, subj, false)
				if err == nil && data == nil {
					// A replica may lag behind the leader that stored it.
					data, _, err = sc.store.last(ctx, subj, true)
				}
				var res itemResult
				switch {
				case err != nil:
					errs[i] = fmt.Errorf("workflow: read the result of item %d of step %s: %w", i, step, err)
				case data == nil:
					errs[i] = fmt.Errorf("%w: result of item %d of step %s of run %s is gone (expired after the workflow's retention, or purged)", ErrNoOutput, i, step, sc.info.RunID)
				case json.Unmarshal(data, &res) != nil:
					errs[i] = fmt.Errorf("%w: result of item %d of step %s", errCorrupt, i, step)
				case res.Error != "":
					out[i].Err = fmt.Errorf("%w: item %d: %s", ErrItemFailed, i, res.Error)
				default:
					if err := decode(res.Value, &out[i].Value); err != nil {
						errs[i] = fmt.Errorf("workflow: decode the result of item %d of step %s into %T: %w", i, step, out[i].Value, err)
					}
				}
			}
		})
	}
	for i := range st.Items {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Results returns the results of ForEach step step, in item order, decoded
// into Rs. When an item failed ([CollectErrors]) it returns an error
// wrapping [ErrItemFailed]; use [ItemResults] to see every item's outcome.
// Otherwise it is [ItemResults].
func Results[R any](ctx context.Context, step string) ([]R, error) {
	all, err := ItemResults[R](ctx, step)
	if err != nil {
		return nil, err
	}
	vals := make([]R, len(all))
	var errs []error
	for i, r := range all {
		vals[i] = r.Value
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("workflow: %d of %d items of step %s failed: %w", len(errs), len(all), step, errors.Join(errs...))
	}
	return vals, nil
}

// progress fills in ItemsDone and ItemsFailed of the fanning-out steps of
// r from their fan-out states.
func (s *store) progress(ctx context.Context, r *Run) error {
	for _, st := range r.Steps {
		if st.State != StepFanningOut {
			continue
		}
		fs, err := s.loadFan(ctx, r.ID, st.Name, false)
		if err != nil {
			return err
		}
		if fs != nil {
			st.ItemsDone, st.ItemsFailed = fs.Done, fs.Failed
		}
	}
	return nil
}

// fanDone sets the item counts of ForEach step st, which completed with
// output out (a [FanOut]).
func fanDone(st *StepStatus, out json.RawMessage) {
	var fo FanOut
	if json.Unmarshal(out, &fo) == nil {
		st.Items, st.ItemsDone, st.ItemsFailed = fo.Items, fo.Items, fo.Failed
	}
}
