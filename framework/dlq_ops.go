package framework

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// DeadLetters inspects, replays and purges the dead-letter stream. Get one
// from [Client.DeadLetters]. It is safe for concurrent use.
//
// Records are addressed by their sequence in the dead-letter stream. Reads
// use the stream's direct get API: they leave no state on the server and
// fetch at most one batch (256 records, 4 MiB) at a time, so listing or
// replaying any number of records takes bounded memory.
type DeadLetters struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	core   *deadletter.Core
	window int // in-flight publishes of a bulk replay
}

// DeadLetters returns the dead-letter operations of the client's topology.
func (c *Client) DeadLetters() *DeadLetters {
	return &DeadLetters{
		nc:     c.nc,
		js:     c.js,
		names:  c.names,
		core:   newDeadLetterCore(c.nc, c.js, c.names, c.opts.logger),
		window: min(c.opts.maxPending, dlqReplayWindow),
	}
}

// dlqReplayWindow bounds the unacknowledged publishes of a bulk replay.
const dlqReplayWindow = 256

// dlqScanBatch is the number of records read per request.
const dlqScanBatch = 256

// Page limits of [DeadLetters.List].
const (
	DefaultDeadLetterPageLimit = 100
	MaxDeadLetterPageLimit     = 1000
)

// DeadLetterFilter selects dead-letter records. The zero value selects all;
// set fields narrow the selection (all must match).
type DeadLetterFilter struct {
	// Type selects one task type.
	Type string
	// Reason selects one reason.
	Reason DeadLetterReason
	// From and To bound the time the record was stored (inclusive). A scan
	// stops at the first record stored after To.
	From, To time.Time
	// ErrorContains selects records whose last error contains it, ignoring
	// case.
	ErrorContains string
}

// DeadLetterPage asks for one page of [DeadLetters.List].
type DeadLetterPage struct {
	// Limit is the most records returned. Default
	// [DefaultDeadLetterPageLimit], at most [MaxDeadLetterPageLimit].
	Limit int
	// After returns records with a sequence above it: 0 for the first page,
	// then the cursor the previous page returned.
	After uint64
}

func (f DeadLetterFilter) subject(n streams.Names) (string, error) {
	if f.Type == "" {
		return n.Prefix() + ".dlq.>", nil
	}
	if err := streams.ValidateTaskType(f.Type); err != nil {
		return "", fmt.Errorf("%w: filter: %w", ErrInvalidOption, err)
	}
	return n.DLQSubject(f.Type), nil
}

// bySubjectOnly reports whether the subject alone selects the records.
func (f DeadLetterFilter) bySubjectOnly() bool {
	return f.Reason == "" && f.From.IsZero() && f.To.IsZero() && f.ErrorContains == ""
}

func (f DeadLetterFilter) match(d *DeadLetter) bool {
	if f.Reason != "" && d.Reason != f.Reason {
		return false
	}
	if !f.From.IsZero() && d.Time.Before(f.From) {
		return false
	}
	if !f.To.IsZero() && d.Time.After(f.To) {
		return false
	}
	if f.ErrorContains != "" && !strings.Contains(strings.ToLower(d.LastError), strings.ToLower(f.ErrorContains)) {
		return false
	}
	return true
}

// dlqErr turns a direct get failure on the dead-letter stream into the
// package's errors.
func (d *DeadLetters) dlqErr(what string, err error) error {
	return natserr.Wrap("framework: "+what, err)
}

// scan calls fn for the records matching f from sequence after+1 up to
// sequence to (0: no bound). fn returns false to stop.
func (d *DeadLetters) scan(ctx context.Context, f DeadLetterFilter, after, to uint64, batch int,
	fn func(dl *DeadLetter, m jsapi.Stored) (bool, error)) error {
	subj, err := f.subject(d.names)
	if err != nil {
		return err
	}
	from, start := after+1, time.Time{}
	if after == 0 && !f.From.IsZero() {
		from, start = 0, f.From
	}
	return jsapi.Scan(ctx, d.nc, d.names.DLQStream(), subj, from, to, start, batch,
		func(m jsapi.Stored) (bool, error) {
			dl := deadLetterFrom(m)
			if !f.To.IsZero() && dl.Time.After(f.To) {
				return false, nil
			}
			if !f.match(&dl) {
				return true, nil
			}
			return fn(&dl, m)
		})
}

