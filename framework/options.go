package framework

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/internal/enqueue"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Each constructor takes its own option type, as nats.go's jetstream
// package does: [NewClient] takes [ClientOption], [NewWorker] takes
// [WorkerOption], [NewInspector] takes [InspectorOption] and
// [EnsureBuckets] takes [BucketsOption]. An option
// that applies to several constructors ([WithPrefix], [WithLogger], [WithHooks],
// [WithCodec], [WithStateTracking], [WithStateTTL], [WithEffectsTTL]) returns
// an unexported type that implements each of their interfaces; one passed to
// a constructor it does not apply to is a compile error. Options are read once, by the constructor: the object
// built never changes them afterwards.

// ClientOption configures [NewClient].
type ClientOption interface{ applyClient(*options) error }

// WorkerOption configures [NewWorker].
type WorkerOption interface{ applyWorker(*options) error }

// InspectorOption configures [NewInspector].
type InspectorOption interface{ applyInspector(*options) error }

// BucketsOption configures [EnsureBuckets].
type BucketsOption interface{ applyBuckets(*options) error }

// prefixOption is returned by [WithPrefix]; it applies to [NewClient], [NewWorker], [NewInspector] and [EnsureBuckets].
type prefixOption func(*options) error

func (f prefixOption) applyClient(o *options) error    { return f(o) }
func (f prefixOption) applyWorker(o *options) error    { return f(o) }
func (f prefixOption) applyInspector(o *options) error { return f(o) }
func (f prefixOption) applyBuckets(o *options) error   { return f(o) }

// loggerOption is returned by [WithLogger]; it applies to [NewClient], [NewWorker], [NewInspector].
type loggerOption func(*options) error

func (f loggerOption) applyClient(o *options) error    { return f(o) }
func (f loggerOption) applyWorker(o *options) error    { return f(o) }
func (f loggerOption) applyInspector(o *options) error { return f(o) }

// hooksOption is returned by [WithHooks]; it applies to [NewClient] and [NewWorker].
type hooksOption func(*options) error

func (f hooksOption) applyClient(o *options) error { return f(o) }
func (f hooksOption) applyWorker(o *options) error { return f(o) }

// codecOption is returned by [WithCodec]; it applies to [NewClient], [NewWorker] and [NewInspector].
type codecOption func(*options) error

func (f codecOption) applyClient(o *options) error    { return f(o) }
func (f codecOption) applyWorker(o *options) error    { return f(o) }
func (f codecOption) applyInspector(o *options) error { return f(o) }

// stateTrackingOption is returned by [WithStateTracking]; it applies to [NewClient] and [NewWorker].
type stateTrackingOption func(*options) error

func (f stateTrackingOption) applyClient(o *options) error { return f(o) }
func (f stateTrackingOption) applyWorker(o *options) error { return f(o) }

// retentionOption is returned by [WithStateTTL] and [WithEffectsTTL]; it applies to [NewWorker] and [EnsureBuckets].
type retentionOption func(*options) error

func (f retentionOption) applyWorker(o *options) error  { return f(o) }
func (f retentionOption) applyBuckets(o *options) error { return f(o) }

// clientOnly and workerOnly are the options of one constructor.
type clientOnly func(*options) error

func (f clientOnly) applyClient(o *options) error { return f(o) }

type workerOnly func(*options) error

func (f workerOnly) applyWorker(o *options) error { return f(o) }

type options struct {
	names             streams.Names
	partitions        *streams.Layout // WithPartitions, WithPartitionLayout (partitions.go)
	logger            *slog.Logger
	hooks             []Hooks // WithHooks, in the order given
	codec             Codec
	concurrency       int
	weighted          bool // WithWeights
	weights           [len(streams.Priorities)]int
	shutdownTimeout   time.Duration
	stallLimit        time.Duration
	middleware        []Middleware
	maxPending        int
	noDedup           bool
	deadLetters       deadLetterOptions // WithDeadLetters and related (dlq.go)
	stateEnabled      bool              // WithStateTracking
	stateTTL          time.Duration     // WithStateTTL; 0 means DefaultStateTTL
	stateRunningAfter time.Duration     // Timings.StateRunningAfter
	effectsTTL        time.Duration     // WithEffectsTTL; 0 means DefaultEffectsTTL
	noDelayMover      bool              // WithDelayMover(false) (delays.go)
	strandedCheck     time.Duration     // Timings.StrandedCheck (stranded.go); 0 is off
	fleet             fleetOptions      // WithWorkerID, WithVersion, Timings.RegistryInterval (fleet.go)
	versionGrace      time.Duration     // Timings.VersionGrace (versions.go)
}

