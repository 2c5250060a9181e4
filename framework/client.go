package framework

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/internal/enqueue"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/stage"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// Client enqueues tasks. It is safe for concurrent use; create one per
// connection and share it.
type Client struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	opts  *options
	names streams.Names
	// stateWriter writes "pending" records; nil without state tracking.
	stateWriter *staterec.Writer
	// taskStream is the task stream's name, shared by the TaskInfos of
	// EnqueueMany.
	taskStream string
	// ackTimeout bounds the wait for an acknowledgement of EnqueueMany
	// (asyncAckTimeout; tests shorten it).
	ackTimeout time.Duration

	// builder builds task messages, router chooses their task partitions
	// and uniques reserves the keys of unique tasks (internal/enqueue).
	builder enqueue.Builder
	router  *enqueue.Router
	uniques enqueue.Reserver
	// enqueuing counts the hooks with an Enqueuing callback (enqueue_trace.go).
	enqueuing int
}

// NewClient returns a client publishing on nc. The topology must exist
// ([streams.Ensure]) with the same prefix ([WithPrefix]).
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o, err := newOptions(opts, ClientOption.applyClient)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.maxPending), jetstream.WithPublishAsyncTimeout(asyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("framework: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, opts: o, names: o.names, taskStream: o.names.TaskStream(), ackTimeout: asyncAckTimeout,
		router:  enqueue.NewRouter(js, o.names, o.partitions, o.logger),
		uniques: enqueue.Reserver{Conn: nc, JS: js, Names: o.names, Rules: uniqueRules, Log: o.logger}}
	c.builder = enqueue.Builder{Names: o.names, Codec: o.codec, NoDedup: o.noDedup, MaxPayload: nc.MaxPayload,
		ErrInvalid: ErrInvalidOption, Router: c.router}
	for _, h := range o.hooks {
		if h.Enqueuing != nil {
			c.enqueuing++
		}
	}
	c.installClientState()
	return c, nil
}

// JetStream returns the client's JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Names returns the names of the client's topology.
func (c *Client) Names() streams.Names { return c.names }

// Enqueue stores a task of taskType with payload and returns where it went.
// The payload is encoded with the client's codec (JSON by default); a []byte
// payload is sent as is. With [In] or [At] the task goes to the delay
// stream, a worker's delay mover turns it into a server-side schedule, and
// the schedule publishes it to its work subject when due.
//
// While the task stream cannot answer (a cluster electing a new stream
// leader, a server restarting) Enqueue retries with the same message and
// task ID, so the stream stores the task once, until ctx ends or for
// [DefaultEnqueueTimeout] when ctx has no deadline. To tell a stream
// without a leader from a missing topology it asks the stream's
// STREAM.INFO once; a connection that may not ask (a producer without the
// JetStream API, as docs/security.md recommends) gets [ErrTopologyMissing]
// at once, its message saying that the stream may also be without a leader.
// A full task stream ([streams.Config] MaxTaskBytes) is not retried: it
// refuses the task with [ErrQueueFull].
//
// Errors: [ErrInvalidTaskType], [ErrInvalidOption], [ErrEncode],
// [ErrPayloadTooLarge], [ErrQueueFull], [ErrTopologyMissing],
// [ErrNotConnected], or the context's error. On error nothing was stored, except when ctx ended while
// waiting for the server's acknowledgement: then retry with the same
// [WithID] to be safe.
func (c *Client) Enqueue(ctx context.Context, taskType string, payload any, opts ...EnqueueOption) (TaskInfo, error) {
	// enqueue.BuildTask, without its frames: a goroutine started for one
	// enqueue keeps its first stack only while the build and the publish
	// stay shallow (see enqueue.Builder.Build).
	if err := c.builder.Check(taskType, payload); err != nil {
		return TaskInfo{}, err
	}
	cfg, err := enqueue.Options(opts)
	if err != nil {
		return TaskInfo{}, err
	}
	msg, b, err := c.builder.Build(taskType, payload, cfg, nil, c.router.Layout(ctx))
	if err != nil {
		return TaskInfo{}, err
	}
	info := TaskInfo{ID: b.ID, Type: taskType, Priority: b.Priority, Subject: msg.Subject, ScheduledFor: b.Due}
	err = c.send(ctx, msg, &info)
	return info, err
}

