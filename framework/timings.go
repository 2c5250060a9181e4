package framework

import (
	"fmt"
	"time"
)

// Timings tunes the intervals and limits of a worker's services
// ([WithTimings]). A zero field keeps the value in effect (the default, or
// what an earlier WithTimings set); a field out of its range makes
// [NewWorker] fail with [ErrInvalidOption].
type Timings struct {
	// StallLimit is how long a consumer's fetch loop may go without a sign
	// of its consumer (a task, an idle heartbeat — sent every second —, a
	// pull request the server ended) while it is not waiting for a free
	// slot, before the worker gives up: [Worker.Run] then shuts down and
	// returns [ErrPullStalled], and health.Check reports the worker not
	// live. A server outage, a deleted stream or a wedged pull all count; a
	// supervisor restarting the process is the intended cure. Default
	// [DefaultStallLimit] (2 minutes), at least [MinStallLimit].
	StallLimit time.Duration
	// ReconcileInterval is how often the worker's reconciler looks for
	// max-delivered tasks that no advisory routed. A task it finds is
	// routed on the following look, one interval later, once the look
	// confirmed it. Default [DefaultReconcileInterval]; at least 100 ms.
	ReconcileInterval time.Duration
	// ErrorRetention is how long the errors bucket keeps the record of a
	// failed attempt; it should exceed the longest time a task spends
	// retrying. It applies when a worker creates the bucket; an existing
	// bucket keeps its setting. Default [DefaultErrorRetention]; at least
	// one minute.
	ErrorRetention time.Duration
	// RegistryInterval is how often the worker writes its record in the
	// worker registry; the record lives three intervals (whole seconds)
	// after each write, so a killed worker is listed for at most that long.
	// Between [MinRegistryInterval] and [MaxRegistryInterval]. Default
	// [DefaultRegistryInterval] (5 s: a dead worker gone within 15 s).
	RegistryInterval time.Duration
	// StrandedCheck is how often a running worker looks for tasks of its
	// types stranded on subjects no consumer reads (see [Worker.Stranded]);
	// the first check runs at Start. A negative value turns the check off.
	// Default [DefaultStrandedCheck]; at least one second.
	StrandedCheck time.Duration
	// StateRunningAfter is how long an attempt must run before the worker
	// writes its "running" record ([WithStateTracking]). Short tasks then
	// cost one record (their outcome) instead of two; a task is seen
	// "running" only once it ran for that long. A negative value writes
	// the record when every attempt starts. Default
	// [DefaultStateRunningAfter] (1 s).
	StateRunningAfter time.Duration
	// VersionGrace is how long a task whose payload version no live worker
	// accepts keeps waiting before it is dead-lettered with reason
	// "version", counted from its first hand-back. While a live worker of
	// the registry accepts the version the task waits for it, whatever the
	// grace. Default [DefaultVersionGrace]; at least one second.
	VersionGrace time.Duration
}

// WithTimings sets the worker's timings: each non-zero field of t (see
// [Timings]). Workers only.
func WithTimings(t Timings) WorkerOption {
	return workerOnly(func(o *options) error {
		if err := t.check(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		set := func(dst *time.Duration, v time.Duration) {
			if v != 0 {
				*dst = v
			}
		}
		set(&o.stallLimit, t.StallLimit)
		set(&o.deadLetters.reconcileEvery, t.ReconcileInterval)
		set(&o.deadLetters.errorTTL, t.ErrorRetention)
		set(&o.fleet.interval, t.RegistryInterval)
		set(&o.versionGrace, t.VersionGrace)
		switch {
		case t.StrandedCheck < 0:
			o.strandedCheck = 0
		case t.StrandedCheck > 0:
			o.strandedCheck = t.StrandedCheck
		}
		switch {
		case t.StateRunningAfter < 0:
			o.stateRunningAfter = 0
		case t.StateRunningAfter > 0:
			o.stateRunningAfter = t.StateRunningAfter
		}
		return nil
	})
}

// check returns an error naming the first field of t out of its range.
func (t Timings) check() error {
	switch {
	case t.StallLimit != 0 && t.StallLimit < MinStallLimit:
		return fmt.Errorf("stall limit %v, want at least %v", t.StallLimit, MinStallLimit)
	case t.ReconcileInterval != 0 && t.ReconcileInterval < 100*time.Millisecond:
		return fmt.Errorf("reconcile interval %v, want ≥ 100ms", t.ReconcileInterval)
	case t.ErrorRetention != 0 && t.ErrorRetention < time.Minute:
		return fmt.Errorf("error retention %v, want ≥ 1m", t.ErrorRetention)
	case t.RegistryInterval != 0 && (t.RegistryInterval < MinRegistryInterval || t.RegistryInterval > MaxRegistryInterval):
		return fmt.Errorf("registry interval %v, want %v to %v", t.RegistryInterval, MinRegistryInterval, MaxRegistryInterval)
	case t.StrandedCheck > 0 && t.StrandedCheck < time.Second:
		return fmt.Errorf("stranded check every %v, want at least 1s (or negative: off)", t.StrandedCheck)
	case t.VersionGrace != 0 && t.VersionGrace < time.Second:
		return fmt.Errorf("version grace %v, want at least 1s", t.VersionGrace)
	}
	return nil
}
