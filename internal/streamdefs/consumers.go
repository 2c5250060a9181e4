package streamdefs

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// FiredMaxAckPending is the MaxAckPending of the schedule stream's
// consumer that the task stream sources fired schedules through, and of
// the movers' consumer ([DelayConsumerConfig]).
const FiredMaxAckPending = 20_000

// DelayNames names the movers' consumer and where it moves delayed tasks
// to; streams.Names implements it.
type DelayNames interface {
	DelayConsumer() string
	ScheduleStream() string
}

// DelayConsumerConfig returns the configuration of the movers' consumer of
// the delay stream (streams.Names.DelayConsumer). A delayed task is
// acknowledged once its schedule is stored, so a mover that dies hands its
// tasks to another after the ack wait; deliveries are unlimited (a task
// that cannot be moved is dead-lettered by the mover, never dropped by the
// server). streams.Ensure creates the consumer and sets it right; a
// worker's mover uses it as it finds it (warning when it differs) and
// creates it only when it does not exist, so workers need no right to
// create or change it.
func DelayConsumerConfig(n DelayNames) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       n.DelayConsumer(),
		Description:   "jetflow: moves delayed tasks into the schedule stream " + n.ScheduleStream(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: FiredMaxAckPending,
	}
}
