package enqueue

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/internal/natserr"
)

// Batch publishes the tasks of a batch (framework's EnqueueMany and
// EnqueueSeq) asynchronously through an [asyncpub.Window] and reports each
// task's result in order. S is the caller's specification of a task
// (framework.TaskSpec) and T its description of a task
// (framework.TaskInfo); what only the caller knows comes in as functions.
// Its fields are set once; [Batch.Run] is then safe for concurrent use.
type Batch[S, T any] struct {
	// Conn is the connection the window publishes on.
	Conn *nats.Conn
	// Window is the most tasks awaiting their acknowledgement at once
	// (framework.WithMaxPending).
	Window int
	// AckTimeout bounds the wait for one acknowledgement; a task not
	// acknowledged by then is published again with Send.
	AckTimeout time.Duration
	// Stream is the name the acknowledgements are expected to carry (the
	// task stream).
	Stream string
	// Trace calls the enqueue tracers for a task about to be published and
	// returns the function that reports its result to them.
	Trace func(ctx context.Context, msg *nats.Msg, info T) func(T, error)
	// Send publishes msg and waits for its acknowledgement, retrying while
	// the stream cannot answer: the retry of a publish the stream could not
	// take or whose acknowledgement did not come.
	Send func(ctx context.Context, msg *nats.Msg) (asyncpub.Ack, error)
	// Failed describes the failed publish of the task of info.
	Failed func(info T, err error) error
	// Unacked describes the task of info whose acknowledgement was not
	// received because ctx ended with err.
	Unacked func(info T, err error) error
	// Stored completes info with its acknowledgement, records it (state
	// record, hooks) and returns it.
	Stored func(ctx context.Context, info T, ack asyncpub.Ack) T
}

// pending is a task of a batch on its way to its report: an asynchronous
// publish awaiting its acknowledgement (the task's index, its info as
// built, its message and sequence in the window), or a task that failed
// before it was sent (err).
type pending[T any] struct {
	index  int
	info   T
	msg    *nats.Msg
	seq    uint64
	traced func(T, error) // reports the result to the enqueue tracers
	err    error
}

// Run publishes the tasks of seq and calls report once per task, in
// order, from one goroutine at a time. n is the number of tasks when
// known, -1 otherwise. prepare builds the message and info of a task, or
// returns why it cannot be published; it runs on the caller's goroutine,
// and only while ctx has not ended.
func (b *Batch[S, T]) Run(ctx context.Context, seq iter.Seq2[int, S], n int, prepare func(S) (*nats.Msg, T, error), report func(int, T, error)) {
	// The publishes go through a window of their own: one subscription
	// for the call, acknowledgements matched by sequence, no future or
	// timer per message. One goroutine settles them in publish order as
	// they arrive; a settled message is garbage at once. The window and
	// the settler's queue are as deep as Window (a smaller batch needs no
	// more than itself). Failures before the publish go through the same
	// queue, so that report keeps the tasks' order.
	depth := b.Window
	if n >= 0 && n < depth {
		depth = n
	}
	win, openErr := asyncpub.Open(b.Conn, depth, b.AckTimeout, b.Stream)
	if openErr == nil {
		defer win.Close()
	}
	queue := make(chan pending[T], depth)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		var zero T
		for p := range queue {
			if p.err != nil {
				report(p.index, zero, p.err)
				continue
			}
			info, err := b.settle(ctx, win, p)
			report(p.index, info, err)
		}
	}()
	for i, spec := range seq {
		if err := ctx.Err(); err != nil {
			queue <- pending[T]{index: i, err: err}
			continue
		}
		msg, info, err := prepare(spec)
		if err != nil {
			queue <- pending[T]{index: i, err: err}
			continue
		}
		traced := b.Trace(ctx, msg, info)
		err = openErr
		var sent uint64
		if err == nil {
			sent, err = win.Publish(ctx, msg)
		}
		if err != nil {
			err = b.Failed(info, err)
			traced(info, err)
			queue <- pending[T]{index: i, err: err}
			continue
		}
		queue <- pending[T]{index: i, info: info, msg: msg, seq: sent, traced: traced}
	}
	close(queue)
	<-settled
}

// settle waits for the acknowledgement of p in win and returns its
// completed info, or the error that kept it from being stored. A publish
// the stream could not take (for example during a leader election) or
// whose acknowledgement did not come is retried with the same message and
// task ID, which the stream drops if the first one was stored.
func (b *Batch[S, T]) settle(ctx context.Context, win *asyncpub.Window, p pending[T]) (T, error) {
	var zero T
	ack, err := win.Wait(ctx, p.seq)
	if err != nil && ctx.Err() != nil {
		err := b.Unacked(p.info, ctx.Err())
		p.traced(p.info, err)
		return zero, err
	}
	if err != nil && natserr.Transient(err) {
		p.msg.Reply = ""
		ack, err = b.Send(ctx, p.msg)
	}
	if err != nil {
		err = b.Failed(p.info, err)
		p.traced(p.info, err)
		return zero, err
	}
	info := b.Stored(ctx, p.info, ack)
	p.traced(info, nil)
	return info, nil
}

// Many runs the tasks of specs and returns one info per task, in order,
// and the errors of the tasks that failed by their index (nil when none
// did); a failed task's info is zero.
func (b *Batch[S, T]) Many(ctx context.Context, specs []S, prepare func(S) (*nats.Msg, T, error)) ([]T, map[int]error) {
	infos := make([]T, len(specs))
	var errs map[int]error
	b.Run(ctx, slices.All(specs), len(specs), prepare, func(i int, info T, err error) {
		if err != nil {
			if errs == nil {
				errs = make(map[int]error)
			}
			errs[i] = err
			return
		}
		infos[i] = info
	})
	return infos, errs
}

// Seq runs the tasks of seq, numbered from 0, reports each to report (nil:
// none) like [Batch.Run] and returns the number of tasks that failed.
func (b *Batch[S, T]) Seq(ctx context.Context, seq iter.Seq[S], prepare func(S) (*nats.Msg, T, error), report func(int, T, error)) (failed int) {
	indexed := func(yield func(int, S) bool) {
		i := 0
		for s := range seq {
			if !yield(i, s) {
				return
			}
			i++
		}
	}
	b.Run(ctx, indexed, -1, prepare, func(i int, info T, err error) {
		if err != nil {
			failed++
		}
		if report != nil {
			report(i, info, err)
		}
	})
	return failed
}
