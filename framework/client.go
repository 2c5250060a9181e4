package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/streams"
)

// Client enqueues tasks. It is safe for concurrent use; create one per
// connection and share it.
type Client struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	opts  *options
	names streams.Names
}

// NewClient returns a client publishing on nc. The topology must exist
// ([streams.Ensure]) with the same prefix ([WithPrefix]).
func NewClient(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.maxPending))
	if err != nil {
		return nil, fmt.Errorf("framework: jetstream: %w", err)
	}
	return &Client{nc: nc, js: js, opts: o, names: o.names}, nil
}

// JetStream returns the client's JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Names returns the names of the client's topology.
func (c *Client) Names() streams.Names { return c.names }

// Enqueue stores a task of taskType with payload and returns where it went.
// The payload is encoded with the client's codec (JSON by default); a []byte
// payload is sent as is. With [In] or [At] the task waits in a server-side
// schedule and is published to its work subject when due.
//
// Errors: [ErrInvalidTaskType], [ErrInvalidOption], [ErrEncode],
// [ErrPayloadTooLarge], [ErrTopologyMissing], [ErrNotConnected], or the
// context's error. On error nothing was stored, except when ctx ended while
// waiting for the server's acknowledgement: then retry with the same
// [WithID] to be safe.
func (c *Client) Enqueue(ctx context.Context, taskType string, payload any, opts ...EnqueueOption) (TaskInfo, error) {
	msg, info, err := c.build(taskType, payload, opts)
	if err != nil {
		return TaskInfo{}, err
	}
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		return TaskInfo{}, c.publishErr(info, err)
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	if h := c.opts.hooks.Enqueued; h != nil {
		h(info)
	}
	return info, nil
}

// Job is one task of [Client.EnqueueMany].
type Job struct {
	Type    string
	Payload any
	Options []EnqueueOption
}

// EnqueueMany enqueues jobs with asynchronous publishes, keeping at most
// [WithMaxPending] unacknowledged at once, and waits for every
// acknowledgement. It returns one TaskInfo per job, in order. Jobs that failed
// have a zero TaskInfo and are listed in the returned *[BatchError]; the
// others were stored.
func (c *Client) EnqueueMany(ctx context.Context, jobs []Job) ([]TaskInfo, error) {
	infos := make([]TaskInfo, len(jobs))
	futures := make([]jetstream.PubAckFuture, len(jobs))
	var batchErr *BatchError
	fail := func(i int, err error) {
		if batchErr == nil {
			batchErr = &BatchError{Errors: make(map[int]error)}
		}
		batchErr.Errors[i] = err
	}
	for i, j := range jobs {
		if err := ctx.Err(); err != nil {
			fail(i, err)
			continue
		}
		msg, info, err := c.build(j.Type, j.Payload, j.Options)
		if err != nil {
			fail(i, err)
			continue
		}
		infos[i] = info
		f, err := c.js.PublishMsgAsync(msg)
		if err != nil {
			infos[i] = TaskInfo{}
			fail(i, c.publishErr(info, err))
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			infos[i].Stream, infos[i].Sequence, infos[i].Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
			if h := c.opts.hooks.Enqueued; h != nil {
				h(infos[i])
			}
		case err := <-f.Err():
			fail(i, c.publishErr(infos[i], err))
			infos[i] = TaskInfo{}
		case <-ctx.Done():
			fail(i, fmt.Errorf("framework: enqueue %s %s: acknowledgement not received (retry with the same ID): %w", infos[i].Type, infos[i].ID, ctx.Err()))
			infos[i] = TaskInfo{}
		}
	}
	if batchErr != nil {
		return infos, batchErr
	}
	return infos, nil
}

// Cancel removes the pending schedule of a delayed task so it never runs. It
// returns [ErrNotFound] when the task has no pending schedule (it already
// fired, was cancelled, or never existed). A task that already reached its
// work subject cannot be cancelled this way.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if err := streams.ValidateID(id); err != nil {
		return err
	}
	subj := c.names.ScheduleSubject(id)
	s, err := c.js.Stream(ctx, c.names.TaskStream())
	if err != nil {
		return c.publishErr(TaskInfo{ID: id}, err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, subj); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w: task %s has no pending schedule", ErrNotFound, id)
		}
		return fmt.Errorf("framework: cancel %s: %w", id, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("framework: cancel %s: %w", id, err)
	}
	return nil
}

func (c *Client) build(taskType string, payload any, opts []EnqueueOption) (*nats.Msg, TaskInfo, error) {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return nil, TaskInfo{}, err
	}
	var cfg enqueueConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, TaskInfo{}, err
		}
	}
	data, enc, err := encode(c.opts.codec, payload)
	if err != nil {
		return nil, TaskInfo{}, fmt.Errorf("%w: task type %s (%T): %w", ErrEncode, taskType, payload, err)
	}
	id := cfg.id
	if id == "" {
		id = nuid.Next()
	}
	info := TaskInfo{ID: id, Type: taskType, Priority: cfg.priority}
	target := c.names.TaskSubject(cfg.priority, taskType)
	hdr := make(nats.Header, 4+len(cfg.headers))
	hdr[jetstream.MsgIDHeader] = []string{id}
	if enc != "" {
		hdr[HeaderEncoding] = []string{enc}
	}
	for k, v := range cfg.headers {
		hdr.Set(k, v)
	}
	now := time.Now()
	due := cfg.at
	if cfg.delay > 0 {
		due = now.Add(cfg.delay)
	}
	subject := target
	if due.After(now) {
		subject = c.names.ScheduleSubject(id)
		dueStr := due.UTC().Format(time.RFC3339Nano)
		// Set by hand: jetstream.WithScheduleAt truncates to whole seconds,
		// which would fire up to 1 s early.
		hdr[jetstream.ScheduleHeader] = []string{"@at " + dueStr}
		hdr[jetstream.ScheduleTargetHeader] = []string{target}
		hdr[HeaderTaskID] = []string{id}
		hdr[HeaderScheduledFor] = []string{dueStr}
		hdr[HeaderEnqueuedAt] = []string{now.UTC().Format(time.RFC3339Nano)}
		info.ScheduledFor = due
	}
	info.Subject = subject
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	if max := c.nc.MaxPayload(); max > 0 {
		if size := msgSize(msg); size > max {
			return nil, TaskInfo{}, fmt.Errorf("%w: task type %s is %d bytes with headers, the server accepts at most %d; store large data elsewhere (for example an object store) and enqueue a reference",
				ErrPayloadTooLarge, taskType, size, max)
		}
	}
	return msg, info, nil
}

func msgSize(m *nats.Msg) int64 {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

func (c *Client) publishErr(info TaskInfo, err error) error {
	what := fmt.Sprintf("framework: enqueue %s %s", info.Type, info.ID)
	if info.Type == "" {
		what = fmt.Sprintf("framework: task %s", info.ID)
	}
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%s: %w: %w", what, ErrTopologyMissing, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return fmt.Errorf("%s: %w (%w); nothing was stored", what, ErrNotConnected, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%s: %w: %w", what, ErrPayloadTooLarge, err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return fmt.Errorf("%s: %w: %w", what, ErrPayloadTooLarge, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
