package framework

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Ordered tasks: see docs/ordering.md and streams/ordering.go.

// Ordered gives the task an ordering key, for example an order ID: tasks of
// the same type and key run one at a time, in the order they were enqueued,
// across every worker of the cluster; tasks of other keys run in parallel.
// The type's worker must register it with [WithOrdering]: no other
// consumer reads ordered tasks. The producer cannot know the workers, so an
// ordered enqueue of a type whose workers lack WithOrdering succeeds and the
// task waits; those workers find such tasks at Start and every
// [Timings].StrandedCheck interval, log them at Warn and report them in
// [Worker.Stranded] (and package health's report). The key is 1 to
// [MaxOrderingKeyLen] bytes of printable ASCII (space to '~'); it is hashed
// to choose the task's slot subject and carried in [HeaderOrderingKey].
//
// Ordered tasks cannot have a priority other than normal, nor a delay
// ([In], [At]): both would reorder a key. Enqueue refuses them with an error
// wrapping [ErrOrdering] and [ErrInvalidOption].
func Ordered(key string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if err := validateOrderingKey(key); err != nil {
			return err
		}
		c.OrderingKey = key
		return nil
	}
}

func validateOrderingKey(key string) error {
	if err := ordering.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}

// Ordering configures an ordered task type ([WithOrdering]).
type Ordering struct {
	// Partitions is how many keys of the type can run at once across the
	// cluster: keys are spread over partitions by hash, and each partition
	// runs one task at a time. Unused with Lanes. A divisor of 256, the slot count of an
	// ordered type (1, 2, 4, … 256). Default [DefaultPartitions]. Every worker of the type must use
	// the same count; changing it needs a drained type (docs/ordering.md).
	Partitions int
	// BlockOnDeadLetter keeps a key blocked after one of its tasks failed
	// for good, instead of dead-lettering the task and moving on: the task
	// stays at the head of its key (held with heartbeats; the server
	// never gives up on it) until [github.com/jetflow-io/jetflow/inspect.Operator.ResolveBlocked] retries or
	// skips it. With partitions every task of the partition waits
	// meanwhile; with Lanes only the key's. Default false: the key moves
	// on.
	BlockOnDeadLetter bool
	// Lanes, when set, reads the type's keys in that many lanes instead of
	// partitions (a power of two up to 256; 16 suits most): a lane delivers
	// many keys' tasks at once to one worker, pinned to it until it stops
	// pulling, which runs each key's tasks one at a time in enqueue order
	// while the lane's other keys run. Ordered throughput then approaches
	// unordered (a partition runs one task at a time whatever its keys).
	// A lane moves to another worker within seconds of its owner's
	// failure, and starts once its former owner's tasks have come back or
	// finished (their ack wait at most). Every worker of the type must use
	// the same count; switching a type between partitions and lanes, or
	// changing the count, needs a drained type (docs/ordering.md).
	// Default 0: partitions.
	Lanes int
	// PerKey, with Lanes, is how many tasks of a key run at once across
	// the cluster. Default 1: one at a time, in enqueue order, a retry
	// holding the key's later tasks. Above 1 the key's tasks start in
	// enqueue order, up to PerKey at once, and a retry holds nothing back:
	// a per-key concurrency cap (each lane has one owner, so the cap holds
	// across the fleet) without a server write per task.
	PerKey int
	// Limit, with Lanes, returns the cap of a key at run time, in place of
	// PerKey (values below 1 mean PerKey); it is asked each time a task of
	// the key could start, so a changed limit takes effect at once on
	// tasks not yet started. It must be fast and must not block. With
	// Limit set, a key's tasks are capped, not strictly ordered, as with
	// PerKey above 1.
	Limit func(key string) int
}

// WithOrdering makes the worker consume the ordered tasks of this type
// ([Ordered]): one consumer per partition with one task in flight
// cluster-wide, so that the tasks of a key run one at a time in enqueue
// order. Retries (with their backoff) and holds (open breaker, rate limit)
// keep the key's later tasks waiting. After a task of a key fails for good
// (dead letter) the key moves on to its next task, unless
// [Ordering].BlockOnDeadLetter keeps it blocked. Tasks of the type
// enqueued without a key still use the type's ordinary consumers.
func WithOrdering(o Ordering) HandlerOption {
	return func(c *handlerConfig) error {
		if o.Lanes != 0 {
			if err := topology.ValidatePartitions(o.Lanes); err != nil {
				return fmt.Errorf("%w: lanes: %w", ErrInvalidOption, err)
			}
			if o.Partitions != 0 {
				return fmt.Errorf("%w: Ordering.Lanes does not take Partitions", ErrInvalidOption)
			}
			if o.BlockOnDeadLetter && (o.PerKey > 1 || o.Limit != nil) {
				return fmt.Errorf("%w: Ordering.BlockOnDeadLetter needs one task of a key at a time (no PerKey above 1, no Limit)", ErrInvalidOption)
			}
			if o.PerKey < 0 {
				return fmt.Errorf("%w: Ordering.PerKey %d: want 1 or more (0: 1)", ErrInvalidOption, o.PerKey)
			}
		} else if o.PerKey != 0 || o.Limit != nil {
			return fmt.Errorf("%w: Ordering.PerKey and Limit need Lanes", ErrInvalidOption)
		} else if o.Partitions == 0 {
			o.Partitions = DefaultPartitions
		}
		if o.Lanes == 0 {
			if err := topology.ValidatePartitions(o.Partitions); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidOption, err)
			}
		}
		c.ordering = &o
		return nil
	}
}

func (w *Worker) installOrdering() {
	w.addExtension(extension{Plugin: Plugin{Name: "ordering", Prepare: prepareBlocking, Hold: func(_ *Task, err error) (time.Duration, bool) { return ordering.Held(err) }}, consumers: orderedConsumers})
}

// orderedConsumers ensures the consumers of the ordered types in the task
// partitions parts: their ordered partitions' or lanes' (internal/intake,
// ordered.go).
func orderedConsumers(ctx context.Context, w *Worker, parts []streams.Names) ([]consumerSub, error) {
	var subs []consumerSub
	for _, tt := range w.order {
		o := tt.cfg.ordering
		if o == nil {
			continue
		}
		spec := intake.Ordered{TaskType: tt.name, Partitions: o.Partitions, Lanes: o.Lanes,
			MaxDeliver: tt.cfg.maxAttempts, AckWait: tt.cfg.ackWait}
		if o.BlockOnDeadLetter {
			spec.MaxDeliver = -1 // the worker counts attempts and blocks instead
		}
		more, err := w.in.EnsureOrdered(ctx, &tt.in, spec, parts)
		if err != nil {
			return nil, err
		}
		subs = append(subs, more...)
	}
	return subs, nil
}
