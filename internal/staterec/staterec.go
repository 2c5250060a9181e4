package staterec

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
)

// stallRetries bounds how long a record write waits for room in the
// asynchronous publish window: 25 stalls of 200 ms.
const stallRetries = 25

// Writer writes task records with asynchronous publishes. It is safe for
// concurrent use.
type Writer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sure   jetstream.JetStream // confirmed writes (WriteConfirmed)
	prefix string              // "$KV.<bucket>."
	log    *slog.Logger
	errs   atomic.Uint64
}

// Confirmed writes: how long a write waits for its acknowledgement, how
// long it pauses before it is tried again, and how many times it is
// tried (about two minutes when the server does not answer).
const (
	confirmTimeout = 5 * time.Second
	confirmPause   = time.Second
	confirmTries   = 20
	// headerTry numbers the tries of a confirmed write after the first.
	headerTry = "Jetflow-Record-Try"
)

// NewWriter returns a writer of records into bucket, keeping at most
// maxPending acknowledged writes in flight.
func NewWriter(nc *nats.Conn, bucket string, maxPending int, log *slog.Logger) (*Writer, error) {
	sw := &Writer{nc: nc, prefix: "$KV." + bucket + ".", log: log}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(sw.failed))
	if err != nil {
		return nil, err
	}
	sure, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(confirmTimeout),
		jetstream.WithPublishAsyncErrHandler(sw.unconfirmed))
	if err != nil {
		return nil, err
	}
	sw.js, sw.sure = js, sure
	return sw, nil
}

// WriteConfirmed publishes the record data of task id, overwriting any,
// and makes sure the stream stored it, without waiting: a write the
// server refuses, or does not acknowledge within 5 s (its stream has no
// leader, the server restarts), is tried again after a pause of 1 s, up to
// 20 times, unless the connection was closed. It is for the final records
// a caller waits for (framework.Client.Wait): a plain [Writer.Write] of one
// is lost when the stream cannot store it.
func (sw *Writer) WriteConfirmed(id string, data []byte) {
	sw.confirm(&nats.Msg{Subject: sw.prefix + Key(id), Data: data}, 1)
}

// confirm publishes msg, the try-th time.
func (sw *Writer) confirm(msg *nats.Msg, try int) {
	if try > 1 {
		msg.Header = nats.Header{headerTry: []string{strconv.Itoa(try)}}
	}
	_, err := sw.sure.PublishMsgAsync(msg)
	for i := 1; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && i < stallRetries; i++ {
		_, err = sw.sure.PublishMsgAsync(msg)
	}
	if err != nil {
		sw.retry(msg, try, err)
	}
}

// unconfirmed is the error handler of confirmed writes.
func (sw *Writer) unconfirmed(_ jetstream.JetStream, msg *nats.Msg, err error) {
	try, _ := strconv.Atoi(msg.Header.Get(headerTry))
	sw.retry(msg, max(try, 1), err)
}

// retry writes msg again after a pause, unless it was tried enough or the
// connection is closed for good.
func (sw *Writer) retry(msg *nats.Msg, try int, err error) {
	if try >= confirmTries || sw.nc.IsClosed() {
		sw.fail(strings.TrimPrefix(msg.Subject, sw.prefix), err)
		return
	}
	again := &nats.Msg{Subject: msg.Subject, Data: msg.Data}
	time.AfterFunc(confirmPause, func() { sw.confirm(again, try+1) })
}

// Write publishes the record data of task id without waiting. With
// onlyIfNew the record is stored only when the task has none yet (an
// enqueue must not overwrite what a worker already wrote).
func (sw *Writer) Write(id string, data []byte, onlyIfNew bool) {
	msg := &nats.Msg{Subject: sw.prefix + Key(id), Data: data}
	if !onlyIfNew {
		// Worker records overwrite whatever is there: publish without
		// asking for an acknowledgement. It halves the client's cost of a
		// record; a record the stream could not store is lost, like one
		// whose asynchronous acknowledgement reported an error.
		if err := sw.nc.PublishMsg(msg); err != nil {
			sw.fail(id, err)
		}
		return
	}
	msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}
	_, err := sw.js.PublishMsgAsync(msg)
	// A full window (maxPending writes awaiting their
	// acknowledgement) makes the publish wait 200 ms and give up: wait
	// longer, slowing tasks down rather than losing records, but not
	// forever (a server that does not answer).
	for i := 1; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && i < stallRetries; i++ {
		_, err = sw.js.PublishMsgAsync(msg)
	}
	if err != nil {
		sw.fail(id, err)
	}
}

// failed is the asynchronous publish error handler.
func (sw *Writer) failed(_ jetstream.JetStream, msg *nats.Msg, err error) {
	if msg.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "0" && natserr.WrongLastSequence(err) {
		return // a worker wrote the record first: expected
	}
	sw.fail(strings.TrimPrefix(msg.Subject, sw.prefix), err)
}

func (sw *Writer) fail(key string, err error) {
	n := sw.errs.Add(1)
	if n == 1 || n%1000 == 0 {
		hint := ""
		if natserr.NoResponse(err) {
			hint = " (does the state bucket exist? see framework.EnsureBuckets)"
		}
		sw.log.Warn("jetflow could not write a task state record"+hint,
			slog.String("key", key), slog.Uint64("failures", n), slog.Any("error", err))
	}
}

// Key maps a task ID to its KV key, one to one. IDs made of A-Z a-z
// 0-9 _ - (every generated ID, and the IDs of scheduled ticks) are their own
// key; any other byte, '=' included, is written "=XX" in hex, so "a:b"
// becomes "a=3Ab".
func Key(id string) string {
	clean := true
	for i := 0; i < len(id) && clean; i++ {
		clean = keySafe(id[i])
	}
	if clean && id != "" {
		return id
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(id) + 8)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keySafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	if b.Len() == 0 {
		return "=" // the empty ID
	}
	return b.String()
}

func keySafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}
