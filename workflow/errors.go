package workflow

import (
	"errors"
	"strings"
)

// Sentinel errors. Match them with [errors.Is].
var (
	// ErrInvalidDefinition wraps every problem found in a [Definition]; the
	// returned error is a *[DefinitionError] listing all of them.
	ErrInvalidDefinition = errors.New("workflow: invalid definition")
	// ErrInvalidName reports a workflow or step name outside the allowed
	// alphabet or length (see [New] and [Step]).
	ErrInvalidName = errors.New("workflow: invalid name")
	// ErrDuplicateStep reports two steps of one workflow with the same name.
	ErrDuplicateStep = errors.New("workflow: duplicate step")
	// ErrUnknownStep reports a dependency ([After]) on a step the workflow
	// does not declare.
	ErrUnknownStep = errors.New("workflow: unknown step")
	// ErrCycle reports steps that depend on each other in a loop.
	ErrCycle = errors.New("workflow: dependency cycle")
	// ErrNoSteps reports a workflow without steps.
	ErrNoSteps = errors.New("workflow: no steps")
	// ErrInvalidOption reports an invalid definition, step or start option.
	ErrInvalidOption = errors.New("workflow: invalid option")

	// ErrUnknownWorkflow reports a workflow name the [Client] was not given.
	ErrUnknownWorkflow = errors.New("workflow: unknown workflow")
	// ErrInvalidInput reports a run input that cannot be encoded as JSON or
	// decoded into the input type of the workflow's steps.
	ErrInvalidInput = errors.New("workflow: invalid input")
	// ErrRunExists reports a [Client.Start] with the ID of an existing run
	// ([WithRunID]). Nothing was started; the existing run is unchanged.
	ErrRunExists = errors.New("workflow: run already exists")
	// ErrRunNotFound reports a run ID without a state document: it never
	// existed, or it finished longer ago than the workflow's retention.
	ErrRunNotFound = errors.New("workflow: run not found")
	// ErrRunEnded reports a [Client.Cancel] of a run that already completed,
	// failed, was cancelled, or is compensating.
	ErrRunEnded = errors.New("workflow: run already ended")
	// ErrCancelled is returned by [Check] when the run was cancelled. A step
	// may return it (or any error) to stop early; the step is then recorded
	// as skipped and not retried.
	ErrCancelled = errors.New("workflow: run cancelled")
	// ErrRunFailed is returned by [Check] when another step failed and the
	// run is compensating or failed.
	ErrRunFailed = errors.New("workflow: run failed")
	// ErrNoOutput reports an [Output] call for a step that has no recorded
	// output, or that is not an ancestor of the calling step (outputs of
	// other steps may not exist yet, so reading them is refused).
	ErrNoOutput = errors.New("workflow: no output")
	// ErrNotInStep reports a call of [Output] or [Check] outside a step or
	// compensation handler.
	ErrNotInStep = errors.New("workflow: not called from a workflow step")
	// ErrOutputTooLarge reports a step output above the workflow's limit
	// ([WithMaxOutputBytes]) or a run document above the server's max
	// payload. The step fails permanently.
	ErrOutputTooLarge = errors.New("workflow: output too large")
	// ErrInvalidEvent reports an event that cannot be delivered: a key
	// that is not a valid event key ([WaitEvent] says what is), or a
	// payload that is not JSON.
	ErrInvalidEvent = errors.New("workflow: invalid event")
	// ErrEventTooLarge reports an event payload over
	// [MaxEventBytes].
	ErrEventTooLarge = errors.New("workflow: event payload too large")
	// ErrEventTimeout reports a [WaitEvent] step whose [Timeout] ran out
	// before its event came: the step's failure with [TimeoutFail], and
	// what [Output] of it returns with [TimeoutContinue].
	ErrEventTimeout = errors.New("workflow: event timeout")
	// ErrNotWaiting reports a [Client.SignalRun] of a run that has no step
	// waiting for an event.
	ErrNotWaiting = errors.New("workflow: run waits for no event")
	// ErrConflict reports a run document that kept changing under a writer
	// until its retries ran out. The operation may be retried.
	ErrConflict = errors.New("workflow: too many concurrent updates of the run")
)

// DefinitionError lists every problem of an invalid [Definition]. It wraps
// [ErrInvalidDefinition] and each problem, so errors.Is matches the specific
// sentinels ([ErrCycle], [ErrUnknownStep], …) too.
type DefinitionError struct {
	// Workflow is the definition's name.
	Workflow string
	// Problems are the individual errors, in the order they were found.
	Problems []error
}

// Error lists every problem of the definition.
func (e *DefinitionError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Error()
	}
	return "workflow: definition " + quote(e.Workflow) + " is invalid: " + strings.Join(parts, "; ")
}

// Unwrap returns [ErrInvalidDefinition] and the problems.
func (e *DefinitionError) Unwrap() []error {
	return append([]error{ErrInvalidDefinition}, e.Problems...)
}

func quote(s string) string { return `"` + s + `"` }
