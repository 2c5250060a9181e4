package framework

import (
	"fmt"
	"slices"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

// HandlerOption configures one task type at [Worker.Register]. An invalid
// option panics there, like any other registration error.
type HandlerOption func(*handlerConfig) error

type handlerConfig struct {
	concurrency int
	maxInFlight int
	capSet      bool // WithMaxInFlight: a cap shared by the task partitions
	maxAttempts int
	timeout     time.Duration
	backoff     BackoffPolicy
	ackWait     time.Duration
	heartbeat   time.Duration
	prefetch    int
	prefetchSet bool // WithPrefetch: a fixed pull size (internal/intake)
	priorities  []Priority
	middleware  []Middleware
	// values are plugins' metadata (WithHandlerValue), by key.
	values map[any][]any
	// stateTracking overrides the worker's state tracking for the type:
	// 0 inherits, 1 on, -1 off (WithTypeStateTracking, state.go).
	stateTracking int8
	// ordering makes the type ordered (WithOrdering, ordering.go).
	ordering *Ordering
	// strictPayload decodes typed payloads strictly (StrictPayload,
	// typed.go).
	strictPayload bool
	// versions are the payload versions the handler accepts, sorted;
	// nil accepts every version (AcceptVersions, versions.go).
	versions []int
}

// WithTypeConcurrency caps how many tasks of this type one worker runs at
// once. Default: the worker's concurrency.
func WithTypeConcurrency(n int) HandlerOption {
	return func(c *handlerConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: type concurrency %d, want ≥ 1", ErrInvalidOption, n)
		}
		c.concurrency = n
		return nil
	}
}

// WithMaxInFlight caps the tasks of this type in flight across every worker
// of the cluster, per priority (the consumer's MaxAckPending). On a
// deployment of several task partitions the cap is split between them
// (each partition's consumer gets its share, at least 1). Default 1000 per
// partition.
func WithMaxInFlight(n int) HandlerOption {
	return func(c *handlerConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: max in flight %d, want ≥ 1", ErrInvalidOption, n)
		}
		c.maxInFlight, c.capSet = n, true
		return nil
	}
}

// WithMaxAttempts sets how many times a task is delivered before it fails for
// good (the consumer's MaxDeliver). Default 25.
func WithMaxAttempts(n int) HandlerOption {
	return func(c *handlerConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: max attempts %d, want ≥ 1", ErrInvalidOption, n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithTimeout bounds one attempt: the handler's context is cancelled with
// cause [ErrHandlerTimeout] after d, and an attempt that returns an error
// after that counts as a failure. Default 30 minutes; d < 0 means none.
func WithTimeout(d time.Duration) HandlerOption {
	return func(c *handlerConfig) error {
		if d == 0 {
			return fmt.Errorf("%w: timeout 0 (use a negative value for no timeout)", ErrInvalidOption)
		}
		c.timeout = d
		return nil
	}
}

// WithBackoff sets the retry delays. Default: [BackoffPolicy] zero value.
func WithBackoff(p BackoffPolicy) HandlerOption {
	return func(c *handlerConfig) error {
		if err := p.validate(); err != nil {
			return err
		}
		c.backoff = p
		return nil
	}
}

// WithAckWait sets how long a task may go without an ack or heartbeat before
// the server redelivers it (the consumer's AckWait). Default 30 s. Running
// handlers send heartbeats, so tasks may run much longer than this.
func WithAckWait(d time.Duration) HandlerOption {
	return func(c *handlerConfig) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: ack wait %v, want ≥ 100ms", ErrInvalidOption, d)
		}
		c.ackWait = d
		return nil
	}
}

// WithHeartbeat sets the interval of the "in progress" signal sent while a
// handler runs or a fetched task waits for a slot. It must be shorter than
// the ack wait. Default: a third of the ack wait.
func WithHeartbeat(d time.Duration) HandlerOption {
	return func(c *handlerConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: heartbeat %v, want > 0", ErrInvalidOption, d)
		}
		c.heartbeat = d
		return nil
	}
}

// WithPrefetch fixes how many tasks per priority a worker pulls at once
// (its buffer ahead of free slots). Buffered tasks' ack wait is already
// running, so keep it small. Default: sized to the load — the type's
// concurrency (at most 256) to start with and whenever higher priorities are
// waiting, up to 500 while handlers are short (about 20 ms of buffered work
// per slot, at most half of [WithMaxInFlight]).
func WithPrefetch(n int) HandlerOption {
	return func(c *handlerConfig) error {
		if n < 1 || n > MaxPrefetch {
			return fmt.Errorf("%w: prefetch %d, want 1..%d", ErrInvalidOption, n, MaxPrefetch)
		}
		c.prefetch, c.prefetchSet = n, true
		return nil
	}
}