// newOptions applies opts, in order, over the defaults with apply, the
// method of the constructor's option interface.
func newOptions[O comparable](opts []O, apply func(O, *options) error) (*options, error) {
	o := &options{
		names:             streams.MustNames(""),
		logger:            slog.New(slog.DiscardHandler),
		codec:             JSONCodec(),
		concurrency:       DefaultConcurrency,
		shutdownTimeout:   DefaultShutdownTimeout,
		stallLimit:        DefaultStallLimit,
		weights:           [len(streams.Priorities)]int{8, 4, 2, 1},
		versionGrace:      DefaultVersionGrace,
		maxPending:        DefaultMaxPending,
		stateRunningAfter: DefaultStateRunningAfter,
		strandedCheck:     DefaultStrandedCheck,
	}
	var zero O
	for _, opt := range opts {
		if opt == zero {
			continue
		}
		if err := apply(opt, o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// WithPrefix sets the subject prefix; it must match the [streams.Config.Prefix]
// the topology was ensured with. Default "jetflow".
// It applies to [NewClient], [NewWorker], [NewInspector] and [EnsureBuckets].
func WithPrefix(prefix string) prefixOption {
	return prefixOption(func(o *options) error {
		n, err := streams.NewNames(prefix)
		if err != nil {
			return fmt.Errorf("%w: prefix: %w", ErrInvalidOption, err)
		}
		o.names = n
		return nil
	})
}

// WithLogger sets the logger. Default: discard. Payloads are never logged.
// It applies to [NewClient], [NewWorker] and [NewInspector].
func WithLogger(l *slog.Logger) loggerOption {
	return loggerOption(func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	})
}

// WithHooks adds observability callbacks. It may be given several times:
// every set given runs, in the order given, so that hooks of your own sit
// beside an adapter's (contrib/prometheus, contrib/otel) without taking
// their place. On a worker, the sets added with [Worker.AddHooks] run
// before the WithHooks ones. Default none.
// It applies to [NewClient] and [NewWorker].
func WithHooks(h Hooks) hooksOption {
	return hooksOption(func(o *options) error { o.hooks = append(o.hooks, h); return nil })
}

// WithCodec sets the payload codec. Default [JSONCodec]. Client and workers
// must agree: a task encoded with another codec fails to decode and is
// dead-lettered.
// It applies to [NewClient], [NewWorker] and [NewInspector].
func WithCodec(c Codec) codecOption {
	return codecOption(func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil codec", ErrInvalidOption)
		}
		if n := c.Name(); n == "" || n == taskmsg.EncodingRaw {
			return fmt.Errorf("%w: codec name %q is empty or reserved", ErrInvalidOption, n)
		}
		o.codec = c
		return nil
	})
}

// WithConcurrency caps the tasks a worker runs at once, across all types.
// Workers only. Default 32.
func WithConcurrency(n int) WorkerOption {
	return workerOnly(func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d, want ≥ 1", ErrInvalidOption, n)
		}
		o.concurrency = n
		return nil
	})
}

// WithWeights makes the worker share its free slots among the priorities by
// weight: when tasks of several priorities wait, it draws a priority with
// probability proportional to its weight, so no priority starves. Without
// it (the default) the highest-priority waiting task always starts first,
// and under a sustained higher-priority load lower priorities wait. The
// weights of critical, high, normal and low are each at least 1 (8, 4, 2, 1
// is a good start). Workers only.
func WithWeights(critical, high, normal, low int) WorkerOption {
	return workerOnly(func(o *options) error {
		for _, w := range []int{critical, high, normal, low} {
			if w < 1 {
				return fmt.Errorf("%w: weight %d, want ≥ 1", ErrInvalidOption, w)
			}
		}
		o.weights = [len(streams.Priorities)]int{critical, high, normal, low}
		o.weighted = true
		return nil
	})
}

// WithShutdownTimeout bounds how long [Worker.Run] waits for in-flight tasks
// after its context ends. Workers only. Default 30 s.
func WithShutdownTimeout(d time.Duration) WorkerOption {
	return workerOnly(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: shutdown timeout %v, want > 0", ErrInvalidOption, d)
		}
		o.shutdownTimeout = d
		return nil
	})
}

