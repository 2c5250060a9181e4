package delays

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Topology names what the mover reads and writes. Package framework fills
// it from streams.Names.
type Topology struct {
	DelayStream, ScheduleStream string
	Consumer                    jetstream.ConsumerConfig
	// ParseSubject returns the validated task ID of a delay subject.
	ParseSubject func(subject string) (string, error)
	// ScheduleSubject returns the schedule subject of a task ID;
	// DelaySubject its subject in the delay stream.
	ScheduleSubject, DelaySubject func(id string) string
	// Target validates the target a delayed task asks for and returns the
	// staging subject derived from its priority and task type, and those.
	Target func(raw string) (target, priority, taskType string, err error)
}

// Rejected is a delayed task that can never become a schedule.
type Rejected struct {
	Seq                uint64 // in the delay stream
	Subject            string
	Header             nats.Header
	Data               []byte
	ID, Type, Priority string // safe values: derived, or placeholders
	Deliveries         int
	Cause              error
	// Conflict says that the task is valid but its ID already has a
	// pending schedule stored from another delayed task, which was kept:
	// dead-letter it with reason "conflict", not "invalid".
	Conflict bool
}

// RejectedType is the task type of the dead-letter record of a delayed task
// whose target names no valid task type.
const RejectedType = "_invalid"

// Mover moves delayed tasks from the delay stream into the schedule stream.
type Mover struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	topo Topology
	log  *slog.Logger
	// reject writes the dead-letter record of r; nil when the worker keeps
	// no dead letters (r is then terminated with its reason and logged).
	reject func(ctx context.Context, r Rejected) error

	// Moved counts schedules stored; Rejects invalid delayed tasks
	// dead-lettered (or dropped when no dead letters are kept); Conflicts
	// valid delayed tasks dead-lettered (or dropped) because their ID
	// already had a pending schedule from another delayed task; Cancelled
	// schedules removed again because their delayed task was cancelled
	// while it moved.
	Moved, Rejects, Conflicts, Cancelled atomic.Uint64

	// beforePublish and afterPublish, set by tests, run before a schedule
	// is stored and after the server answered.
	beforePublish, afterPublish func(id string)
}

// New returns a mover on nc. reject may be nil.
func New(nc *nats.Conn, js jetstream.JetStream, topo Topology, log *slog.Logger, reject func(context.Context, Rejected) error) *Mover {
	return &Mover{nc: nc, js: js, topo: topo, log: log, reject: reject}
}

// Settings of the mover.
const (
	// Workers is how many delayed tasks one mover moves at once.
	Workers = 16
	// Prefetch is how many delayed tasks it asks for at a time. Those
	// waiting for a free mover get a heartbeat every [beatEvery].
	Prefetch = 64
)

// beatEvery is how often a delayed task the mover holds (queued, or being
// moved) tells the server it is still in progress, well within the
// consumer's ack wait: a task the mover holds is never delivered to a second
// mover at the same time.
const beatEvery = 5 * time.Second

// restart spaces the restarts of a mover whose consumer failed;
// redeliver spaces the redeliveries of a task that could not be moved.
var (
	restart   = retry.Policy{Min: 250 * time.Millisecond, Max: 10 * time.Second}
	redeliver = retry.Policy{Min: 250 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.5}
)

// Run moves delayed tasks until ctx ends, recreating its consumer when it
// fails (a delay stream that does not exist yet, a deleted consumer).
func (m *Mover) Run(ctx context.Context) {
	wait := restart.New()
	for {
		err := m.run(ctx)
		if ctx.Err() != nil {
			return
		}
		d := wait.NextBackOff()
		m.log.Warn("jetflow delay mover interrupted; retrying", slog.String("stream", m.topo.DelayStream),
			slog.Duration("retry_in", d), slog.Any("error", err))
		if !retry.Sleep(ctx, d) {
			return
		}
	}
}

