package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Limits of a definition.
const (
	// MaxNameLen is the longest workflow or step name, in bytes.
	MaxNameLen = 32
	// MaxSteps is the largest number of steps of one workflow; it bounds
	// the size of a run document and the tasks one commit sends.
	MaxSteps = 500
)

// Defaults of a [Definition].
const (
	// DefaultRetention is how long the document of a finished run is kept.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxOutputBytes caps the JSON encoding of one step's output.
	DefaultMaxOutputBytes = 64 << 10
)

// Definition is a named directed acyclic graph of steps. Build it with [New]
// and [Step], then give it to [Register] (workers) and [NewClient]
// (producers). Problems found while building are collected and reported
// together by [Definition.Validate]; registering an invalid definition
// panics. A definition must not change once registered. Methods are safe for
// concurrent use.
type Definition struct {
	name      string
	priority  framework.Priority
	retention time.Duration
	maxOutput int
	chain     chainMode

	mu       sync.Mutex
	steps    []*stepDef
	byName   map[string]*stepDef
	problems []error
	frozen   bool
	order    []*stepDef // topological order, set by freeze
}

// stepDef is one declared step with its type-erased functions.
type stepDef struct {
	name        string
	after       []string
	ancestors   map[string]bool // transitive dependencies, set by validation
	run         func(ctx context.Context, in json.RawMessage) (json.RawMessage, error)
	compensate  func(ctx context.Context, in, out json.RawMessage) error
	checkInput  func(in json.RawMessage) error
	taskOpts    []framework.HandlerOption
	compOpts    []framework.HandlerOption
	inType      reflect.Type
	outType     reflect.Type
	declaration int
	kind        stepKind      // a plain step, a sleep (sleep.go) or a wait for an event (events.go)
	timeout     time.Duration // of a wait ([Timeout]); 0: none
	onTimeout   TimeoutAction
	fan         *fanDef     // of a ForEach step (fanout.go)
	maxParallel int         // [MaxParallel] as given; 0: not given
	collect     bool        // [CollectErrors] given
	child       *Definition // the workflow a step of [Child] starts
}

// stepKind says how a step's task runs it.
type stepKind uint8

const (
	kindStep   stepKind = iota // runs its function and completes
	kindSleep                  // runs its function for a wake time, then sleeps until it
	kindWait                   // runs its function for an event key, then waits for the event
	kindFanOut                 // runs one task per item of a list, then completes ([ForEach])
	kindChild                  // starts a child run, then waits for it to end ([Child])
)

// chainable reports whether the step may run on the task of the step before
// it ([WithChaining]): a plain step without task options of its own.
func (sd *stepDef) chainable() bool { return sd.kind == kindStep && len(sd.taskOpts) == 0 }

// Option configures a [Definition] at [New].
type Option func(*Definition) error

// WithPriority sets the priority of every task of the workflow's runs (steps
// and compensations). Workers register the workflow's task types for this
// priority only. Default [framework.PriorityNormal].
func WithPriority(p framework.Priority) Option {
	return func(d *Definition) error {
		if !p.Valid() {
			return fmt.Errorf("%w: priority %d", ErrInvalidOption, uint8(p))
		}
		d.priority = p
		return nil
	}
}

// WithRetention sets how long the state document of a finished run (completed,
// failed or cancelled) is kept for inspection before the server deletes it.
// It must be at least one second. Default 7 days.
func WithRetention(d time.Duration) Option {
	return func(def *Definition) error {
		if d < time.Second {
			return fmt.Errorf("%w: retention %v, want ≥ 1s", ErrInvalidOption, d)
		}
		def.retention = d
		return nil
	}
}

// chainMode is whether a definition's steps are chained: chainAuto (the
// default: on a worker without middleware of its own), chainOn
// ([WithChaining]) or chainOff ([WithoutChaining]).
type chainMode int8

const (
	chainAuto chainMode = iota
	chainOn
	chainOff
)

// WithoutChaining gives every step a task of its own ([WithChaining] says
// what chaining changes): for workflows whose steps should each show in the
// queues, the hooks and the metrics of their own task, or run under a
// timeout of their own without [WithTaskOptions].
func WithoutChaining() Option {
	return func(d *Definition) error {
		d.chain = chainOff
		return nil
	}
}

