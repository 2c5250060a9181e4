package pull

import (
	"errors"
	"strings"
	"time"
)

// Delivery is what a worker reads of a delivery's metadata for every task:
// the part of [jetstream.MsgMetadata] it uses, parsed from the ack subject
// without the allocations of [Msg.Metadata] (two structures and the
// subject's tokens).
type Delivery struct {
	NumDelivered uint64    // deliveries so far, this one included
	StreamSeq    uint64    // the message's stream sequence
	Timestamp    time.Time // when the message was stored
}

// errAckSubject reports an ack subject that is not one of the server's.
var errAckSubject = errors.New("pull: invalid format of ACK subject")

// Delivery parses m's ack subject like nats.go's Metadata does (both the
// nine-token form and the one with domain and account hash, eleven tokens
// or more).
func (m *Msg) Delivery() (Delivery, error) { return parseDelivery(m.msg.Reply) }

func parseDelivery(subject string) (Delivery, error) {
	rest, ok := strings.CutPrefix(subject, "$JS.ACK.")
	if !ok {
		return Delivery{}, errAckSubject
	}
	switch n := strings.Count(rest, ".") + 3; {
	case n == 9:
		// <stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
	case n >= 11:
		// <domain>.<account hash>.<stream>.<consumer>.…: skip the first two
		_, rest, _ = strings.Cut(rest, ".")
		_, rest, _ = strings.Cut(rest, ".")
	default:
		return Delivery{}, errAckSubject
	}
	var tok [7]string
	for i := range tok {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	return Delivery{
		NumDelivered: parseNum(tok[2]),
		StreamSeq:    parseNum(tok[3]),
		Timestamp:    time.Unix(0, int64(parseNum(tok[5]))),
	}, nil
}

// parseNum parses a decimal number of an ack subject; anything else is 0,
// as in nats.go.
func parseNum(d string) (n uint64) {
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