func (m *Mover) run(ctx context.Context) error {
	cctx, cancel := jsapi.WithTimeout(ctx)
	err := m.consumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	// Own pull requests: a stored message with a Status header is a
	// delayed task like any other, not a status of the server.
	it, err := pull.NewIter(m.nc, m.topo.DelayStream, m.topo.Consumer.Durable, func() int { return Prefetch }, nil)
	if err != nil {
		return err
	}
	defer it.Stop()
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	bctx, stopBeats := context.WithCancel(ctx)
	wg.Go(func() {
		t := time.NewTicker(beatEvery)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				it.BeatQueued(now, now.Add(beatEvery).UnixNano(), 2*beatEvery, func(*pull.Msg, error) {})
			case <-bctx.Done():
				return
			}
		}
	})
	for range Workers {
		wg.Go(func() {
			for msg := range work {
				m.move(ctx, msg)
			}
		})
	}
	defer wg.Wait()
	defer stopBeats()
	defer close(work)
	for ctx.Err() == nil {
		msg, err := it.Next(time.Second)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			continue
		case err != nil:
			return err
		}
		select {
		case work <- msg:
		case <-ctx.Done():
			return nil // not acknowledged: Stop hands it back
		}
	}
	return nil
}

// move turns one delayed task into its schedule, or rejects it.
func (m *Mover) move(ctx context.Context, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		m.log.Warn("jetflow delay mover: delivery without metadata", slog.Any("error", err))
		_ = msg.Nak()
		return
	}
	if pm, ok := msg.(*pull.Msg); ok && time.Since(pm.LastBeat()) > beatEvery {
		_ = msg.InProgress() // it waited for a free mover: restart its ack clock
	}
	r := Rejected{Seq: md.Sequence.Stream, Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data(),
		ID: "delay-" + strconv.FormatUint(md.Sequence.Stream, 10), Type: RejectedType, Deliveries: int(md.NumDelivered)}
	from := origin(md)
	sched, cause := m.schedule(msg, from, &r)
	if cause != nil {
		r.Cause = cause
		m.rejectTask(ctx, msg, r)
		return
	}
	if m.beforePublish != nil {
		m.beforePublish(r.ID)
	}
	pctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	// Only where no schedule is pending: a second delayed task with this
	// ID, published after the duplicate window or with another
	// Nats-Msg-Id, must not replace the first one's schedule. The server
	// checks the subject's last sequence before the duplicate window.
	ack, err := m.js.PublishMsg(pctx, sched, jetstream.WithExpectStream(m.topo.ScheduleStream),
		jetstream.WithExpectLastSequencePerSubject(0))
	if m.afterPublish != nil {
		m.afterPublish(r.ID)
	}
	// seq is the sequence of this task's schedule; dup says that an
	// earlier delivery stored it.
	var seq uint64
	var dup bool
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		seq, dup = ack.Sequence, ack.Duplicate
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		pending, err := m.lastSchedule(pctx, r.ID)
		switch {
		case err != nil:
			m.retryLater(ctx, msg, r, err)
			return
		case pending.Seq == 0:
			// It fired or was cancelled since: its subject is free.
			m.retryLater(ctx, msg, r, errors.New("the schedule in its way left before it could be read; storing again"))
			return
		case !StoredFrom(pending.Header, pending.Data, from, msg.Headers(), msg.Data()):
			r.Conflict = true
			r.Cause = fmt.Errorf("task %s already has a pending schedule (sequence %d of %s, from delayed task %s), kept unchanged",
				r.ID, pending.Seq, m.topo.ScheduleStream, cut(pending.Header.Get(HeaderOrigin)))
			m.rejectTask(ctx, msg, r)
			return
		}
		// A redelivery: an earlier delivery of this delayed task stored
		// this schedule and could not acknowledge the task.
		seq, dup = pending.Seq, true
	case errors.As(err, &apiErr) && !natserr.Transient(err) && apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound:
		// The server refused this schedule (and will again): a
		// message too large once the schedule headers are added, a
		// schedule the server cannot parse.
		r.Cause = fmt.Errorf("the schedule stream refused its schedule: %w", err)
		m.rejectTask(ctx, msg, r)
		return
	default:
		m.retryLater(ctx, msg, r, err)
		return
	}
	// Cancelled while it moved? Cancellation purges the delay subject,
	// then the schedule subject; a schedule stored after that second purge
	// finds its delayed task gone here (this mover has not acknowledged it
	// yet), and removes itself. The read is retried while the stream
	// cannot answer: a purged task is never delivered again, so giving up
	// here would keep a cancelled schedule.
	_ = msg.InProgress()
	cctx, ccancel := context.WithTimeout(ctx, 2*jsapi.DefaultTimeout)
	defer ccancel()
	var present bool
	err = retry.Do(cctx, redeliver, func(err error) bool { return natserr.Transient(err) || errors.Is(err, errNotApplied) }, func() error {
		rctx, rcancel := jsapi.WithTimeout(cctx)
		defer rcancel()
		var err error
		present, err = m.stored(rctx, r.Seq)
		return err
	})
	if err != nil {
		m.retryLater(ctx, msg, r, err)
		return
	}
	switch {
	case !present && dup:
		// An earlier delivery stored this schedule and owns its check (a
		// delivery is not repeated while its mover lives: heartbeats); the
		// task is done, or was cancelled and its schedule purged after.
		_ = msg.Ack()
		return
	case !present:
		err := retry.Do(cctx, redeliver, natserr.Transient, func() error { return m.deleteSchedule(cctx, seq) })
		if err != nil {
			m.retryLater(ctx, msg, r, err)
			return
		}
		m.Cancelled.Add(1)
		_ = msg.Ack()
		return
	}
	if err := msg.Ack(); err != nil {
		// Redelivered after the ack wait; the next delivery finds this
		// schedule, stored from the same delayed task, and acknowledges.
		m.log.Debug("jetflow delay mover could not acknowledge a moved task", slog.String("task_id", r.ID), slog.Any("error", err))
	}
	if !dup {
		m.Moved.Add(1)
	}
}

