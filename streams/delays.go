package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Producers do not write the schedule stream. A stream that allows message
// schedules must allow Nats-Rollup (the server forces it), so anyone who
// may publish there can delete every pending delayed task and cron schedule
// with one "Nats-Rollup: all" header. A producer publishes a delayed task
// to the delay stream instead, "<prefix>.delay.<id>": a work queue without
// schedules that refuses rollups. Every worker runs a mover on its durable
// consumer ([Names.DelayConsumer]) that validates each delayed task and
// writes its schedule, "<prefix>.sched.<id>", to the schedule stream before
// acknowledging it (decision 025). Only workers and operators write the
// schedule stream.

// DelayStream returns the name of the stream producers publish delayed
// tasks to, for example "JETFLOW_DELAYS".
func (n Names) DelayStream() string { return n.upper + "_DELAYS" }

// DelaySubject returns the subject a producer publishes a delayed task on:
// "<prefix>.delay.<id>". It does not validate its argument.
func (n Names) DelaySubject(id string) string { return n.prefix + ".delay." + id }

// ParseDelaySubject returns the task ID of a delay subject
// ([Names.DelaySubject]), validated with [ValidateID].
func (n Names) ParseDelaySubject(subject string) (string, error) {
	id, ok := strings.CutPrefix(subject, n.prefix+".delay.")
	if !ok {
		return "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.prefix+".delay.")
	}
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return id, nil
}

// DelayConsumer returns the name of the durable consumer of the delay
// stream that workers' movers share: "mover".
func (n Names) DelayConsumer() string { return "mover" }

// ensureDelayConsumer creates the movers' consumer, or updates the
// settings in which it differs from streamdefs.DelayConsumerConfig; those the
// server cannot change in place are drift. With apply false it changes
// nothing and counts as drift the settings the server never changes on a
// consumer (its ack and deliver policies, see [delayConsumerInPlace]).
func ensureDelayConsumer(ctx context.Context, js jetstream.JetStream, n Names, rep *Report, apply bool) error {
	want := streamdefs.DelayConsumerConfig(n)
	name := n.DelayStream() + "/" + want.Durable
	have, err := js.Consumer(ctx, n.DelayStream(), want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound) || !apply && errors.Is(err, jetstream.ErrStreamNotFound):
		if apply {
			if _, err := js.CreateConsumer(ctx, n.DelayStream(), want); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
				return fmt.Errorf("streams: create consumer %s: %w", name, err)
			}
		}
		rep.Created = append(rep.Created, name)
		return nil
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		// Not in place: delete it and run Ensure again.
		rep.Drift = append(rep.Drift, Drift{Resource: name, Field: "DeliverSubject", Want: "none (a pull consumer)", Have: "set (a push consumer)",
			Fix: n.fix(name, "DeliverSubject")})
		return nil
	case err != nil:
		return fmt.Errorf("streams: look up consumer %s: %w", name, err)
	}
	drift := delays.ConsumerDrift(want, have.CachedInfo().Config)
	if len(drift) == 0 {
		rep.Unchanged = append(rep.Unchanged, name)
		return nil
	}
	changed := func() {
		rep.Updated = append(rep.Updated, name)
		for _, d := range drift {
			rep.Changed = append(rep.Changed, Drift{Resource: name, Field: d.Field, Want: d.Want, Have: d.Have})
		}
	}
	notInPlace := func(only func(field string) bool) {
		for _, d := range drift {
			if only(d.Field) {
				rep.Drift = append(rep.Drift, Drift{Resource: name, Field: d.Field, Want: d.Want, Have: d.Have, Fix: n.fix(name, d.Field)})
			}
		}
	}
	if !apply {
		for _, d := range drift {
			if !delayConsumerInPlace(d.Field) {
				// Ensure's update would be refused: all of it is drift.
				notInPlace(func(string) bool { return true })
				return nil
			}
		}
		changed()
		return nil
	}
	_, err = js.UpdateConsumer(ctx, n.DelayStream(), want)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		changed()
		return nil
	case natserr.Transient(err) || !errors.As(err, &apiErr):
		return fmt.Errorf("streams: update consumer %s: %w", name, err)
	}
	// Not in place: the consumer must be deleted and created again.
	notInPlace(func(string) bool { return true })
	return nil
}

// delayConsumerInPlace reports whether the server changes field of a pull
// consumer in place; it refuses an update of its ack or deliver policy.
func delayConsumerInPlace(field string) bool {
	return field != "AckPolicy" && field != "DeliverPolicy"
}

func delayStreamConfig(c Config, n Names) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        n.DelayStream(),
		Description: "jetflow delayed tasks on their way into the schedule stream " + n.ScheduleStream() + " (producers publish here)",
		Subjects:    []string{n.DelaySubject(">")},
		// Work queue: the mover's acknowledgement deletes a moved task.
		Retention: jetstream.WorkQueuePolicy,
		Discard:   jetstream.DiscardOld,
		Storage:   c.Storage,
		Replicas:  c.Replicas,
		// Two enqueues of one ID store one delayed task.
		Duplicates: c.DuplicateWindow,
		// Cancelling a delayed task purges its subject here too (an
		// operator's right, not a producer's).
		AllowRollup: false,
		AllowDirect: true,
	}
}
