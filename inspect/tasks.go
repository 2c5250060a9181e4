package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/nats-io/nats.go"
)

// TaskFilter selects the tasks [Operator.ListTasks] returns. The zero
// value selects waiting tasks of every type and priority.
type TaskFilter struct {
	// State selects waiting ([framework.StatePending], the default), delayed
	// ([framework.StateScheduled]), delivered and unacknowledged ([framework.StateRunning]:
	// running or waiting for a retry) or failed-at-least-once and not yet
	// finished ([framework.StateRetrying]) tasks. Other states are not listable: they
	// leave the task stream.
	State framework.TaskState
	// Type selects one task type; empty selects all.
	Type string
	// Priorities select priorities; empty selects all.
	Priorities []framework.Priority
	// Limit is the most tasks returned. Default [DefaultTaskListLimit], at
	// most [MaxTaskListLimit].
	Limit int
}

// Limits of [Operator.ListTasks].
const (
	DefaultTaskListLimit = 100
	MaxTaskListLimit     = 10_000
)

// TaskSummary is one task as [Operator.ListTasks] and
// [Operator.FindTask] see it in the task stream.
type TaskSummary struct {
	ID       string              `json:"id"`
	Type     string              `json:"type"`
	Priority framework.Priority  `json:"priority"`
	State    framework.TaskState `json:"state"`
	// Subject and Sequence locate the task's message: its work subject, or
	// the schedule subject of a delayed task.
	Subject  string `json:"subject"`
	Sequence uint64 `json:"seq"`
	// EnqueuedAt is when the task was enqueued (its message stored).
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	// DueAt is when a delayed task is due (zero for immediate ones).
	DueAt time.Time `json:"due_at,omitzero"`
	// Attempt is the last failed attempt and LastError its error, from the
	// errors bucket, for tasks that failed at least once.
	Attempt   int    `json:"attempt,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Broken is set on a delayed task whose schedule the server dropped:
	// the last message on its schedule subject is not a schedule (a
	// server's reply sent there by a producer who chose the reply subject,
	// for example). It never fires and cannot be restored: Broken says
	// what replaced it. Type, Priority and DueAt come from the schedule
	// before it, when one is left; Sequence and EnqueuedAt locate the
	// message that replaced it.
	Broken string `json:"broken,omitempty"`
}

// TaskDetail is everything known about one task: see [Operator.FindTask].
type TaskDetail struct {
	TaskSummary
	// Headers and Payload are the task message's, while the task is in the
	// task stream.
	Headers nats.Header `json:"headers,omitempty"`
	Payload []byte      `json:"payload,omitempty"`
	// Record is the task's state record, when state tracking wrote one.
	Record *framework.TaskRecord `json:"record,omitempty"`
}

// ListTasks returns the tasks matching f, oldest first, read from the task
// stream with batched direct gets (no consumer, no state left behind).
//
// Waiting and running tasks are told apart by each queue's delivered
// sequence: a task stored after it has not been delivered yet. A running
// task that failed before shows its last error and attempt (kept in the
// errors bucket by workers with dead letters on); [framework.StateRetrying] keeps only
// those. A task on a work subject that no consumer serves is waiting.
func (i *Operator) ListTasks(ctx context.Context, f TaskFilter) ([]TaskSummary, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultTaskListLimit
	}
	if limit > MaxTaskListLimit {
		return nil, fmt.Errorf("%w: task list limit %d, at most %d", framework.ErrInvalidOption, limit, MaxTaskListLimit)
	}
	if f.Type != "" {
		if err := streams.ValidateTaskType(f.Type); err != nil {
			return nil, err
		}
	}
	for _, p := range f.Priorities {
		if !p.Valid() {
			return nil, fmt.Errorf("%w: priority %d", framework.ErrInvalidOption, uint8(p))
		}
	}
	state := f.State
	if state == "" {
		state = framework.StatePending
	}
	var out []TaskSummary
	var err error
	switch state {
	case framework.StateScheduled:
		out, err = i.listScheduled(ctx, f, limit)
	case framework.StatePending, framework.StateRunning, framework.StateRetrying:
		out, err = i.listWork(ctx, f, state, limit)
	default:
		return nil, fmt.Errorf("%w: cannot list tasks in state %q (want pending, scheduled, running or retrying)", framework.ErrInvalidOption, state)
	}
	if err != nil {
		return nil, i.opErr("list tasks", err)
	}
	return out, nil
}

func (f TaskFilter) match(typ string, p framework.Priority) bool {
	if f.Type != "" && typ != f.Type {
		return false
	}
	if len(f.Priorities) == 0 {
		return true
	}
	for _, q := range f.Priorities {
		if q == p {
			return true
		}
	}
	return false
}

// listScheduled lists delayed tasks as [Operator.ScheduledTasks] does, those
// due first, after the broken ones.
func (i *Operator) listScheduled(ctx context.Context, f TaskFilter, limit int) ([]TaskSummary, error) {
	sf := ScheduledFilter{Type: f.Type, Limit: limit}
	if len(f.Priorities) > 0 {
		sf.Limit = MaxScheduledScan // filtered below
	}
	recs, broken, _, err := i.scheduledTasks(ctx, sf)
	if err != nil {
		return nil, err
	}
	var out []TaskSummary
	for _, b := range broken {
		r := b.rec
		if !f.match(r.Type, r.Priority) && r.Type != "" {
			continue
		}
		out = append(out, TaskSummary{ID: r.ID, Type: r.Type, Priority: r.Priority, State: framework.StateScheduled,
			Subject: i.names.ScheduleSubject(r.ID), Sequence: b.seq, EnqueuedAt: b.at, DueAt: r.ScheduledFor,
			Broken: b.reason + brokenDelayedAdvice})
		if len(out) == limit {
			return out, nil
		}
	}
	for _, r := range recs {
		if !f.match(r.Type, r.Priority) {
			continue
		}
		out = append(out, TaskSummary{ID: r.ID, Type: r.Type, Priority: r.Priority, State: framework.StateScheduled,
			Subject: i.names.ScheduleSubject(r.ID), Sequence: r.Sequence, EnqueuedAt: r.EnqueuedAt, DueAt: r.ScheduledFor})
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// brokenDelayedAdvice ends the reason of a broken delayed task.
const brokenDelayedAdvice = ": it never fires and cannot be restored; cancel the task to clear its subject, then enqueue it again"

func (i *Operator) scheduledSummary(m jsapi.Stored) TaskSummary {
	id, ok := strings.CutPrefix(m.Subject, i.names.ScheduleSubject(""))
	if !ok {
		id = strings.TrimPrefix(m.Subject, i.names.DelaySubject(""))
	}
	s := TaskSummary{ID: id, State: framework.StateScheduled, Subject: m.Subject, Sequence: m.Seq, EnqueuedAt: m.Time}
	p := topology.ParsePending(i.names, m.Header)
	s.Priority, s.Type, s.DueAt = p.Priority, p.Type, p.Due
	return s
}

// delivered returns, per work subject served by a consumer, the last
// stream sequence the consumer delivered.
func (i *Operator) delivered(ctx context.Context) (map[string]uint64, error) {
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64)
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if _, _, err := i.names.ParseTaskSubject(ci.Config.FilterSubject); err == nil {
			out[ci.Config.FilterSubject] = ci.Delivered.Stream
		}
	}
	return out, lister.Err()
}

// workFilter is the narrowest subject filter covering f.
func (i *Operator) workFilter(f TaskFilter) string {
	prio := "*"
	if len(f.Priorities) == 1 {
		prio = f.Priorities[0].String()
	}
	if f.Type == "" {
		if prio == "*" {
			return i.names.TaskWildcard()
		}
		return i.names.Prefix() + ".task." + prio + ".>"
	}
	return i.names.Prefix() + ".task." + prio + "." + f.Type
}

func (i *Operator) listWork(ctx context.Context, f TaskFilter, state framework.TaskState, limit int) ([]TaskSummary, error) {
	delivered, err := i.delivered(ctx)
	if err != nil {
		return nil, err
	}
	core := deadletter.NewCore(i.nc, i.js, topology.DeadLetterTopology(i.names), i.log)
	var out []TaskSummary
	err = jsapi.Scan(ctx, i.nc, i.names.TaskStream(), i.workFilter(f), 0, 0, time.Time{}, 1000,
		func(m jsapi.Stored) (bool, error) {
			s, ok := i.workSummary(m, delivered)
			if !ok || !f.match(s.Type, s.Priority) {
				return true, nil
			}
			want := state
			if state == framework.StateRetrying {
				want = framework.StateRunning
			}
			if s.State != want {
				return true, nil
			}
			if s.State == framework.StateRunning {
				f, failed, err := core.LastFailure(ctx, s.Sequence, s.ID)
				if err != nil {
					return false, err
				}
				if failed {
					s.State, s.Attempt, s.LastError = framework.StateRetrying, f.Attempt, f.Error
				}
				if state == framework.StateRetrying && !failed {
					return true, nil
				}
			}
			out = append(out, s)
			return len(out) < limit, nil
		})
	return out, err
}

// workSummary decodes a message on a work subject.
func (i *Operator) workSummary(m jsapi.Stored, delivered map[string]uint64) (TaskSummary, bool) {
	p, typ, err := i.names.ParseTaskSubject(m.Subject)
	if err != nil {
		return TaskSummary{}, false
	}
	s := TaskSummary{Type: typ, Priority: p, State: framework.StatePending, Subject: m.Subject, Sequence: m.Seq, EnqueuedAt: m.Time}
	if last, ok := delivered[m.Subject]; ok && m.Seq <= last {
		s.State = framework.StateRunning
	}
	h := m.Header
	if ts := taskmsg.ParseTime(h.Get(framework.HeaderEnqueuedAt)); !ts.IsZero() {
		s.EnqueuedAt = ts
	}
	s.DueAt = taskmsg.ParseTime(h.Get(framework.HeaderScheduledFor))
	// The ID the worker gives the task (worker.go newTask).
	s.ID = taskmsg.ID(h, m.Seq, s.EnqueuedAt)
	return s, true
}

// MaxFindScan bounds how many task messages [Operator.FindTask] reads
// looking for a task that is neither tracked nor delayed.
const MaxFindScan = 100_000

// FindTask returns everything known about task id: its message (headers,
// payload, due time, and for a task that failed before its last attempt
// and error) while it is waiting, delayed or running, and its state record
// when state tracking wrote one. A task gone from the stream (finished,
// dead-lettered) is known only by its record. Without a state record or a
// schedule it scans the work subjects for the ID (at most [MaxFindScan]
// messages); IDs of the form "seq-N" are read directly. It returns an error
// wrapping [framework.ErrNotFound] when nothing is known.
func (i *Operator) FindTask(ctx context.Context, id string) (*TaskDetail, error) {
	if err := streams.ValidateID(id); err != nil {
		return nil, fmt.Errorf("%w: task %q: %w", framework.ErrNotFound, id, err)
	}
	d := &TaskDetail{}
	rec, err := i.ins.GetTask(ctx, id)
	switch {
	case err == nil && rec.State != framework.StateScheduled:
		d.Record = rec
	case err != nil && !errors.Is(err, framework.ErrNotFound):
		return nil, err
	}
	// A delayed task waits in the delay stream, then on its schedule
	// subject. The delay stream first: a mover stores the schedule before
	// it removes the delayed task, so a task moving meanwhile is not missed.
	var found *jsapi.Stored
	keep := func(m jsapi.Stored) error {
		found = &m
		return nil
	}
	_, err = jsapi.DirectGet(ctx, i.nc, i.names.DelayStream(), jsapi.GetRequest{NextFor: i.names.DelaySubject(id)}, keep)
	if errors.Is(err, jsapi.ErrNoStream) {
		err = nil // a deployment from before the delay stream
	}
	// On the schedule subject the last message decides: a schedule
	// followed by any other message is one the server dropped.
	var broken *jsapi.Stored
	if err == nil && found == nil {
		err = jsapi.Scan(ctx, i.nc, i.names.ScheduleStream(), i.names.ScheduleSubject(id), 0, 0, time.Time{}, 16,
			func(m jsapi.Stored) (bool, error) {
				if taskmsg.DelayedProblem(m.Header, m.Data) != "" {
					broken = &m
				} else {
					found, broken = &m, nil
				}
				return true, nil
			})
	}
	if err != nil {
		return nil, i.opErr("find task "+id, err)
	}
	if broken != nil {
		if found != nil {
			d.TaskSummary = i.scheduledSummary(*found)
		} else {
			d.TaskSummary = i.scheduledSummary(*broken)
		}
		d.Subject, d.Sequence, d.EnqueuedAt = broken.Subject, broken.Seq, broken.Time
		d.Broken = taskmsg.DelayedProblem(broken.Header, broken.Data) + brokenDelayedAdvice
		d.Headers, d.Payload = broken.Header, broken.Data
		return d, nil
	}
	if found != nil {
		d.TaskSummary = i.scheduledSummary(*found)
		d.Headers, d.Payload = found.Header, found.Data
		return d, nil
	}
	delivered, err := i.delivered(ctx)
	if err != nil {
		return nil, i.opErr("find task "+id, err)
	}
	match := func(m jsapi.Stored) bool {
		s, ok := i.workSummary(m, delivered)
		if !ok || s.ID != id {
			return false
		}
		d.TaskSummary, d.Headers, d.Payload = s, m.Header, m.Data
		return true
	}
	if n, ok := strings.CutPrefix(id, "seq-"); ok {
		if seq, err := strconv.ParseUint(n, 10, 64); err == nil {
			_, err := jsapi.DirectGet(ctx, i.nc, i.names.TaskStream(), jsapi.GetRequest{Seq: seq}, func(m jsapi.Stored) error {
				if match(m) {
					found = &m
				}
				return nil
			})
			if err != nil {
				return nil, i.opErr("find task "+id, err)
			}
		}
	}
	if found == nil {
		from := uint64(0)
		if d.Record != nil && d.Record.Sequence > 0 && !d.Record.State.Final() {
			from = d.Record.Sequence // start where the record says the task is
		}
		seen := 0
		err := jsapi.Scan(ctx, i.nc, i.names.TaskStream(), i.names.TaskWildcard(), from, 0, time.Time{}, 1000,
			func(m jsapi.Stored) (bool, error) {
				seen++
				if match(m) {
					found = &m
					return false, nil
				}
				return seen < MaxFindScan, nil
			})
		if err != nil {
			return nil, i.opErr("find task "+id, err)
		}
	}
	if found == nil {
		if d.Record == nil {
			return nil, fmt.Errorf("%w: task %s is not in the task stream and has no state record (state tracking off, or it expired)", framework.ErrNotFound, id)
		}
		r := d.Record
		d.TaskSummary = TaskSummary{ID: id, Type: r.Type, Priority: r.Priority, State: r.State, Sequence: r.Sequence,
			EnqueuedAt: r.EnqueuedAt, DueAt: r.ScheduledFor, Attempt: r.Attempt, LastError: r.Error}
		return d, nil
	}
	if d.State == framework.StateRunning {
		f, failed, err := deadletter.NewCore(i.nc, i.js, topology.DeadLetterTopology(i.names), i.log).LastFailure(ctx, d.Sequence, d.ID)
		if err != nil {
			return nil, i.opErr("find task "+id, err)
		}
		if failed {
			d.Attempt, d.LastError = f.Attempt, f.Error
			d.State = framework.StateRetrying
		}
	}
	if d.Record != nil && (d.Record.State == framework.StateRunning || d.Record.State == framework.StateRetrying) {
		d.State = d.Record.State
	}
	return d, nil
}
