package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Limits of a definition.
const (
	// MaxNameLen is the longest workflow or step name, in bytes.
	MaxNameLen = 32
	// MaxSteps is the largest number of steps of one workflow. Starting a
	// run or finishing a step commits the run document and the tasks it
	// enqueues in one atomic batch, which the server caps at 1,000 messages.
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
}

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

// Validate reports every problem of the definition as a *[DefinitionError]
// (nil when it is valid): invalid names or options, duplicate steps,
// dependencies on unknown steps, cycles, no steps at all.
func (d *Definition) Validate() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.validateLocked()
	return err
}

// freeze validates d and forbids further changes.
func (d *Definition) freeze() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		return nil
	}
	order, err := d.validateLocked()
	if err != nil {
		return err
	}
	d.order = order
	d.frozen = true
	return nil
}

// step returns the declared step name, or nil. Only for frozen definitions.
func (d *Definition) step(name string) *stepDef { return d.byName[name] }

func (d *Definition) validateLocked() ([]*stepDef, error) {
	if d.frozen {
		return d.order, nil
	}
	problems := slices.Clone(d.problems)
	if len(d.steps) == 0 && len(problems) == 0 {
		problems = append(problems, fmt.Errorf("%w: declare at least one with workflow.Step", ErrNoSteps))
	}
	if len(d.steps) > MaxSteps {
		problems = append(problems, fmt.Errorf("%w: %d steps, the limit is %d", ErrInvalidOption, len(d.steps), MaxSteps))
	}
	for _, s := range d.steps {
		for _, a := range s.after {
			switch {
			case a == s.name:
				problems = append(problems, fmt.Errorf("step %q: %w: it depends on itself", s.name, ErrCycle))
			case d.byName[a] == nil:
				problems = append(problems, fmt.Errorf("step %q: %w %q in After (declared steps: %s)",
					s.name, ErrUnknownStep, a, strings.Join(d.stepNamesLocked(), ", ")))
			}
		}
	}
	if len(problems) > 0 {
		return nil, &DefinitionError{Workflow: d.name, Problems: problems}
	}
	order, cycle := topoSort(d.steps, d.byName)
	if cycle != nil {
		return nil, &DefinitionError{Workflow: d.name, Problems: []error{
			fmt.Errorf("%w: %s", ErrCycle, strings.Join(cycle, " → ")),
		}}
	}
	// Transitive dependencies, in topological order so parents are complete.
	for _, s := range order {
		s.ancestors = make(map[string]bool)
		for _, a := range s.after {
			s.ancestors[a] = true
			for anc := range d.byName[a].ancestors {
				s.ancestors[anc] = true
			}
		}
	}
	return order, nil
}

func (d *Definition) stepNamesLocked() []string {
	names := make([]string, len(d.steps))
	for i, s := range d.steps {
		names[i] = s.name
	}
	return names
}

// topoSort orders steps so that each comes after its dependencies (Kahn's
// algorithm, ties in declaration order). When the graph has a cycle it
// returns one cycle as a path whose first and last names are equal.
func topoSort(steps []*stepDef, byName map[string]*stepDef) ([]*stepDef, []string) {
	indeg := make(map[string]int, len(steps))
	children := make(map[string][]*stepDef, len(steps))
	for _, s := range steps {
		indeg[s.name] = len(s.after)
		for _, a := range s.after {
			children[a] = append(children[a], s)
		}
	}
	var ready, order []*stepDef
	for _, s := range steps {
		if indeg[s.name] == 0 {
			ready = append(ready, s)
		}
	}
	for len(ready) > 0 {
		slices.SortFunc(ready, func(a, b *stepDef) int { return a.declaration - b.declaration })
		s := ready[0]
		ready = ready[1:]
		order = append(order, s)
		for _, c := range children[s.name] {
			indeg[c.name]--
			if indeg[c.name] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(order) == len(steps) {
		return order, nil
	}
	// Walk dependencies from a step left in the cycle until one repeats.
	var start *stepDef
	for _, s := range steps {
		if indeg[s.name] > 0 {
			start = s
			break
		}
	}
	seen := map[string]int{}
	var path []string
	for cur := start; ; {
		if i, ok := seen[cur.name]; ok {
			cycle := append(path[i:], cur.name)
			// path follows dependencies (child → parent); show it in
			// execution order (parent → child).
			slices.Reverse(cycle)
			return nil, cycle
		}
		seen[cur.name] = len(path)
		path = append(path, cur.name)
		var next *stepDef
		for _, a := range cur.after {
			if indeg[a] > 0 {
				next = byName[a]
				break
			}
		}
		if next == nil {
			return nil, []string{start.name} // unreachable for a real cycle
		}
		cur = next
	}
}

// validateName checks a workflow name (a-z 0-9 -) or a step name (also _).
// Workflow names exclude '_' because consumer names replace dots with
// underscores: "wf.<workflow>.<step>" must map to a unique consumer.
func validateName(name string, step bool) error {
	what, allowed := "workflow name", "a-z 0-9 -"
	if step {
		what, allowed = "step name", "a-z 0-9 _ -"
	}
	if name == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidName, what)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s %q is %d bytes, the limit is %d", ErrInvalidName, what, name, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || (step && c == '_') {
			continue
		}
		return fmt.Errorf("%w: %s %q contains %q at byte %d (allowed: %s)", ErrInvalidName, what, name, rune(c), i, allowed)
	}
	return nil
}

// decode unmarshals JSON into v. Empty input and "null" leave the zero
// value; a zero-size struct type (such as struct{}) accepts anything.
func decode(data json.RawMessage, v any) error {
	t := reflect.TypeOf(v).Elem()
	if t.Kind() == reflect.Struct && t.Size() == 0 {
		return nil
	}
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	return json.Unmarshal(data, v)
}

// errString returns err's message, or "".
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
