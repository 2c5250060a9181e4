package taskmsg

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a task handed back for its payload version; package framework
// exports them.
const (
	// HeaderVersionRefusedSince is the first hand-back (RFC 3339).
	HeaderVersionRefusedSince = "Jetflow-Version-Refused-Since"
	// HeaderVersionRefusals counts the hand-backs.
	HeaderVersionRefusals = "Jetflow-Version-Refusals"
)

// HandBack is a delivered task that a worker hands back for its payload
// version: stored again as a one-shot schedule that fires it into its
// queue, with the same task ID and a fresh delivery count.
type HandBack struct {
	// Subject is the schedule's subject, Target the subject it fires into.
	Subject, Target string
	// ID is the task's ID; Sequence the delivered message's stream
	// sequence, which deduplicates the schedule: a redelivery of the same
	// message stores it once.
	ID       string
	Sequence uint64
	// Due is when the task comes back.
	Due time.Time
	// Header and Data are the delivered task's headers and payload; Header
	// is not modified.
	Header map[string][]string
	Data   []byte
	// EnqueuedAt is the task's enqueue time, written when Header has none
	// (an immediate task's is its stream timestamp, which the schedule's
	// firing replaces).
	EnqueuedAt time.Time
	// Since is the first hand-back and Refusals the hand-backs so far,
	// this one included.
	Since    time.Time
	Refusals int
}

// Msg returns the schedule's message: the task's as [DelayedSchedule]
// builds it, with the hand-back headers and a message ID of its own.
func (b *HandBack) Msg() *nats.Msg {
	msg := DelayedSchedule(b.Subject, b.Target, b.ID, b.Due, b.Header, b.Data)
	h := msg.Header
	h.Set(HeaderVersionRefusedSince, FormatTime(b.Since))
	h.Set(HeaderVersionRefusals, strconv.Itoa(b.Refusals))
	if h.Get(HeaderEnqueuedAt) == "" && !b.EnqueuedAt.IsZero() {
		h.Set(HeaderEnqueuedAt, FormatTime(b.EnqueuedAt))
	}
	h.Set(jetstream.MsgIDHeader, "version-"+b.ID+"-"+strconv.FormatUint(b.Sequence, 10))
	return msg
}
