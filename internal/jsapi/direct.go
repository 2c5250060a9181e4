package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/natserr"
)

// Stored is a message read from a stream.
type Stored struct {
	Subject    string
	Seq        uint64
	Time       time.Time
	Header     nats.Header
	Data       []byte
	NumPending uint64 // batch reads: matching messages left after this one
}

// GetRequest is the JSON body of a direct get request.
type GetRequest struct {
	Seq          uint64     `json:"seq,omitempty"`
	NextFor      string     `json:"next_by_subj,omitempty"`
	Batch        int        `json:"batch,omitempty"`
	MaxBytes     int        `json:"max_bytes,omitempty"`
	StartTime    *time.Time `json:"start_time,omitempty"`
	MultiLastFor []string   `json:"multi_last,omitempty"`
}

// ErrNoStream reports that no server answered a direct get: the
// stream does not exist (or does not allow direct gets). It is
// [natserr.ErrNoStream], so natserr classifies it as a missing topology.
var ErrNoStream = natserr.ErrNoStream

// batchBytes bounds the bytes of one batch.
const batchBytes = 4 << 20

// DirectGet sends req to stream's direct get API and calls fn with each
// message of the answer, in stream order. It returns the number of messages;
// "no message" is 0 messages and no error. A batch or multi-last request
// must set Batch: it sizes the reply buffer. A context without deadline is
// bounded by DefaultTimeout.
func DirectGet(ctx context.Context, nc *nats.Conn, stream string, req GetRequest, fn func(Stored) error) (int, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	multi := req.Batch > 0
	if len(req.MultiLastFor) > 0 && !multi {
		return 0, errors.New("framework: direct get: a multi-last request needs a batch size")
	}
	if multi && req.MaxBytes == 0 {
		req.MaxBytes = batchBytes
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	subject := "$JS.API.DIRECT.GET." + stream
	if !multi {
		m, err := nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return 0, fmt.Errorf("%w: %s", ErrNoStream, stream)
			}
			return 0, fmt.Errorf("framework: direct get from %s: %w", stream, err)
		}
		return directReply(stream, m, fn)
	}
	// Room for the whole answer (the batch and its end marker), so that the
	// connection never drops a reply while fn runs.
	ch := make(chan *nats.Msg, req.Batch+4)
	inbox := nc.NewRespInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return 0, fmt.Errorf("framework: direct get from %s: %w", stream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return 0, fmt.Errorf("framework: direct get from %s: %w", stream, err)
	}
	total := 0
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return total, fmt.Errorf("framework: direct get from %s: %w", stream, ctx.Err())
		}
		n, err := directReply(stream, m, fn)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// directReply handles one reply message: it calls fn for a stored message
// and returns 1, or returns 0 for an end marker or "no message".
func directReply(stream string, m *nats.Msg, fn func(Stored) error) (int, error) {
	// A stored message may carry any header, "Status" included: what tells
	// it from a status of the server is the "Nats-Stream" header the server
	// appends to every stored message it returns (and never to a status).
	if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 && len(m.Header.Values("Nats-Stream")) == 0 {
		switch status {
		case "204", "404": // end of batch; no (more) message
			return 0, nil
		case "503":
			return 0, fmt.Errorf("%w: %s", ErrNoStream, stream)
		default:
			return 0, fmt.Errorf("framework: direct get from %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
	}
	sm, err := parseDirect(m)
	if err != nil {
		return 0, fmt.Errorf("framework: direct get from %s: %w", stream, err)
	}
	return 1, fn(sm)
}

// parseDirect reads the headers the server appends to a stored message it
// returns. The server appends them after the message's own headers, so the
// last value of each is the server's, whatever the producer stored.
func parseDirect(m *nats.Msg) (Stored, error) {
	h := m.Header
	seq, err := strconv.ParseUint(lastHeader(h, "Nats-Sequence"), 10, 64)
	if err != nil {
		return Stored{}, fmt.Errorf("bad sequence header %q", cut(lastHeader(h, "Nats-Sequence"), 64))
	}
	ts, err := time.Parse(time.RFC3339Nano, lastHeader(h, "Nats-Time-Stamp"))
	if err != nil {
		return Stored{}, fmt.Errorf("bad timestamp header %q", cut(lastHeader(h, "Nats-Time-Stamp"), 64))
	}
	np, _ := strconv.ParseUint(lastHeader(h, "Nats-Num-Pending"), 10, 64)
	return Stored{Subject: lastHeader(h, "Nats-Subject"), Seq: seq, Time: ts, Header: h, Data: m.Data, NumPending: np}, nil
}

// lastHeader returns the last value of header k, "" when absent.
func lastHeader(h nats.Header, k string) string {
	v := h.Values(k)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// cut returns at most the first n bytes of s.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Scan calls fn for each message matching filter from sequence from
// (or, when from is 0 and start is set, from the first message stored at or
// after start) up to sequence to (0: no bound), in batches of batch. fn
// returns false to stop. Memory is bounded by one batch.
func Scan(ctx context.Context, nc *nats.Conn, stream, filter string, from, to uint64, start time.Time, batch int,
	fn func(Stored) (bool, error)) error {
	if from == 0 && start.IsZero() {
		from = 1
	}
	for {
		req := GetRequest{Seq: from, NextFor: filter, Batch: batch}
		if to > 0 {
			if from > to {
				return nil
			}
			req.Batch = int(min(uint64(batch), to-from+1))
		}
		if from == 0 {
			st := start.UTC()
			req.StartTime = &st
		}
		var last Stored
		stop := false
		got, err := DirectGet(ctx, nc, stream, req, func(m Stored) error {
			if stop || (to > 0 && m.Seq > to) {
				stop = true
				return nil
			}
			last = m
			cont, err := fn(m)
			if err != nil {
				return err
			}
			stop = !cont
			return nil
		})
		if err != nil {
			return err
		}
		if stop || got == 0 || last.NumPending == 0 {
			return nil
		}
		from = last.Seq + 1
	}
}