// WithServedPriorities limits the priorities this worker serves for the type.
// Default: all four.
func WithServedPriorities(ps ...Priority) HandlerOption {
	return func(c *handlerConfig) error {
		if len(ps) == 0 {
			return fmt.Errorf("%w: no priorities", ErrInvalidOption)
		}
		for _, p := range ps {
			if !p.Valid() {
				return fmt.Errorf("%w: priority %d", ErrInvalidOption, uint8(p))
			}
		}
		c.priorities = slices.Clone(ps)
		return nil
	}
}

// WithTypeMiddleware adds middleware around this type's handler, inside the
// worker's middleware ([WithMiddleware]). The first one runs outermost.
func WithTypeMiddleware(mw ...Middleware) HandlerOption {
	return func(c *handlerConfig) error {
		for _, m := range mw {
			if m == nil {
				return fmt.Errorf("%w: nil middleware", ErrInvalidOption)
			}
		}
		c.middleware = append(c.middleware, mw...)
		return nil
	}
}

func newHandlerConfig(workerConcurrency int, opts []HandlerOption) (handlerConfig, error) {
	c := handlerConfig{
		maxInFlight: DefaultMaxInFlight,
		maxAttempts: DefaultMaxAttempts,
		timeout:     DefaultTimeout,
		ackWait:     DefaultAckWait,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.concurrency == 0 {
		c.concurrency = workerConcurrency
	}
	if c.heartbeat == 0 {
		c.heartbeat = c.ackWait / 3
	}
	if c.heartbeat >= c.ackWait {
		return c, fmt.Errorf("%w: heartbeat %v must be shorter than ack wait %v", ErrInvalidOption, c.heartbeat, c.ackWait)
	}
	if c.prefetch == 0 {
		c.prefetch = min(c.concurrency, MaxPrefetch)
	}
	if len(c.priorities) == 0 {
		c.priorities = streams.Priorities[:]
	}
	if c.timeout < 0 {
		c.timeout = 0
	}
	return c, nil
}

// WithHandlerValue attaches value to the task type under key, for a
// [Plugin] to read at Start with [Worker.HandlerValues] (package breaker's
// WithDependencies is one). Values under one key accumulate in order. Use a
// key of an unexported type of your package, as with context values.
func WithHandlerValue(key, value any) HandlerOption {
	return func(c *handlerConfig) error {
		if c.values == nil {
			c.values = make(map[any][]any)
		}
		c.values[key] = append(c.values[key], value)
		return nil
	}
}

// InvalidHandlerOption returns an option that fails registration with err,
// wrapped in [ErrInvalidOption]: [Worker.Register] panics with it, as with
// any invalid option. Packages that validate their handler options up
// front return it.
func InvalidHandlerOption(err error) HandlerOption {
	return func(*handlerConfig) error { return fmt.Errorf("%w: %w", ErrInvalidOption, err) }
}

// checkHandlerValues reports a handler value whose key no installed plugin
// reads (Plugin.Keys).
func (w *Worker) checkHandlerValues() error {
	read := make(map[any]bool)
	for i := range w.ext {
		for _, k := range w.ext[i].Keys {
			read[k] = true
		}
	}
	for _, tt := range w.order {
		for k := range tt.cfg.values {
			if !read[k] {
				return fmt.Errorf("%w: task type %q has a handler option (%v) whose plugin is not installed on the worker", ErrInvalidOption, tt.name, k)
			}
		}
	}
	return nil
}

// HandlerValues returns the values attached to taskType under key with
// [WithHandlerValue], in order; nil for an unregistered type.
func (w *Worker) HandlerValues(taskType string, key any) []any {
	if tt := w.types[taskType]; tt != nil {
		return tt.cfg.values[key]
	}
	return nil
}

// AckWait returns the ack wait of taskType's consumers ([WithAckWait]): how
// long a delivery stays with a worker that stopped sending heartbeats. 0
// for an unregistered type. Plugins size leases on it.
func (w *Worker) AckWait(taskType string) time.Duration {
	if tt := w.types[taskType]; tt != nil {
		return tt.cfg.ackWait
	}
	return 0
}
