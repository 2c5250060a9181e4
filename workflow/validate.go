package workflow

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/jetflow-io/jetflow/internal/textcut"
)

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
		if s.timeout != 0 && s.kind != kindWait {
			problems = append(problems, fmt.Errorf("step %q: %w: Timeout applies to WaitEvent steps only", s.name, ErrInvalidOption))
		}
		problems = append(problems, d.checkFanOut(s)...)
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

// maxErrorBytes bounds an error message recorded in a run document, like
// the error of a task state record. Errors often quote what an external
// service answered; a document over the server's max payload could not
// record the failure at all, and the run would stay running.
const maxErrorBytes = 1024

// errString returns err's message cut to maxErrorBytes without splitting a
// UTF-8 character, or "".
func errString(err error) string {
	if err == nil {
		return ""
	}
	return textcut.Cut(err.Error(), maxErrorBytes)
}