// send stores the task msg that Enqueue built and completes its info. It
// takes and fills info in place, so that neither frame holds copies of it.
func (c *Client) send(ctx context.Context, msg *nats.Msg, info *TaskInfo) (err error) {
	if r := stage.From(ctx); r != nil {
		*info, err = c.enqueueStaged(ctx, r, msg, *info) // stage.go
		return err
	}
	traced := c.traceEnqueue(ctx, msg, *info)
	if msg.Header.Get(HeaderUniqueKey) != "" {
		var dup bool
		*info, dup, err = c.enqueueUnique(ctx, msg, *info)
		traced(*info, err)
		if err != nil || dup {
			return err
		}
		c.enqueued(ctx, *info)
		return nil
	}
	ack, err := c.publishAck(ctx, msg)
	if err != nil {
		err = c.publishErr(*info, err)
		traced(*info, err)
		*info = TaskInfo{}
		return err
	}
	*info = c.stored(ctx, *info, ack)
	traced(*info, nil)
	return nil
}

// enqueued writes the state record of a stored task and calls the Enqueued
// hook.
func (c *Client) enqueued(ctx context.Context, info TaskInfo) {
	c.writeEnqueued(info)
	c.emitEnqueued(ctx, info)
}

// TaskSpec is one task of [Client.EnqueueMany].
type TaskSpec struct {
	// Type is the task type, as for [Client.Enqueue].
	Type string
	// Payload is encoded like the payload of [Client.Enqueue].
	Payload any
	// Options are the job's enqueue options.
	Options []EnqueueOption
}

// EnqueueMany enqueues jobs with asynchronous publishes, keeping at most
// [WithMaxPending] unacknowledged at once, and waits for every
// acknowledgement. It returns one TaskInfo per job, in order. Jobs that failed
// have a zero TaskInfo and are listed in the returned *[BatchError]; the
// others were stored.
//
// Acknowledgements are settled while later jobs are still being published,
// so the messages EnqueueMany holds are bounded by the window, not by the
// number of jobs; the returned TaskInfos are the only memory that grows
// with the batch. [Client.EnqueueSeq] does without them.
func (c *Client) EnqueueMany(ctx context.Context, jobs []TaskSpec) ([]TaskInfo, error) {
	b, prepare := c.batch(ctx)
	infos, errs := b.Many(ctx, jobs, prepare)
	if errs != nil {
		return infos, &BatchError{Errors: errs}
	}
	return infos, nil
}

// EnqueueSeq enqueues the jobs of seq like [Client.EnqueueMany], keeping at
// most [WithMaxPending] unacknowledged at once, but reports each job's
// result to report as it is settled instead of returning them all, so its
// memory is bounded by the window whatever the number of jobs: a million
// jobs generated on the fly cost what a window of them costs. report gets
// the job's index in seq and its TaskInfo, or the error that kept it from
// being stored (then the TaskInfo is zero); it is called once per job, in
// seq's order, from one goroutine at a time, and must not block for long
// (it holds up the acknowledgements behind it). EnqueueSeq returns once
// every job was reported, with the number of jobs that failed.
func (c *Client) EnqueueSeq(ctx context.Context, seq iter.Seq[TaskSpec], report func(i int, info TaskInfo, err error)) (failed int) {
	b, prepare := c.batch(ctx)
	return b.Seq(ctx, seq, prepare, report)
}

