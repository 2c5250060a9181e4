package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Delayed tasks and repeating schedules live in their own stream, the
// schedule stream, not in the task stream: nats-server forces a stream that
// allows message schedules to allow Nats-Rollup and purges, and a rollup
// header on a task subject would delete other producers' waiting tasks (or,
// with "all", the whole stream). The task stream therefore denies rollups
// and purges, and a schedule fires into a staging subject of the schedule
// stream, "<prefix>.fired.<priority>.<type>", which the task stream sources
// through a durable consumer with flow-control acknowledgements and a
// subject transform to "<prefix>.task.<priority>.<type>" (decision 012).

// ScheduleStream returns the name of the stream holding delayed tasks, cron
// schedules and fired schedules on their way to the task stream, for
// example "JETFLOW_SCHEDULES".
func (n Names) ScheduleStream() string { return n.upper + "_SCHEDULES" }

// FiredSubject returns the staging subject a delayed task or cron schedule
// of a task type at a priority fires into: "<prefix>.fired.<priority>.<type>".
// The task stream sources it as [Names.TaskSubject]. It does not validate
// its arguments.
func (n Names) FiredSubject(p Priority, taskType string) string {
	return n.base() + ".fired." + p.String() + "." + taskType
}

// FiredWildcard returns the subject matching every staging subject:
// "<prefix>.fired.>".
func (n Names) FiredWildcard() string { return n.base() + ".fired.>" }

// FiredConsumer returns the name of the durable consumer of the schedule
// stream through which the task stream sources fired schedules: "tasks".
func (n Names) FiredConsumer() string {
	if n.part == 0 {
		return "tasks"
	}
	return "tasks-p" + strconv.Itoa(n.part)
}

// FiredDeliverSubject returns the deliver subject of [Names.FiredConsumer]:
// "<prefix>.sourcing.fired". Only the server publishes on it; no role needs
// a permission for it.
func (n Names) FiredDeliverSubject() string { return n.prefix + ".sourcing.fired" + n.partTok() }

// ParseFiredSubject splits a staging subject ([Names.FiredSubject]) into
// its priority and task type, validating both.
func (n Names) ParseFiredSubject(subject string) (Priority, string, error) {
	rest, k, ok := n.cut(subject)
	if ok {
		rest, ok = strings.CutPrefix(rest, "fired.")
	}
	if !ok {
		return 0, "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.base()+".fired.")
	}
	return n.Partition(k).ParseTaskSubject(n.Partition(k).base() + ".task." + rest)
}

// ParseScheduleTarget parses the Nats-Schedule-Target of a delayed task or
// cron schedule into its priority and task type. Schedules target staging
// subjects ([Names.FiredSubject]); a target on a work subject (a schedule
// written before the schedule stream existed) is accepted too.
func (n Names) ParseScheduleTarget(target string) (Priority, string, error) {
	if p, t, err := n.ParseFiredSubject(target); err == nil {
		return p, t, nil
	}
	return n.ParseTaskSubject(target)
}

// firedConsumerConfig returns the configuration of the durable consumer of
// the schedule stream that the task partition n names sources fired
// schedules through ([Names.FiredConsumer]). Its flow-control
// acknowledgements remove a fired message from the (work-queue) schedule
// stream only once the task stream stored it.
func firedConsumerConfig(c Config, n Names) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        n.FiredConsumer(),
		Description:    "jetflow: the task stream sources fired schedules through this consumer",
		DeliverSubject: n.FiredDeliverSubject(),
		FilterSubject:  n.FiredWildcard(),
		AckPolicy:      jetstream.AckFlowControlPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// Unacknowledged fired messages in flight to the task stream; the
		// server's default (1000) stalls the sourcing when thousands of
		// delayed tasks come due in the same instant.
		MaxAckPending: streamdefs.FiredMaxAckPending,
		Replicas:      c.Replicas,
	}
}

// waitSourcing waits until stream sources origin: the server set up the
// sourcing consumer (the source reports an activity and no error). Until
// then a fired schedule stays in origin. It gives up when ctx ends, or
// after streamdefs.RetryFor when ctx has no deadline.
func waitSourcing(ctx context.Context, js jetstream.JetStream, stream, origin string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, streamdefs.RetryFor)
		defer cancel()
	}
	wait := streamdefs.Backoff()
	var last error
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			last = fmt.Errorf("no source %s", origin)
			for _, src := range s.CachedInfo().Sources {
				switch {
				case src.Name != origin:
				case src.Error != nil:
					last = src.Error
				case src.Active >= 0:
					return nil
				default:
					last = errors.New("sourcing consumer not set up yet")
				}
			}
		} else {
			last = err
		}
		if !retry.Sleep(ctx, wait.NextBackOff()) {
			return fmt.Errorf("streams: %s does not source %s: %w (%w)", stream, origin, last, ctx.Err())
		}
	}
}