// schedule validates msg and returns its schedule, filling r's safe fields
// as they are validated. A non-nil error says why it can never be one.
func (m *Mover) schedule(msg jetstream.Msg, from string, r *Rejected) (*nats.Msg, error) {
	id, err := m.topo.ParseSubject(msg.Subject())
	if err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	r.ID = id
	h := msg.Headers()
	target, prio, typ, terr := m.topo.Target(h.Get(taskmsg.HeaderScheduleTarget))
	if terr == nil {
		r.Type, r.Priority = typ, prio
	}
	if own := h.Get(taskmsg.HeaderTaskID); own != "" && own != id {
		return nil, fmt.Errorf("header %s is %s, the subject names task %s", taskmsg.HeaderTaskID, cut(own), id)
	}
	if terr != nil {
		return nil, fmt.Errorf("header %s: %w", taskmsg.HeaderScheduleTarget, terr)
	}
	v := h.Get(taskmsg.HeaderScheduledFor)
	due, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, fmt.Errorf("header %s %s is not an RFC 3339 time", taskmsg.HeaderScheduledFor, cut(v))
	}
	if due.After(taskmsg.MaxDue) {
		return nil, fmt.Errorf("header %s %s is after %s, the last time a schedule can hold",
			taskmsg.HeaderScheduledFor, cut(v), taskmsg.MaxDue.Format(time.RFC3339))
	}
	if now := time.Now(); due.Before(now) {
		// A past due time means now. The server cannot hold every past
		// time: the zero time is no schedule at all (it would never
		// fire), and before 1678 its nanosecond clock wraps.
		due = now
	}
	sched := taskmsg.DelayedSchedule(m.topo.ScheduleSubject(id), target, id, due, h, msg.Data())
	for k := range sched.Header {
		if strings.EqualFold(k, HeaderOrigin) {
			delete(sched.Header, k) // a producer's
		}
	}
	sched.Header.Set(HeaderOrigin, from)
	if max := m.nc.MaxPayload(); max > 0 && taskmsg.Size(sched) > max {
		return nil, fmt.Errorf("%d bytes with its schedule headers, the server accepts at most %d", taskmsg.Size(sched), max)
	}
	return sched, nil
}

