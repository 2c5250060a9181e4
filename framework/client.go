package framework

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/internal/enqueue"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
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
	msg, info, err := c.build(taskType, payload, opts, nil, c.router.Layout(ctx))
	if err != nil {
		return TaskInfo{}, err
	}
	if r := stage.From(ctx); r != nil {
		return c.enqueueStaged(ctx, r, msg, info) // stage.go
	}
	traced := c.traceEnqueue(ctx, msg, info)
	if msg.Header.Get(HeaderUniqueKey) != "" {
		info, dup, err := c.enqueueUnique(ctx, msg, info)
		traced(info, err)
		if err != nil || dup {
			return info, err
		}
		c.enqueued(ctx, info)
		return info, nil
	}
	ack, err := c.publish(ctx, msg)
	if err != nil {
		err = c.publishErr(info, err)
		traced(info, err)
		return TaskInfo{}, err
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	info.ID = enqueue.TaskID(info.ID, ack.Sequence)
	c.enqueued(ctx, info)
	traced(info, nil)
	return info, nil
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
	infos := make([]TaskInfo, len(jobs))
	var batchErr *BatchError
	// The report runs on one goroutine at a time, in publish order.
	c.enqueueStream(ctx, slices.All(jobs), len(jobs), func(i int, info TaskInfo, err error) {
		if err != nil {
			if batchErr == nil {
				batchErr = &BatchError{Errors: make(map[int]error)}
			}
			batchErr.Errors[i] = err
			return
		}
		infos[i] = info
	})
	if batchErr != nil {
		return infos, batchErr
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
	c.enqueueStream(ctx, func(yield func(int, TaskSpec) bool) {
		i := 0
		for j := range seq {
			if !yield(i, j) {
				return
			}
			i++
		}
	}, -1, func(i int, info TaskInfo, err error) {
		if err != nil {
			failed++
		}
		if report != nil {
			report(i, info, err)
		}
	})
	return failed
}

// enqueueStream publishes the jobs of seq asynchronously and calls report
// once per job, in order, from one goroutine at a time. n is the number of
// jobs when known, -1 otherwise.
func (c *Client) enqueueStream(ctx context.Context, seq iter.Seq2[int, TaskSpec], n int, report func(int, TaskInfo, error)) {
	// The publishes go through a window of their own (internal/asyncpub):
	// one subscription for the call, acknowledgements matched by sequence,
	// no future or timer per message. One goroutine settles them in
	// publish order as they arrive; a settled message is garbage at once.
	// The window and the settler's queue are as deep as WithMaxPending (a
	// smaller batch needs no more than itself). Failures before the publish
	// go through the same queue, so that report keeps the jobs' order.
	depth := c.opts.maxPending
	if n >= 0 && n < depth {
		depth = n
	}
	win, openErr := asyncpub.Open(c.nc, depth, c.ackTimeout, c.taskStream)
	if openErr == nil {
		defer win.Close()
	}
	pending := make(chan pendingPublish, depth)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		for p := range pending {
			if p.err != nil {
				report(p.index, TaskInfo{}, p.err)
				continue
			}
			info, err := c.settle(ctx, win, p)
			report(p.index, info, err)
		}
	}()
	// Interned strings: the work subject of each type and priority, built
	// once and shared by the messages and TaskInfos of the call.
	subjects := make(enqueue.Subjects)
	partitions := c.router.Layout(ctx)
	for i, j := range seq {
		if err := ctx.Err(); err != nil {
			pending <- pendingPublish{index: i, err: err}
			continue
		}
		msg, info, err := c.build(j.Type, j.Payload, j.Options, subjects, partitions)
		if err != nil {
			pending <- pendingPublish{index: i, err: err}
			continue
		}
		if msg.Header.Get(HeaderUniqueKey) != "" {
			pending <- pendingPublish{index: i, err: fmt.Errorf("%w: Unique is not available with EnqueueMany; use Enqueue", ErrInvalidOption)}
			continue
		}
		traced := c.traceEnqueue(ctx, msg, info) // enqueue_trace.go
		err = openErr
		var sent uint64
		if err == nil {
			sent, err = win.Publish(ctx, msg)
		}
		if err != nil {
			err = c.publishErr(info, err)
			traced(info, err)
			pending <- pendingPublish{index: i, err: err}
			continue
		}
		pending <- pendingPublish{index: i, info: info, msg: msg, seq: sent, traced: traced}
	}
	close(pending)
	<-settled
}

// pendingPublish is a job of EnqueueMany or EnqueueSeq on its way to its
// report: an asynchronous publish awaiting its acknowledgement (the job's
// index, its TaskInfo as built, its message and sequence in the window), or
// a job that failed before it was sent (err).
type pendingPublish struct {
	index  int
	info   TaskInfo
	msg    *nats.Msg
	seq    uint64
	traced func(TaskInfo, error) // reports the result to the enqueue tracers
	err    error
}

// settle waits for the acknowledgement of p in win and returns its
// completed TaskInfo, or the error that kept it from being stored. A publish
// the stream could not take (for example during a leader election) or whose
// acknowledgement did not come is retried with the same message and task
// ID, which the stream drops if the first one was stored.
func (c *Client) settle(ctx context.Context, win *asyncpub.Window, p pendingPublish) (TaskInfo, error) {
	info := p.info
	ack, err := win.Wait(ctx, p.seq)
	if err != nil && ctx.Err() != nil {
		err := fmt.Errorf("framework: enqueue %s %s: acknowledgement not received (retry with the same ID): %w", info.Type, info.ID, ctx.Err())
		p.traced(info, err)
		return TaskInfo{}, err
	}
	if err != nil && natserr.Transient(err) {
		p.msg.Reply = ""
		var pa *jetstream.PubAck
		if pa, err = c.publish(ctx, p.msg); err == nil {
			ack = asyncpub.Ack{Stream: pa.Stream, Seq: pa.Sequence, Duplicate: pa.Duplicate}
		}
	}
	if err != nil {
		err = c.publishErr(info, err)
		p.traced(info, err)
		return TaskInfo{}, err
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Seq, ack.Duplicate
	if info.Stream == c.taskStream {
		info.Stream = c.taskStream // one shared copy, not one per acknowledgement
	}
	info.ID = enqueue.TaskID(info.ID, ack.Seq)
	c.enqueued(ctx, info)
	p.traced(info, nil)
	return info, nil
}

// build validates a task and returns its message and TaskInfo
// (enqueue.Build), with the work subjects of subjects (nil: none), spread
// over the task partitions of l.
func (c *Client) build(taskType string, payload any, opts []EnqueueOption, subjects enqueue.Subjects, l streams.Layout) (*nats.Msg, TaskInfo, error) {
	msg, b, err := enqueue.Build(&c.builder, taskType, payload, opts, subjects, l)
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