func ensureFiredConsumer(ctx context.Context, js jetstream.JetStream, c Config, n Names, rep *Report, apply bool) error {
	want := firedConsumerConfig(c, n)
	name := n.ScheduleStream() + "/" + want.Durable
	have, err := js.PushConsumer(ctx, n.ScheduleStream(), want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound) || !apply && errors.Is(err, jetstream.ErrStreamNotFound):
		if apply {
			if _, err := js.CreatePushConsumer(ctx, n.ScheduleStream(), want); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
				return fmt.Errorf("streams: create consumer %s: %w", name, err)
			}
		}
		rep.Created = append(rep.Created, name)
		return nil
	case err != nil:
		return fmt.Errorf("streams: look up consumer %s: %w", name, err)
	}
	hc := have.CachedInfo().Config
	drift := func(field string, w, h any) {
		rep.Drift = append(rep.Drift, Drift{Resource: name, Field: field, Want: fmt.Sprint(w), Have: fmt.Sprint(h), Fix: n.fix(name, field)})
	}
	if hc.MaxAckPending != want.MaxAckPending {
		if apply {
			if _, err := js.UpdatePushConsumer(ctx, n.ScheduleStream(), want); err != nil {
				return fmt.Errorf("streams: update consumer %s: %w", name, err)
			}
		}
		rep.Updated = append(rep.Updated, name)
		rep.Changed = append(rep.Changed, Drift{Resource: name, Field: "MaxAckPending", Want: fmt.Sprint(want.MaxAckPending), Have: fmt.Sprint(hc.MaxAckPending)})
		return nil
	}
	if hc.AckPolicy != want.AckPolicy {
		drift("AckPolicy", want.AckPolicy, hc.AckPolicy)
	}
	if hc.DeliverSubject != want.DeliverSubject {
		drift("DeliverSubject", want.DeliverSubject, hc.DeliverSubject)
	}
	if hc.FilterSubject != want.FilterSubject || len(hc.FilterSubjects) > 0 {
		drift("FilterSubject", want.FilterSubject, hc.FilterSubject+strings.Join(hc.FilterSubjects, ","))
	}
	if len(rep.Drift) == 0 {
		rep.Unchanged = append(rep.Unchanged, name)
	}
	return nil
}

// MigrationStream returns the name of the stream [MigrateTaskStream] keeps
// the messages of the old task stream in while it recreates it, for example
// "JETFLOW_MIGRATION".
func (n Names) MigrationStream() string { return n.upper + "_MIGRATION" }

// headerMigrated prefixes, in the migration stream, the server headers
// ("Nats-…") a message had in the old task stream: stored as they are, the
// migration stream would act on them (schedules, TTLs, message IDs).
const headerMigrated = "Jetflow-Migrated-"

// directGetHeaders are the headers the server appends to a message it
// returns from a direct get.
var directGetHeaders = map[string]bool{"Nats-Stream": true, "Nats-Sequence": true, "Nats-Time-Stamp": true,
	"Nats-Subject": true, "Nats-Num-Pending": true, "Nats-Last-Sequence": true, "Nats-UpTo-Sequence": true}

// Migration says what [MigrateTaskStream] did.
type Migration struct {
	// Copied is how many messages of the old task stream were copied to
	// the migration stream (0 when the task stream needed no migration).
	Copied int
	// Restored is how many of them were stored again: delayed tasks and
	// cron schedules in the schedule stream, the rest in the task stream.
	Restored int
	// Ensure is the report of the [Ensure] that created the new topology.
	Ensure *Report
}

