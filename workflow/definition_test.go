package workflow_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

func noop(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }

func TestDefinitionValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		build  func() *workflow.Definition
		is     error
		substr string
	}{
		{"invalid workflow name", func() *workflow.Definition {
			d := workflow.New("Order_1")
			workflow.Step(d, "a", noop)
			return d
		}, workflow.ErrInvalidName, `workflow name "Order_1" contains 'O'`},
		{"invalid step name", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "charge.card", noop)
			return d
		}, workflow.ErrInvalidName, `step name "charge.card" contains '.'`},
		{"long step name", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, strings.Repeat("a", workflow.MaxNameLen+1), noop)
			return d
		}, workflow.ErrInvalidName, "the limit is 32"},
		{"duplicate step", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "a", noop)
			workflow.Step(d, "a", noop)
			return d
		}, workflow.ErrDuplicateStep, `step "a"`},
		{"unknown dependency", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "a", noop)
			workflow.Step(d, "b", noop, workflow.After("a", "missing"))
			return d
		}, workflow.ErrUnknownStep, `step "b": workflow: unknown step "missing" in After (declared steps: a, b)`},
		{"self dependency", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "a", noop, workflow.After("a"))
			return d
		}, workflow.ErrCycle, "depends on itself"},
		{"cycle", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "root", noop)
			workflow.Step(d, "a", noop, workflow.After("root", "c"))
			workflow.Step(d, "b", noop, workflow.After("a"))
			workflow.Step(d, "c", noop, workflow.After("b"))
			return d
		}, workflow.ErrCycle, "a → b → c → a"},
		{"no steps", func() *workflow.Definition { return workflow.New("order") }, workflow.ErrNoSteps, "at least one"},
		{"nil function", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step[struct{}, struct{}](d, "a", nil)
			return d
		}, workflow.ErrInvalidOption, "nil step function"},
		{"compensation type mismatch", func() *workflow.Definition {
			d := workflow.New("order")
			workflow.Step(d, "a", func(context.Context, string) (int, error) { return 1, nil },
				workflow.Compensate(func(context.Context, string, string) error { return nil }))
			return d
		}, workflow.ErrInvalidOption, "compensation takes (string, string), the step has input string and output int"},
		{"invalid option", func() *workflow.Definition {
			d := workflow.New("order", workflow.WithRetention(0))
			workflow.Step(d, "a", noop)
			return d
		}, workflow.ErrInvalidOption, "retention"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.build().Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			var de *workflow.DefinitionError
			if !errors.As(err, &de) || de.Workflow == "" {
				t.Errorf("error %T is not a *DefinitionError with the workflow's name", err)
			}
			if !errors.Is(err, workflow.ErrInvalidDefinition) || !errors.Is(err, tc.is) {
				t.Errorf("error %q does not match ErrInvalidDefinition and %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %q does not contain %q", err, tc.substr)
			}
		})
	}
}

func TestDefinitionReportsEveryProblem(t *testing.T) {
	t.Parallel()
	d := workflow.New("BAD")
	workflow.Step(d, "a", noop)
	workflow.Step(d, "a", noop)
	workflow.Step(d, "b", noop, workflow.After("nope"))
	err := d.Validate()
	for _, want := range []error{workflow.ErrInvalidName, workflow.ErrDuplicateStep, workflow.ErrUnknownStep} {
		if !errors.Is(err, want) {
			t.Errorf("error %q does not report %v", err, want)
		}
	}
}

func TestDefinitionOrderAndTaskTypes(t *testing.T) {
	t.Parallel()
	d := workflow.New("order")
	// Declared out of order: the topological order puts dependencies first.
	workflow.Step(d, "ship", noop, workflow.After("charge", "pack"))
	workflow.Step(d, "charge", noop, workflow.After("reserve"))
	workflow.Step(d, "pack", noop, workflow.After("reserve"))
	workflow.Step(d, "reserve", noop)
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Steps(), []string{"reserve", "charge", "pack", "ship"}; !slices.Equal(got, want) {
		t.Fatalf("Steps() = %v, want %v", got, want)
	}
	for _, s := range d.Steps() {
		for _, typ := range []string{workflow.StepTaskType(d.Name(), s), workflow.CompensationTaskType(d.Name(), s)} {
			if err := streams.ValidateTaskType(typ); err != nil {
				t.Errorf("task type %q: %v", typ, err)
			}
		}
	}
}

func TestStepAfterRegistrationPanics(t *testing.T) {
	t.Parallel()
	d := workflow.New("order")
	workflow.Step(d, "a", noop)
	e := newEnv(t)
	e.client(t, d) // freezes d
	defer func() {
		if recover() == nil {
			t.Fatal("Step after registration did not panic")
		}
	}()
	workflow.Step(d, "b", noop)
}