// WithMiddleware adds middleware around every handler of a worker, outside
// per-type middleware. The first one runs outermost. Workers only.
func WithMiddleware(mw ...Middleware) WorkerOption {
	return workerOnly(func(o *options) error {
		for _, m := range mw {
			if m == nil {
				return fmt.Errorf("%w: nil middleware", ErrInvalidOption)
			}
		}
		o.middleware = append(o.middleware, mw...)
		return nil
	})
}

// WithMaxPending bounds the unacknowledged publishes of [Client.EnqueueMany]
// and [Client.EnqueueSeq]: each call publishes through a window of this many
// messages, on a reply subscription of its own (under the connection's inbox
// prefix), and waits while the window is full. Clients only. Default 4096.
func WithMaxPending(n int) ClientOption {
	return clientOnly(func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max pending %d, want ≥ 1", ErrInvalidOption, n)
		}
		o.maxPending = n
		return nil
	})
}

// WithDedup(false) publishes immediate tasks that have no caller-supplied ID
// ([WithID]) without a Nats-Msg-Id header, so the server skips its duplicate
// check. Their ID becomes "seq-<stream sequence>" and is known once the
// server acknowledged the task. This is the fastest mode (see
// docs/benchmarks.md), at a price: an enqueue retried after a lost
// acknowledgement (a leader election, a timeout) may store the task twice.
// Delayed tasks and tasks with [WithID] keep their dedup header. Clients
// only. Default true.
func WithDedup(on bool) ClientOption {
	return clientOnly(func(o *options) error { o.noDedup = !on; return nil })
}

// EnqueueOption configures one enqueue.
type EnqueueOption func(*enqueueConfig) error

// enqueueConfig is what an EnqueueOption sets (internal/enqueue, which
// builds the task).
type enqueueConfig = enqueue.Config

// WithPriority sets the task's priority. Default [PriorityNormal].
func WithPriority(p Priority) EnqueueOption {
	return func(c *enqueueConfig) error {
		if !p.Valid() {
			return fmt.Errorf("%w: priority %d", ErrInvalidOption, uint8(p))
		}
		c.Priority = p
		return nil
	}
}

// WithID sets the task ID. Enqueueing the same ID again within the stream's
// duplicate window (default 2 minutes) stores nothing and reports
// TaskInfo.Duplicate. IDs are subject tokens: A-Z a-z 0-9 _ - = :, at most
// 128 bytes, not starting with "cron-" (the IDs of repeating schedules'
// ticks). Default: a generated unique ID.
//
// What an ID is trusted with: a task runs under its ID, which keys its
// state record, its effects ledger (package effects, per task type) and its
// workflow step. Workers accept an ID from a task only when the server
// deduplicated the task by it (its Nats-Msg-Id) or a schedule fired it; so
// whoever may enqueue a type may still choose any ID of that type, for
// example one it expects another producer to use: within the duplicate
// window that producer's task is then a duplicate, after it the chosen ID's
// recorded effects apply to the newcomer. Use IDs others cannot guess
// (generated, or derived from a secret) where producers do not trust each
// other, or give them task types of their own.
func WithID(id string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if err := streams.ValidateID(id); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		if taskmsg.ReservedID(id) {
			return fmt.Errorf("%w: task ID %q starts with %q, reserved for the ticks of repeating schedules", ErrInvalidOption, id, taskmsg.CronIDPrefix)
		}
		c.ID = id
		return nil
	}
}

// In delays the task by d, using the server's message schedules: the task is
// published to the delay stream, and a worker's delay mover ([WithDelayMover])
// stores its schedule, which fires it when due. d ≤ 0 means now.
func In(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) error { c.Delay = d; c.At = time.Time{}; return nil }
}

// At schedules the task for t, using the server's message schedules (see
// [In]). A time not in the future means now. A due time after
// 2262-04-11, which a schedule cannot hold (the server keeps it in Unix
// nanoseconds), is an [ErrInvalidOption] at enqueue, for At and [In] alike.
func At(t time.Time) EnqueueOption {
	return func(c *enqueueConfig) error { c.At = t; c.Delay = 0; return nil }
}

// WithHeader adds a custom header to the task message, readable by handlers
// with [Task.Header]. Keys starting with "Nats-" or "Jetflow-" are reserved.
func WithHeader(key, value string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if taskmsg.ReservedHeader(key) {
			return fmt.Errorf("%w: header %q is empty or reserved (Nats-*, Jetflow-*)", ErrInvalidOption, key)
		}
		c.SetHeader(key, value)
		return nil
	}
}
