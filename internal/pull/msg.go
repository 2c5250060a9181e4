package pull

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	ackAckBody      = []byte("+ACK")
	ackNakBody      = []byte("-NAK")
	ackProgressBody = []byte("+WPI")
	ackTermBody     = []byte("+TERM")
)

// Msg is a stored message delivered to an Iter. It implements
// [jetstream.Msg] with the same acknowledgement protocol as nats.go.
type Msg struct {
	nc  *nats.Conn
	msg *nats.Msg
	// beat is when the message reached the queue or last got a heartbeat
	// there (Unix nanoseconds): see [Msg.LastBeat].
	beat atomic.Int64

	mu   sync.Mutex
	ackd bool
}

var _ jetstream.Msg = (*Msg)(nil)

// Metadata parses the message's ack subject.
func (m *Msg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNotJSMessage, err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (m *Msg) Data() []byte         { return m.msg.Data }
func (m *Msg) Headers() nats.Header { return m.msg.Header }
func (m *Msg) Subject() string      { return m.msg.Subject }
func (m *Msg) Reply() string        { return m.msg.Reply }

func (m *Msg) Ack() error { return m.ack(context.Background(), ackAckBody, false, true) }
func (m *Msg) DoubleAck(ctx context.Context) error {
	return m.ack(ctx, ackAckBody, true, true)
}
func (m *Msg) Nak() error { return m.ack(context.Background(), ackNakBody, false, true) }
func (m *Msg) NakWithDelay(d time.Duration) error {
	if d <= 0 {
		return m.Nak()
	}
	return m.ack(context.Background(), fmt.Appendf(nil, "-NAK {\"delay\": %d}", d.Nanoseconds()), false, true)
}
func (m *Msg) InProgress() error {
	return m.ack(context.Background(), ackProgressBody, false, false)
}
func (m *Msg) Term() error { return m.ack(context.Background(), ackTermBody, false, true) }
func (m *Msg) TermWithReason(reason string) error {
	if reason == "" {
		return m.Term()
	}
	return m.ack(context.Background(), append(append([]byte(nil), "+TERM "...), reason...), false, true)
}

func (m *Msg) ack(ctx context.Context, body []byte, sync, final bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ackLocked(ctx, body, sync, final)
}

// ackLocked is ack with m.mu held.
func (m *Msg) ackLocked(ctx context.Context, body []byte, sync, final bool) error {
	if m.ackd {
		return jetstream.ErrMsgAlreadyAckd
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		_, err = m.nc.RequestWithContext(ctx, m.msg.Reply, body)
	} else {
		err = m.nc.Publish(m.msg.Reply, body)
	}
	if err != nil {
		return err
	}
	if final {
		m.ackd = true
	}
	return nil
}
