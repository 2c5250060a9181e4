package fairness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/stage"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// ErrNoKey is returned by [Enqueue] for a task without a valid key: a fair
// share is a key's. It wraps framework.ErrInvalidOption.
var ErrNoKey = fmt.Errorf("%w: fairness: a task enqueued with fair shares needs a key (framework.WithKey)", framework.ErrInvalidOption)

// Enqueue enqueues a task of taskType with payload for key, with fair
// shares: it waits in the fair stream
// ([github.com/jetflow-io/jetflow/streams.Names.FairStream]) until a worker
// with [Install] moves it to its work subject in key's turn. opts are those
// of framework.Client.Enqueue, and the message is the one Enqueue would
// have published, with key as its task key (framework.WithKey). The task
// must be immediate (no framework.In or At), without framework.Ordered or
// framework.Unique, and have an ID (a client with WithDedup(false) needs
// framework.WithID); the deployment must not have task partitions.
// Anything else, an invalid key included, gets an error wrapping
// framework.ErrInvalidOption, and nothing is stored. The returned TaskInfo
// locates the staged message (Stream, Sequence); its ID is the task's.
func Enqueue(ctx context.Context, c *framework.Client, taskType string, payload any, key string, opts ...framework.EnqueueOption) (framework.TaskInfo, error) {
	if err := taskmsg.ValidateKey(key); err != nil {
		return framework.TaskInfo{}, fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	opts = append(opts[:len(opts):len(opts)], framework.WithKey(key))
	sctx := stage.With(ctx, route(c.Names()))
	info, err := c.Enqueue(sctx, taskType, payload, opts...)
	if err != nil && natserr.Classify(err) == natserr.TopologyMissing {
		// The first fair enqueue of a deployment creates the fair stream
		// (no round trip to look for it on every enqueue).
		if err := ensureStream(ctx, c.JetStream(), c.Names()); err != nil {
			return framework.TaskInfo{}, err
		}
		return c.Enqueue(sctx, taskType, payload, opts...)
	}
	return info, err
}

// EnqueueArgs is [Enqueue] for typed arguments: the task type is the one
// args names (framework.TaskArgs).
func EnqueueArgs(ctx context.Context, c *framework.Client, args framework.TaskArgs, key string, opts ...framework.EnqueueOption) (framework.TaskInfo, error) {
	if args == nil {
		return framework.TaskInfo{}, fmt.Errorf("%w: fairness: nil task arguments", framework.ErrInvalidOption)
	}
	return Enqueue(ctx, c, args.TaskType(), args, key, opts...)
}

// route stages a task on its key's fair subject.
func route(names streams.Names) stage.Route {
	return func(taskType, priority, key string) (string, string, error) {
		p, err := streams.ParsePriority(priority)
		if err != nil {
			return "", "", fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
		}
		if err := taskmsg.ValidateKey(key); err != nil {
			return "", "", fmt.Errorf("%w: %w", ErrNoKey, err)
		}
		return names.FairStream(), names.FairSubject(p, taskType, key), nil
	}
}

// ensureStream creates the fair stream of names when it is missing, with
// the task stream's storage and replicas.
func ensureStream(ctx context.Context, js jetstream.JetStream, names streams.Names) error {
	_, err := js.Stream(ctx, names.FairStream())
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	cfg := streamConfig(names)
	if ts, err := js.Stream(ctx, names.TaskStream()); err == nil {
		cfg.Storage, cfg.Replicas = ts.CachedInfo().Config.Storage, ts.CachedInfo().Config.Replicas
	}
	_, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fairness: create stream %s: %w", cfg.Name, err)
	}
	return nil
}

// streamConfig is the fair stream of names: limits retention (the movers
// delete what they moved), direct gets (any replica answers the reads),
// no rollups (a staged message cannot drop the others), deduplication of
// a retried enqueue by its task ID.
func streamConfig(names streams.Names) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        names.FairStream(),
		Description: "jetflow fair shares: tasks waiting for their key's turn (package fairness)",
		Subjects:    []string{names.FairWildcard()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		AllowDirect: true,
		Duplicates:  2 * time.Minute,
	}
}

// Shares makes a task type's staged tasks ([Enqueue]) move to its work
// subject with fair shares between keys, on workers with [Install]: the
// worker's mover keeps about o.Wait's worth of the type's tasks (at least
// o.Depth) waiting in the task stream and fills it in turns over the keys
// that have tasks waiting.
// An invalid o makes Register panic.
func Shares(o Options) framework.HandlerOption {
	o, err := o.withDefaults()
	if err != nil {
		return framework.InvalidHandlerOption(err)
	}
	return framework.WithHandlerValue(typeKey{}, o)
}

// typeKey is the handler value key of [Shares].
type typeKey struct{}

func (typeKey) String() string { return "fairness.Shares (fairness.Install)" }

// Options configure the fair shares of a task type ([Shares]).
type Options struct {
	// Depth is the least number of tasks of the type the mover keeps
	// waiting in the task stream, over all priorities: it moves more once
	// fewer than half its depth wait. Default 64 (twice
	// framework.DefaultConcurrency); at most [MaxDepth].
	Depth int
	// Wait is the queueing time the depth adapts to: the mover measures
	// how many tasks of the type its worker finishes per second (smoothed
	// over its recent looks) and keeps that rate times Wait waiting, at
	// least Depth and at most [DepthCap] (or Depth if larger). Short tasks
	// so get deep refills, and slow tasks shallow ones: a key's task
	// staged behind a backlog of other keys starts after about Wait plus
	// one refill, whatever the handlers' duration. Default 20 ms; a
	// negative Wait keeps the depth at Depth.
	Wait time.Duration
	// Weights gives keys more than one task per turn: a key of weight w
	// gets w tasks per turn while it has them. A key not listed has weight
	// 1. Weights are 1 to [MaxWeight].
	Weights map[string]int
}

// Bounds of [Options].
const (
	MaxDepth  = 10000
	MaxWeight = 1000
)

// DefaultWait is the default of [Options.Wait].
const DefaultWait = 20 * time.Millisecond

// withDefaults validates o and fills its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Depth == 0 {
		o.Depth = 2 * framework.DefaultConcurrency
	}
	if o.Wait == 0 {
		o.Wait = DefaultWait
	}
	if o.Depth < 1 || o.Depth > MaxDepth {
		return o, fmt.Errorf("fairness: depth %d, want 1 to %d", o.Depth, MaxDepth)
	}
	for k, w := range o.Weights {
		if err := taskmsg.ValidateKey(k); err != nil {
			return o, fmt.Errorf("fairness: weight of %q: %w", k, err)
		}
		if w < 1 || w > MaxWeight {
			return o, fmt.Errorf("fairness: weight %d of %q, want 1 to %d", w, k, MaxWeight)
		}
	}
	o.Weights = maps.Clone(o.Weights)
	return o, nil
}
