package settle

import (
	"time"

	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Delivery is what a decision is carried out on: the delivered message
// (Ack, Nak, Term) and the worker's parts of settling it. A worker
// implements it on the task it already holds, so carrying a decision out
// allocates nothing.
type Delivery interface {
	// Ack acknowledges the delivery (the worker batches its acks).
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	TermWithReason(reason string) error
	// DeadLetter writes the task's dead letter, failed with cause.
	DeadLetter(cause error) error
	// RetryDelay is the delay before the delivery is tried again when its
	// dead letter could not be written: the type's backoff.
	RetryDelay() time.Duration
	// NotSent is told of an Ack, Nak or Term the server was not sent.
	NotSent(op string, err error)
}

// MaxTermReason bounds the reason sent with a Term, in bytes.
const MaxTermReason = 1024

// Carried is what [Carry] did.
type Carried struct {
	// Sent is false when the delivery's Ack, Nak or Term could not be
	// sent (Delivery.NotSent was told): the server redelivers it after its
	// ack wait.
	Sent bool
	// DeadLettered is true when the dead letter was written.
	DeadLettered bool
	// DeadLetterErr is the error of a dead letter that could not be
	// written: the task was handed back after its RetryDelay instead of
	// failing, so that no task is terminated without its dead letter.
	DeadLetterErr error
	// Delay is the delay the task was handed back with.
	Delay time.Duration
}

// Carry carries d out on dv for an attempt that failed with cause (nil
// when it succeeded): Ack; Nak, with d's delay; the dead letter, then Term
// with the cause as reason; a Nak at the last delivery, which the server's
// max-deliveries advisory turns into a dead letter; or a Nak that hands the
// task back unfinished.
func Carry(dv Delivery, d Decision, cause error) Carried {
	c := Carried{Sent: true}
	send := func(op string, err error) {
		if err != nil {
			c.Sent = false
			dv.NotSent(op, err)
		}
	}
	switch d.Action {
	case Ack:
		send("ack", dv.Ack())
	case HandBack:
		send("nak", dv.Nak())
	case Retry:
		c.Delay = d.Delay
		if d.Delay > 0 {
			send("nak", dv.NakWithDelay(d.Delay))
		} else {
			send("nak", dv.Nak())
		}
	case Fail:
		if d.DeadLetter {
			if err := dv.DeadLetter(cause); err != nil {
				// Never terminate what could not be dead-lettered.
				c.DeadLetterErr = err
				c.Delay = dv.RetryDelay()
				send("nak", dv.NakWithDelay(c.Delay))
				return c
			}
			c.DeadLettered = true
		}
		if d.Term {
			send("term", dv.TermWithReason(reason(cause)))
		} else {
			// Handed back without delay: the server sees MaxDeliver
			// reached, keeps the message and emits a max-deliveries
			// advisory for the dead-letter router.
			send("nak", dv.Nak())
		}
	}
	return c
}

// reason is cause's text, cut to MaxTermReason bytes.
func reason(cause error) string {
	if cause == nil {
		return ""
	}
	return textcut.Cut(cause.Error(), MaxTermReason)
}
