package main

import (
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/workflow"
)

// TestStepWaitsFanOut: workflows get shows how far a fan-out got.
func TestStepWaitsFanOut(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		st   workflow.StepStatus
		want string
	}{
		{workflow.StepStatus{State: workflow.StepFanningOut, Items: 20, ItemsDone: 5}, "items 5/20"},
		{workflow.StepStatus{State: workflow.StepFanningOut, Items: 20, ItemsDone: 7, ItemsFailed: 2}, "items 7/20 (2 failed)"},
		{workflow.StepStatus{State: workflow.StepDone, Items: 3, ItemsDone: 3}, "items 3/3"},
		{workflow.StepStatus{State: workflow.StepDone}, "-"},
	} {
		if got := stepWaits(&tc.st, now); got != tc.want {
			t.Errorf("stepWaits(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}