// errNotApplied reports a delayed task the delay stream's leader has not
// stored yet.
var errNotApplied = errors.New("the delay stream's leader has not stored the task yet")

// stored reports whether the delay stream still holds seq. It asks the
// stream's leader (the message get API), not a direct get, which any
// replica may answer. Even the leader can lag: the consumer that delivered
// the task may run on a replica that stored it first. So a task the leader
// does not hold counts as gone (purged) only once the leader's last
// sequence has passed it; before, it is errNotApplied, to ask again.
func (m *Mover) stored(ctx context.Context, seq uint64) (bool, error) {
	found, err := m.getMsg(ctx, seq)
	if err != nil || found {
		return found, err
	}
	s, err := m.js.Stream(ctx, m.topo.DelayStream) // the leader's info
	if err != nil {
		return false, fmt.Errorf("stream info of %s: %w", m.topo.DelayStream, err)
	}
	if s.CachedInfo().State.LastSeq < seq {
		return false, errNotApplied
	}
	// The leader stored seq by now (it may have done so since the first
	// read): ask once more.
	return m.getMsg(ctx, seq)
}

// getMsg asks the delay stream's leader for seq.
func (m *Mover) getMsg(ctx context.Context, seq uint64) (bool, error) {
	resp, err := m.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+m.topo.DelayStream,
		[]byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`))
	if err != nil {
		return false, fmt.Errorf("get message %d of %s: %w", seq, m.topo.DelayStream, err)
	}
	var r struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return false, fmt.Errorf("get message %d of %s: %w", seq, m.topo.DelayStream, err)
	}
	switch {
	case r.Error == nil:
		return true, nil
	case r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return false, nil
	}
	return false, fmt.Errorf("get message %d of %s: %w", seq, m.topo.DelayStream, r.Error)
}

// deleteSchedule removes the schedule stored at seq. One already gone is
// no error.
func (m *Mover) deleteSchedule(ctx context.Context, seq uint64) error {
	s, err := m.js.Stream(ctx, m.topo.ScheduleStream)
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// rejectTask dead-letters r and removes it from the delay stream.
func (m *Mover) rejectTask(ctx context.Context, msg jetstream.Msg, r Rejected) {
	count, what := &m.Rejects, "jetflow delay mover rejected a delayed task"
	if r.Conflict {
		count, what = &m.Conflicts, "jetflow delay mover kept a pending schedule and rejected a delayed task with the same ID"
	}
	m.log.Warn(what, slog.String("task_id", r.ID), slog.String("subject", cut(r.Subject)), slog.Any("error", r.Cause))
	if m.reject == nil {
		// No dead letters kept: dropped, with the log line above.
		_ = msg.Ack()
		count.Add(1)
		return
	}
	wctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	if err := m.reject(wctx, r); err != nil {
		m.retryLater(ctx, msg, r, err)
		return
	}
	_ = msg.Ack() // removes it from the work queue; its record is written
	count.Add(1)
}

// retryLater hands msg back for a later delivery after a failure that may
// pass (no stream leader, a lost connection).
func (m *Mover) retryLater(ctx context.Context, msg jetstream.Msg, r Rejected, err error) {
	if ctx.Err() != nil {
		return // stopping: redelivered after the ack wait
	}
	d := redeliver.Delay(r.Deliveries)
	m.log.Warn("jetflow delay mover could not move a delayed task; retrying", slog.String("task_id", r.ID),
		slog.Duration("retry_in", d), slog.Any("error", err))
	_ = msg.NakWithDelay(d)
}

// cut quotes untrusted text, shortened, for a log line or an error.
func cut(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