// List returns one page of the records matching f, oldest first, and the
// cursor of the next page (its [DeadLetterPage.After]), or 0 when there are
// no more records.
func (d *DeadLetters) List(ctx context.Context, f DeadLetterFilter, p DeadLetterPage) ([]DeadLetter, uint64, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultDeadLetterPageLimit
	}
	if limit > MaxDeadLetterPageLimit {
		return nil, 0, fmt.Errorf("%w: page limit %d, at most %d", ErrInvalidOption, limit, MaxDeadLetterPageLimit)
	}
	batch := dlqScanBatch
	if f.bySubjectOnly() {
		batch = min(limit, dlqScanBatch)
	}
	var out []DeadLetter
	var next uint64
	err := d.scan(ctx, f, p.After, 0, batch, func(dl *DeadLetter, m jsapi.Stored) (bool, error) {
		out = append(out, *dl)
		if len(out) < limit {
			return true, nil
		}
		if m.NumPending > 0 {
			next = m.Seq
		}
		return false, nil
	})
	if err != nil {
		return nil, 0, d.dlqErr("list dead letters", err)
	}
	return out, next, nil
}

// Get returns the record at sequence seq, or an error wrapping [ErrNotFound].
func (d *DeadLetters) Get(ctx context.Context, seq uint64) (*DeadLetter, error) {
	var found *DeadLetter
	_, err := jsapi.DirectGet(ctx, d.nc, d.names.DLQStream(), jsapi.GetRequest{Seq: seq}, func(m jsapi.Stored) error {
		dl := deadLetterFrom(m)
		found = &dl
		return nil
	})
	if err != nil {
		return nil, d.dlqErr(fmt.Sprintf("get dead letter %d", seq), err)
	}
	if found == nil {
		return nil, fmt.Errorf("%w: dead letter %d", ErrNotFound, seq)
	}
	return found, nil
}

// isReplayDropped reports whether a replayed task leaves out header k of its
// record: the record's own headers, the previous replay's (they get fresh
// values) and the schedule of a delayed task.
func isReplayDropped(k string) bool {
	switch k {
	case HeaderDLQReplayedFromSeq, HeaderDLQReplayedAt, HeaderDLQPreviousError, HeaderScheduledFor, HeaderEnqueuedAt:
		return true
	}
	return deadletter.IsRecordHeader(k)
}

// replayMsgID is the deduplication ID of the replay of record seq.
func (d *DeadLetters) replayMsgID(seq uint64) string {
	return "replay-" + d.names.DLQStream() + "-" + strconv.FormatUint(seq, 10)
}

