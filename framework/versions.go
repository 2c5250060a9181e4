package framework

import (
	"fmt"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/versiongate"
)

// Payload versions let a task type's payload evolve through a rolling
// deploy. A producer stamps the version it wrote ([PayloadVersion], or a
// payload that implements [VersionedArgs]); a handler declares the
// versions it decodes ([AcceptVersions], or the [VersionedArgs] payload of
// a typed handler). A worker that receives a version its handler does not
// accept hands the task back without spending an attempt: it stores the
// task again as a one-shot schedule due shortly (the way a delayed task
// waits, with the same task ID), acknowledges the delivery, and the
// schedule fires it back into its queue with a fresh delivery count, where
// a worker that accepts it takes it. While a live worker of the registry
// accepts the version, the task comes back after fleet.RetryServed; while
// none does, each hand-back waits twice as long as the one before (from
// fleet.RetryBase up to fleet.RetryMax, fleet.Unaccepted.Decide). A
// version that no live worker of the registry accepts is dead-lettered
// with reason "version" once the worker's grace period
// ([Timings].VersionGrace) has passed since the task was first handed back;
// until then it waits, visible in the registry (`jetflow workers`, the
// dashboard, the Prometheus collector). See docs/operations.md, "Rolling
// deploys and payload versions".

// VersionedArgs is a payload that names its version. [Client.Enqueue] and
// [Client.EnqueueArgs] stamp it on the task ([HeaderPayloadVersion]) unless
// [PayloadVersion] is given, and a handler registered with [Handle] or
// [HandleArgs] for it accepts the versions from 1 to it unless
// [AcceptVersions] says otherwise: a struct grown by fields decodes the
// payloads its earlier versions wrote. Declare it on the value receiver
// and return a constant.
type VersionedArgs interface {
	// PayloadVersion returns the version, from 1 to [MaxPayloadVersion].
	PayloadVersion() int
}

// PayloadVersion stamps the task with payload version v, from 1 to
// [MaxPayloadVersion] ([HeaderPayloadVersion]).
func PayloadVersion(v int) EnqueueOption {
	return func(c *enqueueConfig) error {
		if err := checkVersion(v); err != nil {
			return err
		}
		c.Version = v
		return nil
	}
}

// AcceptVersions declares the payload versions the type's handler decodes.
// A task of another version is handed back without spending an attempt,
// to run on a worker that accepts it (see [VersionedArgs]). A task without
// a version is version 1. Default: every version, unless the handler's
// payload implements [VersionedArgs].
func AcceptVersions(versions ...int) HandlerOption {
	return func(c *handlerConfig) error {
		vs, err := fleet.AcceptList(versions)
		if err != nil {
			return invalidOption(err)
		}
		c.versions = vs
		return nil
	}
}

func checkVersion(v int) error { return invalidOption(fleet.CheckVersion(v)) }

// invalidOption returns err wrapped in [ErrInvalidOption], nil for nil.
func invalidOption(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOption, err)
}

// PayloadVersion returns the task's payload version ([HeaderPayloadVersion]):
// 1 when the task has none, 0 when its header is not a valid version.
func (t *Task) PayloadVersion() int {
	v, err := fleet.ParseVersion(t.Header(HeaderPayloadVersion))
	if err != nil {
		return 0
	}
	return v
}

// versionOf returns the version T names, and false when T is not
// [VersionedArgs] or names an invalid one.
func versionOf[T any]() (int, bool) {
	var zero T
	a, ok := any(zero).(VersionedArgs)
	if !ok {
		return 0, false
	}
	v := 0
	func() {
		defer func() { _ = recover() }() // a pointer T reading its nil receiver
		v = a.PayloadVersion()
	}()
	if checkVersion(v) != nil {
		panic(fmt.Sprintf("framework: %T.PayloadVersion returns %d, want 1 to %d", zero, v, MaxPayloadVersion))
	}
	return v, true
}

// upTo returns the versions 1 to v (fleet.UpTo).
func upTo(v int) []int { return fleet.UpTo(v) }

// newVersionGate sets up the worker's payload-version gate
// (internal/versiongate), which reads the registry with the worker's rules
// and hands tasks back through the worker's schedule stream.
func (w *Worker) newVersionGate() {
	g := &w.versions
	g.Grace, g.Interval = w.opts.versionGrace, w.opts.fleet.interval
	g.Watch(w.hardCtx, w.js, w.names.WorkersBucket(), fleetRules, w.log)
	g.Ctx, g.JS, g.Names, g.ErrCorrupt, g.ErrNoWorker = w.hardCtx, w.js, w.names, ErrCorruptTask, ErrVersion
	g.Accepted = func(p *pending) []int { return p.Type.Ext.cfg.versions }
	g.Task = func(p *pending) versiongate.Task {
		t := &p.X.task
		return versiongate.Task{ID: t.ID, Sequence: t.Sequence, EnqueuedAt: t.EnqueuedAt, Log: t.Logger(),
			Ordered: p.Type.Ext.cfg.ordering != nil || t.Header(HeaderOrderingKey) != ""}
	}
	g.Fail = func(p *pending, err error) { w.attempts.Settle(p, Permanent(err), 0) }
	g.AckFailed = func(p *pending, op string, err error) { w.ackFailed(w.hardCtx, &p.X.task, p, op, err) }
}
