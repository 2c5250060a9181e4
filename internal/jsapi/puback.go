package jsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishOnce sends msg once and returns the stream's acknowledgement. It
// is jetstream's PublishMsg without retries, with the same errors
// (ErrNoStreamResponse, *jetstream.APIError wrapped as nats.go wraps it,
// ErrInvalidJSAck), except that an acknowledgement in the server's usual
// form is read without encoding/json (parsePubAck): the decoder's reflection
// was a tenth of a producer's CPU per enqueue. stream is the stream the
// message is meant for; an acknowledgement naming it shares its string.
func publishOnce(ctx context.Context, js jetstream.JetStream, stream string, msg *nats.Msg) (*jetstream.PubAck, error) {
	resp, err := js.Conn().RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, jetstream.ErrNoStreamResponse
		}
		return nil, err
	}
	if ack, ok := parsePubAck(resp.Data, stream); ok {
		return ack, nil
	}
	return decodePubAck(resp.Data)
}

// decodePubAck reads any acknowledgement as nats.go does: an API error, or
// an acknowledgement that names its stream.
func decodePubAck(data []byte) (*jetstream.PubAck, error) {
	var r struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return nil, fmt.Errorf("nats: %w", r.Error)
	}
	if r.PubAck == nil || r.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return r.PubAck, nil
}

// Acknowledgement forms the server writes for a stored message without a
// domain (nats-server's stream.go: the prefix, the sequence, then one of
// the endings).
const (
	ackStream    = `{"stream":"`
	ackSeq       = `","seq":`
	ackEnd       = `}`
	ackDuplicate = `,"duplicate": true}`
	// maxSeqDigits keeps the sequence below 10^19, inside a uint64.
	maxSeqDigits = 19
)

// parsePubAck reads an acknowledgement in exactly one of the server's
// usual forms: {"stream":"S","seq":N} or the same with ,"duplicate": true.
// Anything else (a domain, an error, spaces, escapes, a long sequence) is
// left to decodePubAck (ok false). The stream name is stream's string when
// equal.
func parsePubAck(data []byte, stream string) (*jetstream.PubAck, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(ackStream))
	if !ok {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return nil, false
	}
	name := rest[:end]
	for _, c := range name {
		if c < ' ' || c > '~' || c == '\\' {
			return nil, false // escapes, control bytes, UTF-8: JSON's rules
		}
	}
	rest, ok = bytes.CutPrefix(rest[end:], []byte(ackSeq))
	if !ok {
		return nil, false
	}
	var seq uint64
	n := 0
	for ; n < len(rest) && n < maxSeqDigits && rest[n] >= '0' && rest[n] <= '9'; n++ {
		seq = seq*10 + uint64(rest[n]-'0')
	}
	if n == 0 || (n > 1 && rest[0] == '0') {
		return nil, false
	}
	ack := &jetstream.PubAck{Stream: stream, Sequence: seq}
	if string(name) != stream {
		ack.Stream = string(name)
	}
	switch string(rest[n:]) {
	case ackEnd:
	case ackDuplicate:
		ack.Duplicate = true
	default:
		return nil, false
	}
	return ack, true
}
