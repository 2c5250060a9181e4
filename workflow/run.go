package workflow

import (
	"encoding/json"
	"time"
)

// RunStatus is the state of a whole run.
type RunStatus string

// Run statuses. Completed, failed and cancelled are final; a run that is
// failed or cancelled may still return to compensating when a step that was
// running at the time completes later and needs undoing.
const (
	// RunRunning: steps are running or waiting for their dependencies.
	RunRunning RunStatus = "running"
	// RunCompleted: every step completed.
	RunCompleted RunStatus = "completed"
	// RunCompensating: a step failed (or the run was cancelled with
	// [WithCompensation]) and the completed steps are being undone.
	RunCompensating RunStatus = "compensating"
	// RunFailed: a step failed; compensations, if any, have run.
	RunFailed RunStatus = "failed"
	// RunCancelled: the run was cancelled with [Client.Cancel].
	RunCancelled RunStatus = "cancelled"
)

// Final reports whether s is completed, failed or cancelled.
func (s RunStatus) Final() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// StepState is the state of one step of a run.
type StepState string

// Step states.
const (
	// StepPending: waiting for the steps it depends on.
	StepPending StepState = "pending"
	// StepEnqueued: its task is queued or running.
	StepEnqueued StepState = "enqueued"
	// StepRetrying: an attempt failed; the task will be retried (see
	// StepStatus.Error and Attempts).
	StepRetrying StepState = "retrying"
	// StepDone: completed; its output is recorded.
	StepDone StepState = "done"
	// StepFailed: failed for good (permanent error or attempts exhausted).
	StepFailed StepState = "failed"
	// StepSkipped: never ran to completion because the run failed or was
	// cancelled first.
	StepSkipped StepState = "skipped"
	// StepCompensating: its compensation task is queued or running.
	StepCompensating StepState = "compensating"
	// StepCompensated: its compensation completed.
	StepCompensated StepState = "compensated"
	// StepCompensationFailed: its compensation failed for good; the
	// remaining compensations still ran.
	StepCompensationFailed StepState = "compensation_failed"
	// StepSleeping: a sleep step ([Sleep], [SleepUntil]) waits for its wake
	// time (StepStatus.WakeAt). No task runs and no worker holds it: a
	// server-side schedule brings its task back at that time.
	StepSleeping StepState = "sleeping"
	// StepWaiting: a step of [WaitEvent] waits for the event
	// StepStatus.EventKey, until StepStatus.Deadline when it has a
	// [Timeout]. No task runs and no worker holds it.
	StepWaiting StepState = "waiting"
	// StepFanningOut: a step of [ForEach] runs its items (StepStatus.Items
	// of them); it completes when every item has a result. No task holds
	// the step itself.
	StepFanningOut StepState = "fanning_out"
	// StepChildRunning: a step of [Child] started its child run
	// (StepStatus.ChildRun) and waits for it to end. No task runs and no
	// worker holds it.
	StepChildRunning StepState = "child_running"
)

// Run is the state document of one run, as stored on subject
// "<prefix>.wf.<id>" of the run stream (see [Client.Status]). It is plain
// JSON, readable with
//
//	nats stream get JETFLOW_RUNS --last-for jetflow.wf.<id>
type Run struct {
	// ID identifies the run.
	ID string `json:"id"`
	// Workflow is the workflow's name.
	Workflow string `json:"workflow"`
	// Status is the run's status.
	Status RunStatus `json:"status"`
	// Input is the run's input, as JSON.
	Input json.RawMessage `json:"input,omitempty"`
	// Error says why the run failed or was cancelled.
	Error string `json:"error,omitempty"`
	// CompensateOnCancel is set when the run was cancelled with
	// [WithCompensation].
	CompensateOnCancel bool `json:"compensate_on_cancel,omitempty"`
	// Parent names the run and step that started this run, for a child run
	// ([Child]); nil for a run started with [Client.Start].
	Parent *ParentRef `json:"parent,omitempty"`
	// CreatedAt, UpdatedAt and EndedAt are the times the run started, last
	// changed and reached a final status.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Steps are the run's steps in a topological order.
	Steps []*StepStatus `json:"steps"`
	// Revision is the stream sequence of this version of the document. It is
	// not part of the JSON.
	Revision uint64 `json:"-"`
}