// WithChaining lets a step that the completion of another step makes ready
// run right after it, on the same worker and the same task, instead of on a
// task of its own: the run document is still written after every step (the
// outputs, states and guards are those of an unchained run), but the chained
// step's task is neither published, delivered nor acknowledged, and its
// document is not read again. A chain of short steps runs about twice as
// fast, and waits in no queue between its steps.
//
// Only steps without [WithTaskOptions] are chained. A chained step runs
// under the task of the step before it: with that task's options (its
// timeout covers the chain), hooks and metrics; it is no task of its own and
// does not show in the queues; its Attempt is 1. When a step unlocks
// several, the first in declaration order is chained and the others get
// their tasks as usual. A chained step that fails with an error that is not
// permanent is handed to a task of its own, which retries it as any step; so
// is the next step when the worker shuts down, and every 17th step of a
// chain. When the worker dies in a chain, the task that carries it is
// redelivered and sends the tasks of the steps it left enqueued. See
// docs/decisions/034-chained-steps.md.
//
// Chaining is the default on a worker without middleware of its own
// (framework.WithMiddleware), which would not wrap the chained steps
// (decision 048); WithChaining turns it on there too, [WithoutChaining]
// off everywhere.
func WithChaining() Option {
	return func(d *Definition) error {
		d.chain = chainOn
		return nil
	}
}

// WithMaxOutputBytes caps the JSON encoding of one step's output. A larger
// output fails the step permanently with [ErrOutputTooLarge]: outputs live in
// the run document, so keep them small (IDs, amounts) and store bulky data
// elsewhere. Default 64 KiB.
func WithMaxOutputBytes(n int) Option {
	return func(d *Definition) error {
		if n < 1 {
			return fmt.Errorf("%w: max output bytes %d, want ≥ 1", ErrInvalidOption, n)
		}
		d.maxOutput = n
		return nil
	}
}

// New starts the definition of the workflow name. Names are 1 to
// [MaxNameLen] bytes of a-z, 0-9 and '-'. Problems (an invalid name or
// option) are reported by [Definition.Validate].
func New(name string, opts ...Option) *Definition {
	d := &Definition{
		name:      name,
		retention: DefaultRetention,
		maxOutput: DefaultMaxOutputBytes,
		byName:    make(map[string]*stepDef),
	}
	if err := validateName(name, false); err != nil {
		d.problems = append(d.problems, fmt.Errorf("workflow name: %w", err))
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			d.problems = append(d.problems, err)
		}
	}
	return d
}

// Name returns the workflow's name.
func (d *Definition) Name() string { return d.name }

// Priority returns the priority of the workflow's tasks ([WithPriority]).
func (d *Definition) Priority() framework.Priority { return d.priority }

// Steps returns the step names in a topological order (every step after the
// steps it depends on; ties in declaration order). It returns nil while the
// definition is invalid.
func (d *Definition) Steps() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	order, err := d.validateLocked()
	if err != nil {
		return nil
	}
	names := make([]string, len(order))
	for i, s := range order {
		names[i] = s.name
	}
	return names
}

// StepTaskType returns the task type of a step of workflow wf:
// "wf.<workflow>.<step>". Task types starting with "wf." and "wfc." are
// reserved for workflows.
func StepTaskType(wf, step string) string { return "wf." + wf + "." + step }

// CompensationTaskType returns the task type of a step's compensation:
// "wfc.<workflow>.<step>".
func CompensationTaskType(wf, step string) string { return "wfc." + wf + "." + step }

// StepOption configures one step at [Step].
type StepOption func(*stepConfig) error

type stepConfig struct {
	after      []string
	compensate any // func(context.Context, In, Out) error
	compIn     reflect.Type
	compOut    reflect.Type
	taskOpts   []framework.HandlerOption
	compOpts   []framework.HandlerOption
	timeout    time.Duration
	onTimeout  TimeoutAction
	parallel   int
	collect    bool
}

// After declares the steps that must complete before this one starts. A step
// without dependencies starts when the run starts. Several steps after the
// same one run in parallel (fan-out); a step after several waits for all of
// them (fan-in).
func After(steps ...string) StepOption {
	return func(c *stepConfig) error {
		c.after = append(c.after, steps...)
		return nil
	}
}

// Compensate declares how to undo a completed step when the run fails later
// (a saga). fn receives the run's input and the step's own output. When a
// step fails for good, the compensations of the completed steps run one at a
// time, in reverse order of completion, each as a task with the normal retry
// machinery; a compensation should therefore be idempotent. In and Out must
// match the step's types.
func Compensate[In, Out any](fn func(ctx context.Context, in In, out Out) error) StepOption {
	return func(c *stepConfig) error {
		if fn == nil {
			return fmt.Errorf("%w: nil compensation", ErrInvalidOption)
		}
		c.compensate = fn
		c.compIn = reflect.TypeFor[In]()
		c.compOut = reflect.TypeFor[Out]()
		return nil
	}
}