// replayMsg builds the task that replays dl: same ID, type, priority,
// payload and custom headers; a fresh delivery count; the dead-letter
// history in headers.
func (d *DeadLetters) replayMsg(dl *DeadLetter) (*nats.Msg, TaskInfo, error) {
	if dl.PayloadOmitted {
		return nil, TaskInfo{}, fmt.Errorf("framework: dead letter %d has no payload (it was too large to keep); it cannot be replayed", dl.Seq)
	}
	taskType, prio := dl.Type, dl.Priority
	if err := streams.ValidateTaskType(taskType); err != nil || dl.Headers.Get(HeaderDLQPriority) == "" {
		p, t, perr := d.names.ParseTaskSubject(dl.OriginalSubject)
		if perr != nil {
			return nil, TaskInfo{}, fmt.Errorf("framework: dead letter %d names no valid task type: %w", dl.Seq, perr)
		}
		taskType, prio = t, p
	}
	h := make(nats.Header, len(dl.Headers))
	for k, v := range dl.Headers {
		if hasFoldPrefix(k, "nats-") || isReplayDropped(k) {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	id := dl.TaskID
	if id == "" {
		id = nuid.Next()
	}
	deadCount := max(dl.DeadCount, 1)
	h.Set(jetstream.MsgIDHeader, d.replayMsgID(dl.Seq))
	h.Set(HeaderTaskID, id)
	h.Set(HeaderDLQReplayedFromSeq, strconv.FormatUint(dl.Seq, 10))
	h.Set(HeaderDLQReplayedAt, taskmsg.FormatTime(time.Now()))
	h.Set(HeaderDLQDeadCount, strconv.Itoa(deadCount))
	if dl.LastError != "" {
		h.Set(HeaderDLQPreviousError, deadletter.Text(dl.LastError, MaxDLQErrorLen))
	}
	subject := d.names.TaskSubject(prio, taskType)
	if s, ok := orderedReplaySubject(d.names, taskType, h); ok {
		subject = s // an ordered task goes back to its key's queue (ordering.go)
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: dl.Payload}
	return msg, TaskInfo{ID: id, Type: taskType, Priority: prio, Subject: subject}, nil
}

// Replay enqueues the task of record seq again, as a fresh task: same ID,
// type, priority, payload and custom headers, attempts counted from 1, and
// its dead-letter history in the headers [HeaderDLQReplayedFromSeq],
// [HeaderDLQReplayedAt], [HeaderDLQDeadCount] and [HeaderDLQPreviousError].
// Once the task stream has stored it, the record is deleted.
//
// Replaying a record twice enqueues it once: the second call finds no
// record ([ErrNotFound]); calls racing each other, or a call repeated after
// one that failed between enqueueing and deleting, publish with the same
// deduplication ID ("replay-<dlq stream>-<seq>"), which the task stream
// drops within its duplicate window (TaskInfo.Duplicate is then true).
func (d *DeadLetters) Replay(ctx context.Context, seq uint64) (TaskInfo, error) {
	dl, err := d.Get(ctx, seq)
	if err != nil {
		return TaskInfo{}, err
	}
	msg, info, err := d.replayMsg(dl)
	if err != nil {
		return TaskInfo{}, err
	}
	ack, err := d.js.PublishMsg(ctx, msg)
	if err != nil {
		return TaskInfo{}, fmt.Errorf("framework: replay dead letter %d: %w", seq, err)
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	if _, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), seq); err != nil {
		return info, fmt.Errorf("framework: replayed dead letter %d but could not delete it (replaying it again within the duplicate window is safe): %w", seq, err)
	}
	return info, nil
}

// ReplayAll replays every record stored when it starts. See
// [DeadLetters.ReplayFilter].
func (d *DeadLetters) ReplayAll(ctx context.Context, progress func(done, total int)) (int, error) {
	return d.ReplayFilter(ctx, DeadLetterFilter{}, progress)
}

// ReplayFilter replays, like [DeadLetters.Replay], every record matching f
// that is stored when it starts (records that arrive meanwhile, for example
// replayed tasks dying again, are left for later). It returns the number of
// tasks replayed.
//
// It reads the records in batches and keeps at most 256 replays unacknowledged
// at once, so memory stays bounded whatever the number of records. progress,
// if not nil, is called after each batch and at the end with the number of
// records examined and the number in the scanned range when the replay
// started (records of f's type, stored after f.From); done ends below total
// when records disappeared meanwhile. A record that cannot be replayed (no
// payload) is skipped and reported in the error; a publish that fails stops
// the replay, and the records not yet replayed stay.
func (d *DeadLetters) ReplayFilter(ctx context.Context, f DeadLetterFilter, progress func(done, total int)) (int, error) {
	subj, err := f.subject(d.names)
	if err != nil {
		return 0, err
	}
	ds, err := d.core.Stream(ctx, d.names.DLQStream())
	if err != nil {
		return 0, err
	}
	si, err := ds.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("framework: replay: dead-letter stream info: %w", err)
	}
	last := si.State.LastSeq
	total := 0
	for _, n := range si.State.Subjects {
		total += int(n)
	}
	if last == 0 || total == 0 {
		if progress != nil {
			progress(0, 0)
		}
		return 0, nil
	}
	type inflight struct {
		fut jetstream.PubAckFuture
		seq uint64
	}
	var (
		queue    []inflight
		replayed int
		done     int
		skipped  []error
		first    = true
	)
	settle := func(p inflight) error {
		select {
		case <-p.fut.Ok():
		case err := <-p.fut.Err():
			return fmt.Errorf("framework: replay dead letter %d: %w", p.seq, err)
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), p.seq); err != nil {
			return err
		}
		replayed++
		return nil
	}
	publish := func(msg *nats.Msg) (jetstream.PubAckFuture, error) {
		for {
			fut, err := d.js.PublishMsgAsync(msg)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) || ctx.Err() != nil {
				return fut, err
			}
		}
	}
	// The scan examines every record of the subject; f's other fields are
	// applied here so that progress counts all of them.
	scanFilter := DeadLetterFilter{Type: f.Type, From: f.From}
	err = d.scan(ctx, scanFilter, 0, last, dlqScanBatch, func(dl *DeadLetter, m jsapi.Stored) (bool, error) {
		if first && !f.From.IsZero() {
			total = int(m.NumPending) + 1
		}
		first = false
		done++
		if f.match(dl) && (f.To.IsZero() || !dl.Time.After(f.To)) {
			msg, _, err := d.replayMsg(dl)
			if err != nil {
				skipped = append(skipped, err)
			} else {
				fut, err := publish(msg)
				if err != nil {
					return false, fmt.Errorf("framework: replay dead letter %d: %w", dl.Seq, err)
				}
				queue = append(queue, inflight{fut, dl.Seq})
				for len(queue) >= d.window {
					if err := settle(queue[0]); err != nil {
						return false, err
					}
					queue = queue[1:]
				}
			}
		}
		if progress != nil && done%dlqScanBatch == 0 {
			progress(done, max(total, done))
		}
		if !f.To.IsZero() && dl.Time.After(f.To) {
			return false, nil
		}
		return true, nil
	})
	for _, p := range queue {
		if err == nil {
			err = settle(p)
		}
	}
	if progress != nil {
		progress(done, max(total, done))
	}
	if err != nil {
		return replayed, errors.Join(append([]error{err}, skipped...)...)
	}
	return replayed, errors.Join(skipped...)
}

