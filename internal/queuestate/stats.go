package queuestate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Load is one queue's counts.
type Load struct {
	// Pending, InFlight and Redelivered are its consumer's; Scheduled
	// counts its delayed tasks.
	Pending, InFlight, Redelivered, Scheduled int
	// Paused is set while its consumer is paused, until PausedUntil.
	Paused      bool
	PausedUntil time.Time
}

// Snapshot is the load of every queue, keyed by K (the caller's queue
// identity), and the stream-wide counts.
type Snapshot[K comparable] struct {
	Queues map[K]*Load
	// Dead counts dead letters per task type.
	Dead map[string]uint64
	// Scheduled counts all delayed tasks, Cron all repeating schedules;
	// Truncated is set when there were more delayed tasks than
	// StatsConfig.MaxScheduled (per-queue counts are then partial).
	Scheduled, Cron int
	Truncated       bool
	// Junk counts messages on schedule or cron subjects that are not
	// schedules; JunkSubjects names up to StatsConfig.MaxJunk of them.
	Junk         int
	JunkSubjects []string
	// BrokenScheduled counts the schedule subjects, and BrokenCron the cron
	// subjects, whose last message is not a schedule jetflow wrote: the
	// server dropped the schedule stored there before it (a message that
	// is not a schedule makes it), or another tool replaced it. They are
	// not counted in Scheduled and Cron.
	BrokenScheduled, BrokenCron int
	// UnlistedScheduled counts the delayed tasks of queues left out of
	// Queues past StatsConfig.MaxQueues.
	UnlistedScheduled int
}

// StatsConfig names what [Stats] reads and how it recognises queues.
type StatsConfig[K comparable] struct {
	// TaskStream, ScheduleStream and DLQStream are the streams' names;
	// delayed tasks and repeating schedules live in ScheduleStream.
	TaskStream, ScheduleStream, DLQStream string
	// DelayStream holds delayed tasks on their way into ScheduleStream
	// (counted as scheduled); Delays matches all of its subjects.
	DelayStream, Delays string
	// Schedules and Crons match every one-shot and repeating schedule
	// subject (each ends with ">"); DLQPrefix is the dead-letter subject
	// of the empty type ("<prefix>.dlq.").
	Schedules, Crons, DLQPrefix string
	// MaxScheduled bounds the delayed tasks read; MaxJunk the junk
	// subjects named; MaxQueues the queues listed that have delayed tasks
	// but no consumer (0: no bound).
	MaxScheduled, MaxJunk, MaxQueues int
	// QueueOf identifies the queue of a consumer, false for a consumer that
	// is not a queue's.
	QueueOf func(ci *jetstream.ConsumerInfo) (K, bool)
	// TargetOf identifies the queue of a schedule's target subject.
	TargetOf func(subject string) (K, bool)
}

// lastOnSubject collects, during a scan, the last message of each subject
// that holds more than one: a schedule subject holds one message (the
// server rolls it up when it stores a schedule), so any other message
// stored after the schedule decides what the subject holds.
type lastOnSubject struct {
	several map[string]bool // subjects holding more than one message
	last    map[string]jsapi.Stored
}

func newLastOnSubject(subjects map[string]uint64) *lastOnSubject {
	l := &lastOnSubject{last: make(map[string]jsapi.Stored)}
	for subj, n := range subjects {
		if n > 1 {
			if l.several == nil {
				l.several = make(map[string]bool)
			}
			l.several[subj] = true
		}
	}
	return l
}

// keep remembers m when its subject holds several messages, and reports
// whether it did: m is then judged once the scan is over, by the subject's
// last message.
func (l *lastOnSubject) keep(m jsapi.Stored) bool {
	if !l.several[m.Subject] {
		return false
	}
	l.last[m.Subject] = m
	return true
}

// afterCount runs between a count of the schedule stream's subjects that
// match filter and the scan of those subjects; tests set it to store
// messages in that window.
var afterCount = func(filter string) {}

