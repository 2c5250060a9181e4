package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// The dead-letter code reads streams with JetStream's direct get API, which
// any replica answers without creating server-side state: one request
// returns up to a batch of messages matching a subject filter (followed by
// an end-of-batch marker), or the last message of each subject matching a
// filter. That keeps a page of [DeadLetters.List], one batch of a replay, or
// the failure history of a task to a single round trip, with bounded memory.

// storedMsg is a message read from a stream.
type storedMsg struct {
	Subject    string
	Seq        uint64
	Time       time.Time
	Header     nats.Header
	Data       []byte
	NumPending uint64 // batch reads: matching messages left after this one
}

// directGetRequest is the JSON body of a direct get request.
type directGetRequest struct {
	Seq          uint64     `json:"seq,omitempty"`
	NextFor      string     `json:"next_by_subj,omitempty"`
	Batch        int        `json:"batch,omitempty"`
	MaxBytes     int        `json:"max_bytes,omitempty"`
	StartTime    *time.Time `json:"start_time,omitempty"`
	MultiLastFor []string   `json:"multi_last,omitempty"`
}

// errDirectNoStream reports that no server answered a direct get: the
// stream does not exist (or does not allow direct gets).
var errDirectNoStream = errors.New("framework: stream does not answer direct gets")

// directBatchBytes bounds the bytes of one batch.
const directBatchBytes = 4 << 20

// directGet sends req to stream's direct get API and calls fn with each
// message of the answer, in stream order. It returns the number of messages;
// "no message" is 0 messages and no error. A batch or multi-last request
// must set Batch: it sizes the reply buffer. A context without deadline is
// bounded by dlqOpTimeout.
func directGet(ctx context.Context, nc *nats.Conn, stream string, req directGetRequest, fn func(storedMsg) error) (int, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	multi := req.Batch > 0
	if len(req.MultiLastFor) > 0 && !multi {
		return 0, errors.New("framework: direct get: a multi-last request needs a batch size")
	}
	if multi && req.MaxBytes == 0 {
		req.MaxBytes = directBatchBytes
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
				return 0, fmt.Errorf("%w: %s", errDirectNoStream, stream)
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
func directReply(stream string, m *nats.Msg, fn func(storedMsg) error) (int, error) {
	if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
		switch status {
		case "204", "404": // end of batch; no (more) message
			return 0, nil
		case "503":
			return 0, fmt.Errorf("%w: %s", errDirectNoStream, stream)
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

func parseDirect(m *nats.Msg) (storedMsg, error) {
	h := m.Header
	seq, err := strconv.ParseUint(h.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return storedMsg{}, fmt.Errorf("bad sequence header %q", h.Get("Nats-Sequence"))
	}
	ts, err := time.Parse(time.RFC3339Nano, h.Get("Nats-Time-Stamp"))
	if err != nil {
		return storedMsg{}, fmt.Errorf("bad timestamp header %q", h.Get("Nats-Time-Stamp"))
	}
	np, _ := strconv.ParseUint(h.Get("Nats-Num-Pending"), 10, 64)
	return storedMsg{Subject: h.Get("Nats-Subject"), Seq: seq, Time: ts, Header: h, Data: m.Data, NumPending: np}, nil
}

// scanStream calls fn for each message matching filter from sequence from
// (or, when from is 0 and start is set, from the first message stored at or
// after start) up to sequence to (0: no bound), in batches of batch. fn
// returns false to stop. Memory is bounded by one batch.
func scanStream(ctx context.Context, nc *nats.Conn, stream, filter string, from, to uint64, start time.Time, batch int,
	fn func(storedMsg) (bool, error)) error {
	if from == 0 && start.IsZero() {
		from = 1
	}
	for {
		req := directGetRequest{Seq: from, NextFor: filter, Batch: batch}
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
		var last storedMsg
		stop := false
		got, err := directGet(ctx, nc, stream, req, func(m storedMsg) error {
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