// Purge deletes the records matching f and returns how many it deleted. A
// filter on the type alone (or the zero filter: every record) is one purge
// request; other filters delete the matching records one by one.
func (d *DeadLetters) Purge(ctx context.Context, f DeadLetterFilter) (int, error) {
	subj, err := f.subject(d.names)
	if err != nil {
		return 0, err
	}
	if f.bySubjectOnly() {
		return d.purgeSubject(ctx, subj)
	}
	ds, err := d.core.Stream(ctx, d.names.DLQStream())
	if err != nil {
		return 0, err
	}
	si, err := ds.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("framework: purge dead letters: stream info: %w", err)
	}
	purged := 0
	err = d.scan(ctx, f, 0, si.State.LastSeq, dlqScanBatch, func(dl *DeadLetter, _ jsapi.Stored) (bool, error) {
		gone, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), dl.Seq)
		if err != nil {
			return false, err
		}
		if gone {
			purged++
		}
		return true, nil
	})
	if err != nil {
		return purged, d.dlqErr("purge dead letters", err)
	}
	return purged, nil
}

// purgeSubject purges subj from the dead-letter stream in one request and
// returns the number of records purged.
func (d *DeadLetters) purgeSubject(ctx context.Context, subj string) (int, error) {
	n, err := jsapi.PurgeSubject(ctx, d.nc, d.names.DLQStream(), subj)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, fmt.Errorf("framework: purge dead letters: %w: %w", ErrTopologyMissing, err)
		}
		return 0, fmt.Errorf("framework: purge dead letters: %w", err)
	}
	return int(n), nil
}

// Reconcile finds tasks that reached their max deliveries but whose
// max-deliveries advisory was lost, and moves them to the dead-letter
// stream, like the reconciler every worker runs periodically
// ([WithReconcileInterval]). It looks twice, two seconds apart, and routes
// only what both looks found, so that a task acknowledged at the moment of
// the first look is never taken for a dead one. It never touches waiting or
// running tasks. It returns the number of tasks routed; tasks routed at the
// same time by a router or another reconciler are routed once.
func (d *DeadLetters) Reconcile(ctx context.Context) (int, error) {
	return d.core.Reconcile(ctx, deadletter.ReconcileGrace)
}