// Stats reads the load of every queue of stream: the consumers (one paged
// request), the delayed tasks per queue (batched direct gets, a thousand
// per round trip, because a schedule's subject does not carry its type),
// the repeating schedules, and the dead letters per type (one stream info
// request; a missing dead-letter stream counts none).
func Stats[K comparable](ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream jetstream.Stream,
	cfg StatsConfig[K]) (*Snapshot[K], error) {
	out := &Snapshot[K]{Queues: make(map[K]*Load), Dead: make(map[string]uint64)}
	queue := func(k K) *Load {
		q := out.Queues[k]
		if q == nil {
			q = &Load{}
			out.Queues[k] = q
		}
		return q
	}
	// A queue known only from its delayed tasks is named by whoever
	// enqueued them: at most MaxQueues of those are listed.
	var scheduledOnly int
	scheduled := func(k K) {
		if q := out.Queues[k]; q != nil {
			q.Scheduled++
			return
		}
		if cfg.MaxQueues > 0 && scheduledOnly >= cfg.MaxQueues {
			out.UnlistedScheduled++
			return
		}
		scheduledOnly++
		queue(k).Scheduled++
	}
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		k, ok := cfg.QueueOf(ci)
		if !ok {
			continue
		}
		q := queue(k)
		q.Pending += int(ci.NumPending)
		q.InFlight += ci.NumAckPending
		q.Redelivered += ci.NumRedelivered
		if ci.Paused {
			q.Paused = true
			q.PausedUntil = time.Now().Add(ci.PauseRemaining)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}

	// Delayed tasks: those in the delay stream first, then those in the
	// schedule stream (count them, then read their targets). A mover stores
	// a schedule before it removes its delayed task, so a task moving
	// between the two reads is seen twice, and counted once, never missed.
	moving, err := out.delays(ctx, nc, js, cfg, scheduled)
	if err != nil {
		return nil, err
	}
	sched, err := js.Stream(ctx, cfg.ScheduleStream)
	if err != nil {
		return nil, fmt.Errorf("schedule stream %s: %w", cfg.ScheduleStream, err)
	}
	si, err := sched.Info(ctx, jetstream.WithSubjectFilter(cfg.Schedules))
	if err != nil {
		return nil, err
	}
	out.Scheduled += len(si.State.Subjects)
	afterCount(cfg.Schedules)
	// Each scan stops at the last sequence its count saw: a message stored
	// after it (a task moving out of the delay stream, already counted
	// there, or junk) must not be taken off a count it is not in.
	if len(si.State.Subjects) > 0 {
		schedPrefix := strings.TrimSuffix(cfg.Schedules, ">")
		// count judges the last message of a schedule subject.
		count := func(m jsapi.Stored) {
			switch {
			case taskmsg.DelayedProblem(m.Header, m.Data) != "":
				out.Scheduled--
				out.BrokenScheduled++
			case moving[strings.TrimPrefix(m.Subject, schedPrefix)]:
				out.Scheduled--
			default:
				if k, ok := cfg.TargetOf(m.Header.Get(jetstream.ScheduleTargetHeader)); ok {
					scheduled(k)
				}
			}
		}
		several := newLastOnSubject(si.State.Subjects)
		seen := 0
		err := jsapi.Scan(ctx, nc, cfg.ScheduleStream, cfg.Schedules, 0, si.State.LastSeq, time.Time{}, 1000,
			func(m jsapi.Stored) (bool, error) {
				seen++
				if seen > cfg.MaxScheduled {
					out.Truncated = true
					return false, nil
				}
				out.junk(m, cfg.MaxJunk)
				if !several.keep(m) {
					count(m)
				}
				return true, nil
			})
		if err != nil {
			return nil, fmt.Errorf("scheduled tasks: %w", err)
		}
		for _, m := range several.last {
			count(m)
		}
	}
	ci, err := sched.Info(ctx, jetstream.WithSubjectFilter(cfg.Crons))
	if err != nil {
		return nil, err
	}
	out.Cron = len(ci.State.Subjects)
	afterCount(cfg.Crons)
	if out.Cron > 0 {
		cronPrefix := strings.TrimSuffix(cfg.Crons, ">")
		taskTarget := func(target string) bool { _, ok := cfg.TargetOf(target); return ok }
		count := func(m jsapi.Stored) {
			if taskmsg.CronProblem(strings.TrimPrefix(m.Subject, cronPrefix), m.Header, m.Data, taskTarget) != "" {
				out.Cron--
				out.BrokenCron++
			}
		}
		several := newLastOnSubject(ci.State.Subjects)
		err := jsapi.Scan(ctx, nc, cfg.ScheduleStream, cfg.Crons, 0, ci.State.LastSeq, time.Time{}, 1000,
			func(m jsapi.Stored) (bool, error) {
				out.junk(m, cfg.MaxJunk)
				if !several.keep(m) {
					count(m)
				}
				return true, nil
			})
		if err != nil {
			return nil, fmt.Errorf("repeating schedules: %w", err)
		}
		for _, m := range several.last {
			count(m)
		}
	}

	dlq, err := js.Stream(ctx, cfg.DLQStream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, err
	default:
		di, err := dlq.Info(ctx, jetstream.WithSubjectFilter(cfg.DLQPrefix+">"))
		if err != nil {
			return nil, fmt.Errorf("dead letters: %w", err)
		}
		for subj, n := range di.State.Subjects {
			out.Dead[strings.TrimPrefix(subj, cfg.DLQPrefix)] += n
		}
	}
	return out, nil
}

// delays counts the delayed tasks still in the delay stream (a missing
// stream holds none) as scheduled, and returns their IDs; one without a
// valid target is junk.
func (s *Snapshot[K]) delays(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg StatsConfig[K], scheduled func(K)) (map[string]bool, error) {
	if cfg.DelayStream == "" {
		return nil, nil
	}
	ds, err := js.Stream(ctx, cfg.DelayStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delay stream %s: %w", cfg.DelayStream, err)
	}
	if ds.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	ids := make(map[string]bool)
	prefix := strings.TrimSuffix(cfg.Delays, ">")
	seen := 0
	err = jsapi.Scan(ctx, nc, cfg.DelayStream, cfg.Delays, 0, 0, time.Time{}, 1000, func(m jsapi.Stored) (bool, error) {
		seen++
		if seen > cfg.MaxScheduled {
			s.Truncated = true
			return false, nil
		}
		if k, ok := cfg.TargetOf(m.Header.Get(taskmsg.HeaderScheduleTarget)); ok {
			ids[strings.TrimPrefix(m.Subject, prefix)] = true
			s.Scheduled++
			scheduled(k)
			return true, nil
		}
		s.Junk++
		if len(s.JunkSubjects) < cfg.MaxJunk {
			s.JunkSubjects = append(s.JunkSubjects, m.Subject)
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("delayed tasks: %w", err)
	}
	return ids, nil
}

// junk counts m as junk when it is not a schedule the server fires (a
// plain message stored on a schedule subject) and reports whether it was.
func (s *Snapshot[K]) junk(m jsapi.Stored, max int) bool {
	if m.Header.Get(jetstream.ScheduleHeader) != "" {
		return false
	}
	s.Junk++
	if len(s.JunkSubjects) < max {
		s.JunkSubjects = append(s.JunkSubjects, m.Subject)
	}
	return true
}