// StepStatus is the state of one step of a [Run].
type StepStatus struct {
	// Name is the step's name.
	Name string `json:"name"`
	// After lists the steps it depends on.
	After []string `json:"after,omitempty"`
	// State is the step's state.
	State StepState `json:"state"`
	// Compensable is true when the step has a compensation.
	Compensable bool `json:"compensable,omitempty"`
	// Chained is true when the step was enqueued to run on the task of the
	// step whose completion made it ready ([WithChaining]), not on a task
	// of its own.
	Chained bool `json:"chained,omitempty"`
	// Attempts counts the step's deliveries so far (the last known).
	Attempts int `json:"attempts,omitempty"`
	// Output is the step's output, as JSON (at most the workflow's
	// [WithMaxOutputBytes]).
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the error of the last failed attempt; it is cleared when the
	// step completes.
	Error string `json:"error,omitempty"`
	// Completion is 1 for the first step of the run to complete, 2 for the
	// next…; compensations run in decreasing Completion order.
	Completion int `json:"completion,omitempty"`
	// CompensationAttempts and CompensationError describe the step's
	// compensation.
	CompensationAttempts int    `json:"compensation_attempts,omitempty"`
	CompensationError    string `json:"compensation_error,omitempty"`
	// EnqueuedAt, StartedAt and EndedAt are when the step's task was
	// enqueued, when its successful (or last) attempt started, and when it
	// completed, failed or was skipped.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	// CompensatedAt is when its compensation completed or failed for good.
	CompensatedAt time.Time `json:"compensated_at,omitzero"`
	// WakeAt is the wake time of a sleep step ([Sleep], [SleepUntil]), set
	// when it starts sleeping; the step completes at that time or later,
	// never before.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// EventKey is the key of the event a step of [WaitEvent] waits for,
	// set when it starts waiting; Deadline is when its [Timeout] runs out
	// (zero: no timeout).
	EventKey string    `json:"event_key,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
	// TimedOut is set on a step of [WaitEvent] whose timeout ran out with
	// [TimeoutContinue]: it completed without an event, and [Output] of it
	// returns an error wrapping [ErrEventTimeout].
	TimedOut bool `json:"timed_out,omitempty"`
	// Items is the number of items of a step of [ForEach], set when it
	// starts fanning out. ItemsDone and ItemsFailed count the items with a
	// result, and those whose result is an error ([CollectErrors]): stored
	// when the step completes, filled in by [Client.Status] while it fans
	// out (the run document is not rewritten per item).
	Items       int `json:"items,omitempty"`
	ItemsDone   int `json:"items_done,omitempty"`
	ItemsFailed int `json:"items_failed,omitempty"`
	// ChildRun is the ID of the run a step of [Child] started
	// ([ChildRunID]), set when it starts waiting for it.
	ChildRun string `json:"child_run,omitempty"`
}

// ParentRef names the run and the step of [Child] that started a child
// run: where the child's end is reported.
type ParentRef struct {
	// Run is the parent run's ID.
	Run string `json:"run"`
	// Workflow is the parent's workflow.
	Workflow string `json:"workflow"`
	// Step is the parent's step that waits for the child.
	Step string `json:"step"`
	// Priority is the priority of the parent's tasks.
	Priority string `json:"priority"`
}

// Step returns the status of the step name, or nil.
func (r *Run) Step(name string) *StepStatus {
	for _, s := range r.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// newRun builds the first document of a run: roots enqueued, the rest pending.
func newRun(d *Definition, id string, input json.RawMessage, now time.Time) (*Run, []string) {
	r := &Run{ID: id, Workflow: d.name, Status: RunRunning, Input: input, CreatedAt: now, UpdatedAt: now}
	var roots []string
	for _, sd := range d.order {
		st := &StepStatus{Name: sd.name, After: sd.after, State: StepPending, Compensable: sd.compensate != nil}
		if len(sd.after) == 0 {
			st.State = StepEnqueued
			st.EnqueuedAt = now
			roots = append(roots, sd.name)
		}
		r.Steps = append(r.Steps, st)
	}
	return r, roots
}

// open reports whether the step still waits to run (enqueued or retrying).
func (s *StepStatus) open() bool { return s.State == StepEnqueued || s.State == StepRetrying }

// parked reports whether the step started and waits for a time, an event,
// its items or a child run (sleeping, waiting, fanning out or with its
// child running): it may still complete or fail.
func (s *StepStatus) parked() bool {
	return s.State == StepSleeping || s.State == StepWaiting || s.State == StepFanningOut || s.State == StepChildRunning
}

// complete records the output of step st and returns the steps to enqueue
// next and the compensation to start, if any. The caller checked st.open().
func (r *Run) complete(st *StepStatus, out json.RawMessage, attempt int, started, now time.Time) (next []string, compensate string) {
	st.State = StepDone
	st.Output = out
	st.Error = ""
	st.Attempts = attempt
	st.StartedAt = started
	st.EndedAt = now
	st.Completion = r.maxCompletion() + 1
	r.UpdatedAt = now
	switch {
	case r.Status == RunRunning:
		for _, c := range r.Steps {
			if c.State != StepPending || !depends(c, st.Name) {
				continue
			}
			if r.parentsDone(c) {
				c.State = StepEnqueued
				c.EnqueuedAt = now
				next = append(next, c.Name)
			}
		}
		if r.allDone() {
			r.Status = RunCompleted
			r.EndedAt = now
		}
	case r.Status == RunCompensating:
		// The compensation in progress picks this step up next: it is now
		// the most recently completed.
	case r.Status == RunFailed || (r.Status == RunCancelled && r.CompensateOnCancel):
		// Compensations already ran; undo this late completion too.
		if st.Compensable {
			st.State = StepCompensating
			r.Status = RunCompensating
			r.EndedAt = time.Time{}
			compensate = st.Name
		}
	}
	return next, compensate
}

// fail records the final failure of step st and, if the run was running,
// starts compensating. It returns the compensation to start, if any.
func (r *Run) fail(st *StepStatus, cause string, attempt int, now time.Time) string {
	st.State = StepFailed
	st.Error = cause
	st.Attempts = attempt
	st.EndedAt = now
	r.UpdatedAt = now
	if r.Status != RunRunning {
		return ""
	}
	r.Error = "step " + st.Name + " failed: " + cause
	r.skipPending(now)
	return r.nextCompensation(now)
}

// cancel marks the run cancelled (compensating first when compensate is set)
// and returns the compensation to start, if any. The caller checked that the
// run is running.
func (r *Run) cancel(reason string, compensate bool, now time.Time) string {
	r.UpdatedAt = now
	r.Error = reason
	r.skipPending(now)
	if compensate {
		r.CompensateOnCancel = true
		return r.nextCompensation(now)
	}
	r.Status = RunCancelled
	r.EndedAt = now
	return ""
}

// nextCompensation marks the most recently completed compensable step as
// compensating and returns its name, or, when none is left, ends the run
// (failed, or cancelled after a cancellation with compensation).
func (r *Run) nextCompensation(now time.Time) string {
	var pick *StepStatus
	for _, s := range r.Steps {
		if s.State == StepDone && s.Compensable && (pick == nil || s.Completion > pick.Completion) {
			pick = s
		}
	}
	if pick != nil {
		pick.State = StepCompensating
		r.Status = RunCompensating
		r.EndedAt = time.Time{}
		return pick.Name
	}
	if r.CompensateOnCancel {
		r.Status = RunCancelled
	} else {
		r.Status = RunFailed
	}
	r.EndedAt = now
	return ""
}

// skipPending marks steps that never started, and sleeping, waiting,
// fanning-out and child-running steps, as skipped. Their wake, event,
// timeout, item and child tasks find them skipped and do nothing (the
// children are cancelled by whoever wrote this change: cancelChildren).
func (r *Run) skipPending(now time.Time) {
	for _, s := range r.Steps {
		if s.State == StepPending || s.parked() {
			s.State = StepSkipped
			s.EndedAt = now
		}
	}
}

func (r *Run) maxCompletion() int {
	m := 0
	for _, s := range r.Steps {
		m = max(m, s.Completion)
	}
	return m
}

func (r *Run) parentsDone(s *StepStatus) bool {
	for _, a := range s.After {
		p := r.Step(a)
		if p == nil || p.State != StepDone {
			return false
		}
	}
	return true
}

func (r *Run) allDone() bool {
	for _, s := range r.Steps {
		if s.State != StepDone {
			return false
		}
	}
	return true
}

func depends(s *StepStatus, parent string) bool {
	for _, a := range s.After {
		if a == parent {
			return true
		}
	}
	return false
}
