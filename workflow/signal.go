package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// Limits of workflow events, which the event stream enforces.
const (
	// MaxEventKeyLen is the longest event key, in bytes: 200.
	MaxEventKeyLen = streamdefs.MaxEventKeyLen
	// MaxEventBytes is the largest event payload, in bytes: 64 KiB.
	MaxEventBytes = streamdefs.MaxEventBytes
	// DefaultEventRetention is how long the event stream keeps an event, 7
	// days: an event published before a run starts waiting for it is found
	// when the wait begins, within this window.
	DefaultEventRetention = streamdefs.DefaultEventRetention
)

// SignalOption configures one [Client.Signal].
type SignalOption func(*signalConfig) error

type signalConfig struct {
	id string
}

// WithEventID sets the event's deduplication ID (Nats-Msg-Id): a second
// event with the same ID within the event stream's duplicate window is
// dropped. IDs follow [streams.ValidateID]. Default: none (a repeated event
// is stored again; it still resumes each waiting run once).
func WithEventID(id string) SignalOption {
	return func(c *signalConfig) error {
		if err := streams.ValidateID(id); err != nil {
			return fmt.Errorf("%w: event ID: %w", ErrInvalidOption, err)
		}
		c.id = id
		return nil
	}
}

// EventInfo describes a delivered event.
type EventInfo struct {
	// Key is the event's key; Subject the subject it was stored on.
	Key, Subject string
	// Seq is its sequence in the event stream; Duplicate is set when the
	// stream dropped it as a duplicate ([WithEventID]).
	Seq       uint64
	Duplicate bool
	// Waiting lists the runs that waited for the key just before it was
	// stored (read before the publish, so a run the event resumes at once
	// is listed all the same).
	// The event router resumes them. An event no run waits for yet is
	// kept for [DefaultEventRetention]: a run that starts waiting
	// for its key within that time resumes at once.
	Waiting []string
	// WaitingErr, when not nil, says why Waiting could not be listed (for
	// example a producer allowed to publish events but not to read the
	// wait stream). The event was stored all the same.
	WaitingErr error `json:"-"`
}

// Signal delivers the event key with payload to the runs waiting for it
// ([WaitEvent]), and keeps it for the runs that will. The payload is
// encoded as JSON (a json.RawMessage or []byte is used as is and must be
// JSON; nil sends an empty payload, read as null), at most
// [MaxEventBytes]. It is stored on "<prefix>.event.<key>" in the
// event stream; the event router of a worker resumes the waiting runs.
//
// Errors: [ErrInvalidEvent] (key or payload), [ErrEventTooLarge],
// [ErrInvalidOption], [framework.ErrTopologyMissing] when the event stream
// does not exist (no worker with WaitEvent steps has started), or a publish
// error.
func (c *Client) Signal(ctx context.Context, key string, payload any, opts ...SignalOption) (EventInfo, error) {
	info := EventInfo{Key: key, Subject: c.names.EventSubject(key)}
	if err := streamdefs.ValidateEventKey(key); err != nil {
		return info, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	var cfg signalConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return info, err
		}
	}
	data, err := encodeEvent(payload)
	if err != nil {
		return info, err
	}
	// The waiting runs are listed before the event is stored: once it is,
	// the event router may resume them and remove their wait entries
	// before a read after the publish would see them.
	ws, waitErr := c.store.waiters(ctx, key)
	m := &nats.Msg{Subject: info.Subject, Data: data}
	if cfg.id != "" {
		m.Header = nats.Header{}
		m.Header.Set(jetstream.MsgIDHeader, cfg.id)
	}
	ack, err := c.store.js.PublishMsg(ctx, m, jetstream.WithExpectStream(c.names.EventStream()))
	if err != nil {
		return info, fmt.Errorf("workflow: signal %s: %w", key, eventsErr(c.names, err))
	}
	info.Seq, info.Duplicate = ack.Sequence, ack.Duplicate
	if waitErr != nil {
		info.WaitingErr = fmt.Errorf("workflow: signal %s: stored, but the waiting runs could not be listed: %w", key, waitErr)
	}
	for _, w := range ws {
		info.Waiting = append(info.Waiting, w.run)
	}
	return info, nil
}

// SignalRun delivers an event with payload to the step of run id that
// waits for one ([WaitEvent]): it reads the run's document for the key the
// step waits for and calls [Signal] with it. It returns an error wrapping
// [ErrRunNotFound] for an unknown run and [ErrNotWaiting] when no step of
// the run waits for an event now (signal the key to deliver an event
// before the run waits for it).
func (c *Client) SignalRun(ctx context.Context, id string, payload any, opts ...SignalOption) (EventInfo, error) {
	r, err := c.Status(ctx, id)
	if err != nil {
		return EventInfo{}, err
	}
	for _, st := range r.Steps {
		if st.State == StepWaiting && st.EventKey != "" {
			return c.Signal(ctx, st.EventKey, payload, opts...)
		}
	}
	return EventInfo{}, fmt.Errorf("%w: run %s is %s and none of its steps waits for an event", ErrNotWaiting, id, r.Status)
}

// encodeEvent returns the payload of an event, checked as an event router
// checks it.
func encodeEvent(payload any) ([]byte, error) {
	var data []byte
	switch p := payload.(type) {
	case nil:
	case json.RawMessage:
		data = p
	case []byte:
		data = p
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, fmt.Errorf("%w: encode the payload: %w", ErrInvalidEvent, err)
		}
		data = b
	}
	if _, err := eventPayload(data); err != nil {
		return nil, err
	}
	return data, nil
}
