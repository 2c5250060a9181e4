package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// isReplayDropped reports whether a replayed task leaves out header k of its
// record: the record's own headers, the previous replay's (they get fresh
// values), the schedule of a delayed task, and the repeating schedule that
// fired a cron tick (the replay's own schedule fires it: a task naming
// another schedule than the one that fired it is refused).
func isReplayDropped(k string) bool {
	switch k {
	case HeaderReplayedFromSeq, HeaderReplayedAt, HeaderPreviousError, framework.HeaderScheduledFor, framework.HeaderEnqueuedAt,
		framework.HeaderVersionRefusedSince, framework.HeaderVersionRefusals, // a fresh grace
		taskmsg.HeaderScheduleTarget, // a delayed task the delay mover refused
		taskmsg.HeaderSchedule, taskmsg.HeaderScheduleSpec, taskmsg.HeaderScheduleZone, taskmsg.HeaderScheduleHash:
		return true
	}
	return deadletter.IsRecordHeader(k)
}

// replayMsgID is the deduplication ID of the replay of dl:
// "replay-<dlq stream>-<seq>-<digest>". The same record always gets the same
// ID, so replays racing each other or repeated after a failure enqueue it
// once. The digest covers when the record was stored (to the nanosecond)
// and its payload: a producer who cannot read the dead-letter stream cannot
// foresee the ID. With the sequence alone, one could publish a task under a
// record's replay ID first; the replay would then be dropped as a duplicate
// and the record deleted, the task lost.
func (d *Queue) replayMsgID(dl *Record) string {
	h := sha256.New()
	var stamp [8]byte
	binary.BigEndian.PutUint64(stamp[:], uint64(dl.Time.UnixNano()))
	h.Write(stamp[:])
	h.Write(dl.Payload)
	return "replay-" + d.names.DLQStream() + "-" + strconv.FormatUint(dl.Seq, 10) + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// replayMsg builds the message that replays dl: same ID, type, priority,
// payload and custom headers; a fresh delivery count; the dead-letter
// history in headers.
//
// The replay keeps the task's ID, so that its effects ledger, state record
// and workflow step apply, but it cannot be deduplicated by that ID: the
// task stream would drop it as a duplicate within its duplicate window of
// the original. Workers accept a task ID that is not the message ID only
// on a task a schedule fired (the server sets Nats-Scheduler, which no
// publish on the task stream can), so the replay is a one-shot schedule,
// due now, on the repeating-schedule subject "<prefix>.cron.<replay ID>" of
// the schedule stream, deduplicated by the replay ID and firing into the
// type's staging subject. A producer, who may not write the schedule
// stream, cannot forge one. The operator replaying needs publish on
// "<prefix>.cron.>", as for managing repeating schedules.
//
// An ordered task (see framework.Ordered) goes back to its key's queue,
// which no schedule can fire into: it is published there directly, under
// the replay ID as its task ID, and runs without the original's recorded
// effects.
func (d *Queue) replayMsg(dl *Record) (*nats.Msg, framework.TaskInfo, error) {
	if dl.PayloadOmitted {
		return nil, framework.TaskInfo{}, fmt.Errorf("dlq: dead letter %d has no payload (it was too large to keep); it cannot be replayed", dl.Seq)
	}
	taskType, prio := dl.Type, dl.Priority
	if err := streams.ValidateTaskType(taskType); err != nil || dl.Headers.Get(HeaderPriority) == "" {
		p, t, perr := d.names.ParseTaskSubject(dl.OriginalSubject)
		if perr != nil {
			return nil, framework.TaskInfo{}, fmt.Errorf("dlq: dead letter %d names no valid task type: %w", dl.Seq, perr)
		}
		taskType, prio = t, p
	}
	h := make(nats.Header, len(dl.Headers))
	for k, v := range dl.Headers {
		if hasNatsPrefix(k) || isReplayDropped(k) {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	id := dl.TaskID
	if id == "" {
		id = nuid.Next()
	} else if err := streams.ValidateID(id); err != nil {
		// jetflow writes records with valid IDs only (an invalid one on
		// the wire becomes "seq-<n>"): this record was written by another
		// publisher, and its ID would fail the task again.
		return nil, framework.TaskInfo{}, fmt.Errorf("dlq: dead letter %d names no valid task ID: %w", dl.Seq, err)
	}
	deadCount := max(dl.DeadCount, 1)
	replayID := d.replayMsgID(dl)
	now := time.Now()
	h.Set(jetstream.MsgIDHeader, replayID)
	h.Set(HeaderReplayedFromSeq, strconv.FormatUint(dl.Seq, 10))
	h.Set(HeaderReplayedAt, taskmsg.FormatTime(now))
	h.Set(HeaderDeadCount, strconv.Itoa(deadCount))
	if dl.LastError != "" {
		h.Set(HeaderPreviousError, deadletter.Text(dl.LastError, MaxErrorLen))
	}
	if err := streams.ValidateID(replayID); err != nil {
		return nil, framework.TaskInfo{}, fmt.Errorf("dlq: dead letter %d: its replay ID: %w", dl.Seq, err)
	}
	subject := d.names.TaskSubject(prio, taskType)
	info := framework.TaskInfo{ID: id, Type: taskType, Priority: prio, Subject: subject}
	var msg *nats.Msg
	if s, ok := orderedSubject(d.names, taskType, dl.OriginalSubject, h); ok {
		// An ordered task goes back to its key's queue (see
		// framework.Ordered), as a task of its own.
		h.Set(framework.HeaderTaskID, replayID)
		info.ID, info.Subject = replayID, s
		msg = &nats.Msg{Subject: s, Header: h, Data: dl.Payload}
	} else {
		h.Set(framework.HeaderTaskID, id)
		// Set by hand: jetstream.WithScheduleAt truncates to whole
		// seconds.
		h.Set(jetstream.ScheduleHeader, "@at "+taskmsg.FormatTime(now))
		h.Set(jetstream.ScheduleTargetHeader, d.names.FiredSubject(prio, taskType))
		msg = &nats.Msg{Subject: d.names.CronSubject(replayID), Header: h, Data: dl.Payload}
	}
	if limit := d.nc.MaxPayload(); limit > 0 && taskmsg.Size(msg) > limit {
		// A record filled up to the max payload (any publisher on the
		// dead-letter subjects can write one) leaves no room for the
		// replay's headers. The client refuses the publish, which would
		// stop a bulk replay at this record.
		return nil, framework.TaskInfo{}, fmt.Errorf("dlq: dead letter %d: its replay would be %d bytes, over the server's max payload of %d; it cannot be replayed",
			dl.Seq, taskmsg.Size(msg), limit)
	}
	return msg, info, nil
}

// Replay enqueues the task of record seq again, as a fresh task: same ID,
// type, priority, payload and custom headers, attempts counted from 1, and
// its dead-letter history in the headers [HeaderReplayedFromSeq],
// [HeaderReplayedAt], [HeaderDeadCount] and [HeaderPreviousError].
// Once its schedule is stored, the record is deleted.
//
// The replay reaches the task stream through a one-shot schedule due now
// in the schedule stream (see replayMsg), so the task keeps its ID, and
// the effects its earlier deliveries applied are skipped: the returned
// TaskInfo's Stream and Sequence locate that schedule, and its Subject is
// the work subject the task runs from. The caller's user needs publish on
// "<prefix>.cron.>" besides the dead-letter permissions. The task of an
// ordered type goes straight back to its key's queue, under a task ID of
// its own (the replay ID): its effects run again.
//
// Replaying a record twice enqueues it once: the second call finds no
// record ([framework.ErrNotFound]); calls racing each other, or a call repeated after
// one that failed between enqueueing and deleting, publish with the same
// deduplication ID ("replay-<dlq stream>-<seq>-<digest>", see
// replayMsgID), which the task stream
// drops within its duplicate window (framework.TaskInfo.Duplicate is then true).
func (d *Queue) Replay(ctx context.Context, seq uint64) (framework.TaskInfo, error) {
	dl, err := d.Get(ctx, seq)
	if err != nil {
		return framework.TaskInfo{}, err
	}
	msg, info, err := d.replayMsg(dl)
	if err != nil {
		return framework.TaskInfo{}, err
	}
	ack, err := d.js.PublishMsg(ctx, msg)
	if err != nil {
		return framework.TaskInfo{}, fmt.Errorf("dlq: replay dead letter %d: %w", seq, err)
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	if _, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), seq); err != nil {
		return info, fmt.Errorf("dlq: replayed dead letter %d but could not delete it (replaying it again within the duplicate window is safe): %w", seq, err)
	}
	return info, nil
}

// ReplayAll replays every record stored when it starts. See
// [Queue.ReplayFilter].
func (d *Queue) ReplayAll(ctx context.Context, progress func(done, total int)) (int, error) {
	return d.ReplayFilter(ctx, Filter{}, progress)
}

// ReplayFilter replays, like [Queue.Replay], every record matching f
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
// payload, or too large once the replay's headers are added) is skipped and
// reported in the error; a publish that fails stops the replay, and the
// records not yet replayed stay.
func (d *Queue) ReplayFilter(ctx context.Context, f Filter, progress func(done, total int)) (int, error) {
	last, total, err := d.scanRange(ctx, f, "replay")
	if err != nil {
		return 0, err
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
			return fmt.Errorf("dlq: replay dead letter %d: %w", p.seq, err)
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
	scanFilter := Filter{Type: f.Type, From: f.From}
	err = d.scan(ctx, scanFilter, 0, last, scanBatch, func(dl *Record, m jsapi.Stored) (bool, error) {
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
					return false, fmt.Errorf("dlq: replay dead letter %d: %w", dl.Seq, err)
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
		if progress != nil && done%scanBatch == 0 {
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

// hasNatsPrefix reports whether header k is one of the server's ("Nats-…").
func hasNatsPrefix(k string) bool { return len(k) >= 5 && strings.EqualFold(k[:5], "nats-") }

// orderedSubject returns the slot subject a record of an ordered task
// replays to, or false when h carries no valid ordering key or the task was
// not consumed from a slot subject of taskType (original): an ordering key
// header on a task of another subject is whatever its producer wrote, and
// following it would send the replay where no consumer of the type reads.
func orderedSubject(names streams.Names, taskType, original string, h nats.Header) (string, bool) {
	if typ, _, err := names.ParseOrderedSubject(original); err != nil || typ != taskType {
		return "", false
	}
	vs := h[framework.HeaderOrderingKey]
	if len(vs) == 0 || ordering.ValidateKey(vs[0]) != nil {
		return "", false
	}
	return names.OrderedSubject(taskType, ordering.Slot(vs[0], streamdefs.OrderedSlots)), true
}