// MigrateTaskStream recreates a task stream created before the schedule
// stream existed (it allows message schedules, so the server forces it to
// accept Nats-Rollup and purges, and neither turns schedules off nor lets
// such a stream source the schedule stream). Stop producers and workers
// first: tasks delivered but not yet acknowledged would run again, and
// workflow run documents change sequence.
//
//  1. Every message of the old task stream is copied, with its headers, to
//     the migration stream ([Names.MigrationStream]) under
//     "<prefix>.migration.<subject>", each with a message ID of its old
//     sequence, and the copy is counted against the stream.
//  2. The old task stream (and its consumers) is deleted.
//  3. [Ensure] creates the schedule stream and the new task stream.
//  4. Each copy is stored again: delayed tasks and cron schedules in the
//     schedule stream aimed at their staging subject, everything else in
//     the task stream on its own subject with its own message ID (a copy
//     without one gets "migrated-<old sequence>", so a rerun stores nothing
//     twice within the duplicate window).
//  5. The migration stream is deleted.
//
// A crash at any point leaves either the old stream or the migration
// stream: run MigrateTaskStream again and it resumes. On a stream that
// needs no migration it only runs [Ensure]. Memory use is bounded by one
// batch of messages.
func MigrateTaskStream(ctx context.Context, js jetstream.JetStream, c Config) (*Migration, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	mig := &Migration{}
	nc := js.Conn()
	old, err := js.Stream(ctx, n.TaskStream())
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, fmt.Errorf("streams: migrate: look up %s: %w", n.TaskStream(), err)
	case old.CachedInfo().Config.AllowMsgSchedules:
		cp, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        n.MigrationStream(),
			Description: "jetflow: the old task stream's messages while MigrateTaskStream recreates it",
			Subjects:    []string{n.prefix + ".migration.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     c.Storage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			AllowDirect: true,
		})
		if err != nil {
			return nil, fmt.Errorf("streams: migrate: create %s: %w", n.MigrationStream(), err)
		}
		err = jsapi.Scan(ctx, nc, n.TaskStream(), ">", 0, 0, time.Time{}, 256, func(m jsapi.Stored) (bool, error) {
			h := nats.Header{}
			for k, vs := range m.Header {
				switch {
				case strings.HasPrefix(k, "Nats-Expected-"), k == jetstream.MsgRollup, directGetHeaders[k]:
				case strings.HasPrefix(k, "Nats-"):
					h[headerMigrated+k] = vs
				default:
					h[k] = vs
				}
			}
			h.Set(jetstream.MsgIDHeader, "migrated-"+strconv.FormatUint(m.Seq, 10))
			_, err := jsapi.Publish(ctx, js, n.MigrationStream(), &nats.Msg{Subject: n.prefix + ".migration." + m.Subject, Header: h, Data: m.Data}, quiet)
			return true, err
		})
		if err != nil {
			return nil, fmt.Errorf("streams: migrate: copy %s: %w", n.TaskStream(), err)
		}
		have, err := old.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("streams: migrate: %w", err)
		}
		ci, err := cp.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("streams: migrate: %w", err)
		}
		if ci.State.Msgs < have.State.Msgs {
			return nil, fmt.Errorf("streams: migrate: %s holds %d messages, %s only %d (was something published meanwhile?); nothing deleted, run it again",
				n.TaskStream(), have.State.Msgs, n.MigrationStream(), ci.State.Msgs)
		}
		mig.Copied = int(ci.State.Msgs)
		if err := js.DeleteStream(ctx, n.TaskStream()); err != nil {
			return nil, fmt.Errorf("streams: migrate: delete %s: %w", n.TaskStream(), err)
		}
	}
	rep, err := Ensure(ctx, js, c)
	mig.Ensure = rep
	if err != nil {
		return mig, err
	}
	if _, err := js.Stream(ctx, n.MigrationStream()); errors.Is(err, jetstream.ErrStreamNotFound) {
		return mig, nil
	}
	prefix := n.prefix + ".migration."
	err = jsapi.Scan(ctx, nc, n.MigrationStream(), ">", 0, 0, time.Time{}, 256, func(m jsapi.Stored) (bool, error) {
		subj := strings.TrimPrefix(m.Subject, prefix)
		h := nats.Header{}
		for k, vs := range m.Header {
			switch {
			case strings.HasPrefix(k, headerMigrated):
				h[strings.TrimPrefix(k, headerMigrated)] = vs
			case k != jetstream.MsgIDHeader:
				h[k] = vs
			}
		}
		if h.Get(jetstream.MsgIDHeader) == "" {
			h.Set(jetstream.MsgIDHeader, m.Header.Get(jetstream.MsgIDHeader))
		}
		stream := n.TaskStream()
		if strings.HasPrefix(subj, n.RunSubject("")) {
			// A workflow run document moves to the run stream, which
			// replaces revisions by itself and refuses roll-ups.
			stream = n.RunStream()
			h.Del(jetstream.MsgRollup)
		}
		if strings.HasPrefix(subj, n.ScheduleSubject("")) || strings.HasPrefix(subj, n.CronSubject("")) {
			stream = n.ScheduleStream()
			if p, t, err := n.ParseTaskSubject(h.Get(jetstream.ScheduleTargetHeader)); err == nil {
				h.Set(jetstream.ScheduleTargetHeader, n.FiredSubject(p, t))
			}
		}
		if stream != n.RunStream() {
			// Only the run stream allows message TTL (decision 040): a
			// task that had one is stored as a plain task.
			h.Del(jetstream.MsgTTLHeader)
		}
		if _, err := jsapi.Publish(ctx, js, stream, &nats.Msg{Subject: subj, Header: h, Data: m.Data}, quiet); err != nil {
			return false, fmt.Errorf("store %s: %w", subj, err)
		}
		mig.Restored++
		return true, nil
	})
	if err != nil {
		return mig, fmt.Errorf("streams: migrate: restore from %s: %w", n.MigrationStream(), err)
	}
	if err := js.DeleteStream(ctx, n.MigrationStream()); err != nil {
		return mig, fmt.Errorf("streams: migrate: delete %s: %w", n.MigrationStream(), err)
	}
	return mig, nil
}

// quiet discards the retry logs of the migration's publishes.
var quiet = slog.New(slog.DiscardHandler)
