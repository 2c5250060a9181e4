package staterec

// Which records a worker writes: the rules behind framework's state
// tracking extension, on plain values so that they can be tested without
// a worker. framework looks the inputs up (a task's type, its Awaited
// header, its Attempt) and acts on the answer.

// Final reports whether state is an end state: succeeded, failed, dead or
// cancelled (framework.TaskState.Final).
func Final(state string) bool {
	switch state {
	case Succeeded, Failed, Dead, Cancelled:
		return true
	}
	return false
}

// Known reports whether state is one of the states a record can hold: a
// record read back with another one is not a record of ours.
func Known(state string) bool {
	switch state {
	case Pending, Scheduled, Running, Retrying:
		return true
	}
	return Final(state)
}

// TypeSetting is a registered task type and its own state tracking
// setting (framework.WithTypeStateTracking).
type TypeSetting struct {
	Name string
	// Tracking is 1 for on, -1 for off, 0 to follow the worker's default.
	Tracking int8
}

// TrackedTypes returns the set of task types whose tasks get every record:
// those turned on, and those that follow the worker's default when it is
// on (def). It is computed once, as a worker starts; nil when none is.
func TrackedTypes(types []TypeSetting, def bool) map[string]bool {
	var tracked map[string]bool
	for _, ts := range types {
		if ts.Tracking == 1 || ts.Tracking == 0 && def {
			if tracked == nil {
				tracked = make(map[string]bool)
			}
			tracked[ts.Name] = true
		}
	}
	return tracked
}

// Start is what a worker does as an attempt starts.
type Start int

// What an attempt's start asks of the worker.
const (
	// StartNothing: the task gets no record before its outcome.
	StartNothing Start = iota
	// StartRecords: start the attempt's records ([Tracker.Started]).
	StartRecords
	// StartEnsure: write nothing yet, but make sure the state bucket
	// exists ([Tracker.Ready]): the task was enqueued to be awaited, and
	// only its final record will be written.
	StartEnsure
)

// StartOf decides the start of an attempt of a task whose type is tracked
// or not, enqueued to be awaited or not. The caller may leave awaited
// false for a tracked type: it does not matter there (looking the header
// up costs a little on every task).
func StartOf(tracked, awaited bool) Start {
	switch {
	case tracked:
		return StartRecords
	case awaited:
		return StartEnsure
	}
	return StartNothing
}

// FinishOf decides the record of an attempt's outcome, state (Succeeded,
// Retrying, Failed or Dead), for a task whose type is tracked or not,
// enqueued to be awaited or not, whose handler asked for records or not
// (it reported progress or set a result), and of which a record was
// written before this one or not (wrote: only consulted for an untracked
// retry, so a caller may skip looking it up otherwise).
//
// A tracked task gets every outcome. Another one that asked for records or
// is awaited gets its final outcome, and a retry only when a progress
// record would otherwise stay behind saying "running". The final record of
// an awaited task, or of an untracked one, is confirmed by the server
// ([Writer.WriteConfirmed]): someone may wait for it.
func FinishOf(state string, tracked, awaited, asked, wrote bool) (write, confirm bool) {
	if !tracked && !awaited && !asked {
		return false, false
	}
	switch state {
	case Succeeded, Failed, Dead:
	case Retrying:
		if !tracked && !wrote {
			return false, false
		}
	default:
		return false, false
	}
	return true, !tracked || awaited
}