// batch returns the batch publisher of EnqueueMany and EnqueueSeq
// (enqueue.Batch) and the function that builds the message of a job.
func (c *Client) batch(ctx context.Context) (*enqueue.Batch[TaskSpec, TaskInfo], func(TaskSpec) (*nats.Msg, TaskInfo, error)) {
	// Interned strings: the work subject of each type and priority, built
	// once and shared by the messages and TaskInfos of the call.
	subjects := make(enqueue.Subjects)
	partitions := c.router.Layout(ctx)
	b := &enqueue.Batch[TaskSpec, TaskInfo]{Conn: c.nc, Window: c.opts.maxPending, AckTimeout: c.ackTimeout, Stream: c.taskStream,
		Trace: c.traceEnqueue, Send: c.publishAck, Failed: c.publishErr, Unacked: unacked, Stored: c.stored}
	return b, func(j TaskSpec) (*nats.Msg, TaskInfo, error) {
		msg, info, err := c.build(j.Type, j.Payload, j.Options, subjects, partitions)
		if err == nil && msg.Header.Get(HeaderUniqueKey) != "" {
			err = fmt.Errorf("%w: Unique is not available with EnqueueMany; use Enqueue", ErrInvalidOption)
		}
		return msg, info, err
	}
}

// unacked describes a job of EnqueueMany whose acknowledgement was not
// received because its context ended with err.
func unacked(info TaskInfo, err error) error {
	return fmt.Errorf("framework: enqueue %s %s: acknowledgement not received (retry with the same ID): %w", info.Type, info.ID, err)
}

// publishAck is publish with the acknowledgement as a window reports it.
func (c *Client) publishAck(ctx context.Context, msg *nats.Msg) (asyncpub.Ack, error) {
	pa, err := c.publish(ctx, msg)
	if err != nil {
		return asyncpub.Ack{}, err
	}
	return asyncpub.Ack{Stream: pa.Stream, Seq: pa.Sequence, Duplicate: pa.Duplicate}, nil
}

// stored completes the TaskInfo of a published task with its
// acknowledgement and records it (Client.enqueued).
func (c *Client) stored(ctx context.Context, info TaskInfo, ack asyncpub.Ack) TaskInfo {
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Seq, ack.Duplicate
	if info.Stream == c.taskStream {
		info.Stream = c.taskStream // one shared copy, not one per acknowledgement
	}
	info.ID = enqueue.TaskID(info.ID, ack.Seq)
	c.enqueued(ctx, info)
	return info
}

// build validates a task and returns its message and TaskInfo
// (enqueue.BuildTask), with the work subjects of subjects (nil: the
// builder's own), spread over the task partitions of l.
func (c *Client) build(taskType string, payload any, opts []EnqueueOption, subjects enqueue.Subjects, l streams.Layout) (*nats.Msg, TaskInfo, error) {
	msg, b, err := enqueue.BuildTask(&c.builder, taskType, payload, opts, subjects, l)
	if err != nil {
		return nil, TaskInfo{}, err
	}
	return msg, TaskInfo{ID: b.ID, Type: taskType, Priority: b.Priority, Subject: msg.Subject, ScheduledFor: b.Due}, nil
}

// Cancel removes the pending schedule of a delayed task so it never runs; it
// is [Inspector.CancelTask], with the same errors: one that matches
// [ErrNotFound] when the task has no pending schedule (it already fired,
// was cancelled, or never existed), and also [ErrNotCancellable] when its
// state record says what became of it. A task that already reached its
// work subject cannot be cancelled this way.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.Inspector().CancelTask(ctx, id)
}

// publishErr describes the failed publish of the task of info
// (enqueue.PublishError).
func (c *Client) publishErr(info TaskInfo, err error) error {
	return enqueue.PublishError(c.nc.IsClosed(), info.Type, info.ID, err)
}

// asyncAckTimeout bounds the wait for the acknowledgement of an
// asynchronous publish (EnqueueMany, replays, workflow tasks sent by a
// worker); a publish of EnqueueMany not acknowledged by then is retried
// with Client.publish.
const asyncAckTimeout = 10 * time.Second

// publish stores msg with internal/jsapi.PublishWithin, which retries while
// the task stream cannot answer, for at most [DefaultEnqueueTimeout] when
// ctx has no deadline.
func (c *Client) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	return jsapi.PublishWithin(ctx, c.js, c.router.Stream(msg), msg, c.opts.logger, DefaultEnqueueTimeout)
}
