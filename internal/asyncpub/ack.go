package asyncpub

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Ack is a publish acknowledgement: the stream that stored the message, its
// sequence there, and whether the stream dropped it as a duplicate of an
// earlier message with the same Nats-Msg-Id (then Seq is that message's).
type Ack struct {
	Stream    string
	Seq       uint64
	Duplicate bool
}

// ErrInvalidAck reports a reply that is not a publish acknowledgement.
var ErrInvalidAck = jetstream.ErrInvalidJSAck

// ParseAck reads the reply m to a JetStream publish. A no-responders status
// (no stream took the subject, or its leader is missing) is
// [jetstream.ErrNoStreamResponse]; an error the server reported is its
// *[jetstream.APIError]; a reply that is not an acknowledgement wraps
// [ErrInvalidAck]. known is a stream name the caller expects: an
// acknowledgement from it shares the string instead of copying the name.
func ParseAck(m *nats.Msg, known string) (Ack, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return Ack{}, jetstream.ErrNoStreamResponse
	}
	if stream, seq, dup, ok := scan(m.Data); ok {
		name := known
		if string(stream) != known {
			name = string(stream)
		}
		return Ack{Stream: name, Seq: seq, Duplicate: dup}, nil
	}
	return decode(m.Data)
}

// decode is ParseAck with the JSON decoder.
func decode(data []byte) (Ack, error) {
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return Ack{}, fmt.Errorf("%w: %q", ErrInvalidAck, truncate(data))
	}
	if resp.Error != nil {
		return Ack{}, resp.Error
	}
	if resp.Stream == "" || resp.Sequence == 0 {
		return Ack{}, fmt.Errorf("%w: %q", ErrInvalidAck, truncate(data))
	}
	return Ack{Stream: resp.Stream, Seq: resp.Sequence, Duplicate: resp.Duplicate}, nil
}

func truncate(b []byte) []byte {
	const limit = 200
	if len(b) > limit {
		return b[:limit]
	}
	return b
}

// scan reads an acknowledgement exactly as the server writes a plain one,
// {"stream":"<name>","seq":<n>} with an optional ,"duplicate":true before
// the brace, and a name of printable ASCII, without a JSON decoder. It
// reports false for anything else (errors, domains, escapes), which
// ParseAck then decodes.
func scan(b []byte) (stream []byte, seq uint64, dup bool, ok bool) {
	const head = `{"stream":"`
	if !bytes.HasPrefix(b, []byte(head)) || bytes.Contains(b, []byte(`"error"`)) {
		return nil, 0, false, false
	}
	b = b[len(head):]
	end := bytes.IndexByte(b, '"')
	if end <= 0 {
		return nil, 0, false, false
	}
	for _, c := range b[:end] {
		if c < 0x20 || c > 0x7e || c == '\\' { // escapes, control bytes, UTF-8: the decoder's
			return nil, 0, false, false
		}
	}
	stream = b[:end]
	b, ok = bytes.CutPrefix(b[end:], []byte(`","seq":`))
	if !ok {
		return nil, 0, false, false
	}
	n := 0
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9'; n++ {
		if n == 19 || (n > 0 && seq == 0) { // too long, or a leading zero
			return nil, 0, false, false
		}
		seq = seq*10 + uint64(b[n]-'0')
	}
	if n == 0 || seq == 0 {
		return nil, 0, false, false
	}
	switch rest := b[n:]; {
	case string(rest) == "}":
		return stream, seq, false, true
	case string(rest) == `,"duplicate":true}`:
		return stream, seq, true, true
	}
	return nil, 0, false, false
}