// WithTaskOptions sets handler options of the step's task type (attempts,
// backoff, timeout, ack wait, concurrency…), as for [framework.Worker.Register].
// Default: the framework's defaults.
func WithTaskOptions(opts ...framework.HandlerOption) StepOption {
	return func(c *stepConfig) error {
		c.taskOpts = append(c.taskOpts, opts...)
		return nil
	}
}

// WithCompensationOptions sets handler options of the step's compensation
// task type. Default: the framework's defaults (25 attempts).
func WithCompensationOptions(opts ...framework.HandlerOption) StepOption {
	return func(c *stepConfig) error {
		c.compOpts = append(c.compOpts, opts...)
		return nil
	}
}

// Step adds the step name to d. Step names are 1 to [MaxNameLen] bytes of
// a-z, 0-9, '_' and '-'. fn runs as the handler of task type
// [StepTaskType]; it receives the run's input (the value given to
// [Client.Start], decoded from JSON into In; a zero-size In such as struct{}
// skips decoding) and its result is stored as the step's output, encoded as
// JSON. Steps that depend on it read that output with [Output].
//
// The returned error decides what happens, as for any task: nil completes
// the step; [framework.Permanent] fails it at once; any other error retries
// it with backoff until its attempts run out, then fails it. A failed step
// fails the run and starts the compensations ([Compensate]).
//
// Problems (invalid name, duplicate, nil fn, bad option) are reported by
// [Definition.Validate]. Step panics when d was already registered.
func Step[In, Out any](d *Definition, name string, fn func(ctx context.Context, in In) (Out, error), opts ...StepOption) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		panic(fmt.Sprintf("workflow: step %q added to workflow %q after it was registered", name, d.name))
	}
	problem := func(err error) { d.problems = append(d.problems, fmt.Errorf("step %q: %w", name, err)) }
	if err := validateName(name, true); err != nil {
		problem(err)
		return
	}
	if _, dup := d.byName[name]; dup {
		problem(fmt.Errorf("%w: declared twice", ErrDuplicateStep))
		return
	}
	if fn == nil {
		problem(fmt.Errorf("%w: nil step function", ErrInvalidOption))
		return
	}
	var cfg stepConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			problem(err)
		}
	}
	inT, outT := reflect.TypeFor[In](), reflect.TypeFor[Out]()
	sd := &stepDef{
		name:        name,
		taskOpts:    cfg.taskOpts,
		compOpts:    cfg.compOpts,
		timeout:     cfg.timeout,
		onTimeout:   cfg.onTimeout,
		maxParallel: cfg.parallel,
		collect:     cfg.collect,
		inType:      inT,
		outType:     outT,
		declaration: len(d.steps),
	}
	for _, a := range cfg.after {
		if !slices.Contains(sd.after, a) {
			sd.after = append(sd.after, a)
		}
	}
	sd.checkInput = func(in json.RawMessage) error {
		var v In
		return decode(in, &v)
	}
	sd.run = func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		var v In
		if err := decode(in, &v); err != nil {
			return nil, framework.Permanent(fmt.Errorf("%w: decode run input into %v: %w", ErrInvalidInput, inT, err))
		}
		out, err := fn(ctx, v)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, framework.Permanent(fmt.Errorf("workflow: encode output %v of step %q: %w", outT, name, err))
		}
		return b, nil
	}
	if cfg.compensate != nil {
		comp, ok := cfg.compensate.(func(context.Context, In, Out) error)
		if !ok {
			problem(fmt.Errorf("%w: compensation takes (%v, %v), the step has input %v and output %v",
				ErrInvalidOption, cfg.compIn, cfg.compOut, inT, outT))
		} else {
			sd.compensate = func(ctx context.Context, in, out json.RawMessage) error {
				var v In
				if err := decode(in, &v); err != nil {
					return framework.Permanent(fmt.Errorf("%w: decode run input into %v: %w", ErrInvalidInput, inT, err))
				}
				var o Out
				if err := decode(out, &o); err != nil {
					return framework.Permanent(fmt.Errorf("workflow: decode output of step %q into %v: %w", name, outT, err))
				}
				return comp(ctx, v, o)
			}
		}
	}
	d.steps = append(d.steps, sd)
	d.byName[name] = sd
}
