package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/effects"
	"github.com/jetflow-io/jetflow/streams"
)

// The effects ledger records, per task and effect key, that a side effect
// was applied, in the KV bucket [streams.Names.EffectsBucket]
// ("JETFLOW_EFFECTS"), so that a redelivered task skips it. See
// docs/effects.md for the exact guarantee.
//
// A record moves through three states:
//
//	(none) --Create--> started --fn ok--> done
//	                     |  ^
//	                fn err  |  next attempt (Update with revision)
//	                     v  |
//	                    failed
//
// Create and Update are compare-and-set operations on the key's revision,
// so two deliveries of one task never both claim an effect. A record still
// "started" when a delivery looks at it means an earlier delivery claimed
// the effect and never recorded how it ended: it crashed or lost its
// connection between claiming and recording, or it is still running. Whether
// the effect happened is then unknown; [EffectPolicy] decides.

// DefaultEffectsTTL is how long effect records are kept: longer than any
// redelivery, and as long as the default dead-letter retention, so that a
// replayed task still skips what it already did.
const DefaultEffectsTTL = streams.DefaultEffectsTTL

// MaxEffectValueBytes is the largest JSON value [OnceValue] records. A
// larger value is returned to the first caller but not recorded: a later
// delivery gets an error wrapping [ErrResultTooLarge].
const MaxEffectValueBytes = 64 << 10

// Sentinel errors of the effects ledger.
var (
	// ErrEffectUncertain reports an effect claimed by an earlier delivery
	// that never recorded its outcome; see [EffectUncertainError].
	ErrEffectUncertain = errors.New("framework: effect outcome unknown")
	// ErrInvalidEffectKey reports an effect key that is empty, too long or
	// not made of A-Z a-z 0-9 _ - = :.
	ErrInvalidEffectKey = errors.New("framework: invalid effect key")
)

// EffectUncertainError is returned, wrapped in a [PermanentError], by
// [Once] under [EffectFailUncertain] when an earlier delivery of the task
// claimed the effect and never recorded whether it was applied. The task is
// dead-lettered for a person to check the external system. It wraps
// [ErrEffectUncertain].
type EffectUncertainError struct {
	TaskID string
	Key    string
	// Attempt is the attempt that claimed the effect, and ClaimedAt when.
	Attempt   int
	ClaimedAt time.Time
}

// Error describes the failure; it implements the error interface.
func (e *EffectUncertainError) Error() string {
	return fmt.Sprintf("framework: effect %q of task %s was started by attempt %d at %s but its outcome was never recorded "+
		"(the worker crashed or lost its connection, or that attempt still runs); check the external system, "+
		"then replay the task with WithEffectPolicy(EffectRerun) or discard it",
		e.Key, e.TaskID, e.Attempt, e.ClaimedAt.UTC().Format(time.RFC3339))
}

// Unwrap returns [ErrEffectUncertain].
func (e *EffectUncertainError) Unwrap() error { return ErrEffectUncertain }

// EffectPolicy decides what [Once] does with an effect whose earlier claim
// has no recorded outcome.
type EffectPolicy int

const (
	// EffectFailUncertain fails the task permanently with an
	// *[EffectUncertainError], so that it is dead-lettered for review: the
	// effect happens at most once. The default.
	EffectFailUncertain EffectPolicy = iota
	// EffectRerun runs the effect again: the effect happens at least once.
	// Choose it when the effect is idempotent on its own side, for example
	// an API call carrying [IdempotencyKey].
	EffectRerun
)

// String returns "fail-uncertain" or "rerun".
func (p EffectPolicy) String() string {
	switch p {
	case EffectFailUncertain:
		return "fail-uncertain"
	case EffectRerun:
		return "rerun"
	}
	return fmt.Sprintf("EffectPolicy(%d)", int(p))
}

// OnceOption configures one [Once] or [OnceValue] call.
type OnceOption func(*onceConfig) error

type onceConfig struct {
	policy EffectPolicy
}

// WithEffectPolicy sets what happens when an earlier claim of the effect has
// no recorded outcome. Default [EffectFailUncertain].
func WithEffectPolicy(p EffectPolicy) OnceOption {
	return func(c *onceConfig) error {
		if p != EffectFailUncertain && p != EffectRerun {
			return fmt.Errorf("%w: effect policy %d", ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// effectsCache caches a worker's effects bucket.
type effectsCache struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

// WithEffectsTTL sets how long effect records are kept: the MaxAge of the
// effects bucket, applied when a worker creates or updates it
// ([EnsureBuckets]). Keep it longer than a task can be retried or sit in
// the dead-letter stream before a replay. Workers only. Default 30 days.
func WithEffectsTTL(d time.Duration) RetentionOption {
	return RetentionOption(func(o *options) error {
		if d < time.Minute {
			return fmt.Errorf("%w: effects TTL %v, want ≥ 1m", ErrInvalidOption, d)
		}
		o.effectsTTL = d
		return nil
	})
}

// Once runs fn unless an earlier delivery of the same task already applied
// the effect called key, and records that it was applied. Keys are scoped
// by task ID, so a task fired by a repeating schedule and delivered twice
// runs it once too.
//
// If fn returns an error, the claim is released: a later attempt runs fn
// again, so fn must only return an error when the effect did not happen (or
// may safely happen again). Once returns fn's error unchanged.
//
// When an earlier delivery claimed the effect and never recorded its
// outcome (crash, lost connection), the effect may or may not have
// happened; the policy decides ([WithEffectPolicy]): by default the task
// fails permanently with an *[EffectUncertainError].
//
// Once costs two KV round trips when fn runs (claim, record) and two when
// it is skipped. It must be called from a handler (else [ErrNoTask]); key is
// 1 to 128 bytes of A-Z a-z 0-9 _ - = : (else [ErrInvalidEffectKey]).
func Once(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...OnceOption) error {
	_, err := runOnce(ctx, key, func(ctx context.Context) (json.RawMessage, error) {
		return nil, fn(ctx)
	}, opts)
	return err
}

// OnceValue is [Once] for an effect that produces a value, for example the
// ID of a payment: the first successful run records the value (as JSON, at
// most [MaxEffectValueBytes]), and later deliveries return the recorded
// value without running fn.
func OnceValue[T any](ctx context.Context, key string, fn func(ctx context.Context) (T, error), opts ...OnceOption) (T, error) {
	var v T
	raw, err := runOnce(ctx, key, func(ctx context.Context) (json.RawMessage, error) {
		var err error
		v, err = fn(ctx)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, &effects.Unrecordable{Err: err}
		}
		return raw, nil
	}, opts)
	if err != nil || raw == nil {
		return v, err
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("framework: effect %s: decode recorded value: %w", key, err)
	}
	return out, nil
}

// runOnce is the ledger protocol. fn returns the effect's value as JSON. It
// returns nil value when fn ran (the caller keeps fn's own value), and the
// recorded value when the effect was applied earlier.
func runOnce(ctx context.Context, key string, fn func(ctx context.Context) (json.RawMessage, error), opts []OnceOption) (json.RawMessage, error) {
	t := TaskFromContext(ctx)
	if t == nil || t.worker == nil {
		return nil, ErrNoTask
	}
	if err := validateEffectKey(key); err != nil {
		return nil, err
	}
	var cfg onceConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	kv, err := t.worker.effectsKV(ctx)
	if err != nil {
		return nil, err
	}
	value, err := effects.Run(ctx, kv, effects.Call{
		TaskID: t.ID, Attempt: t.Attempt, Key: key, KVKey: effectKey(t.ID, key),
		Rerun: cfg.policy == EffectRerun, MaxValue: MaxEffectValueBytes,
		ErrorText: func(s string) string { return truncate(s, maxRecordError) },
		Log:       t.Logger().With(slog.String("effect", key)),
	}, fn)
	var u *effects.Uncertain
	switch {
	case errors.As(err, &u):
		return nil, Permanent(&EffectUncertainError{TaskID: t.ID, Key: key, Attempt: u.Attempt, ClaimedAt: u.ClaimedAt})
	case errors.Is(err, effects.ErrOmitted):
		return nil, Permanent(fmt.Errorf("%w: effect %s of task %s was applied but its value was not recorded (above %d bytes)",
			ErrResultTooLarge, key, t.ID, MaxEffectValueBytes))
	}
	return value, err
}

// effectsKV returns the worker's effects bucket, creating it on first use.
func (w *Worker) effectsKV(ctx context.Context) (jetstream.KeyValue, error) {
	e := &w.effects
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kv != nil {
		return e.kv, nil
	}
	bucket := w.names.EffectsBucket()
	kv, err := w.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if err := ensureBuckets(ctx, w.js, w.opts); err != nil {
			return nil, err
		}
		kv, err = w.js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("framework: effects bucket %s: %w", bucket, err)
	}
	e.kv = kv
	return kv, nil
}

// effectKey is the KV key of effect key of task id: "<id>.<key>", both
// escaped like state keys.
func effectKey(id, key string) string {
	return stateKey(id) + "." + stateKey(key)
}

func validateEffectKey(key string) error {
	if key == "" || len(key) > 128 {
		return fmt.Errorf("%w: %q must be 1 to 128 bytes", ErrInvalidEffectKey, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '=' || c == ':') {
			return fmt.Errorf("%w: %q contains %q (allowed: A-Z a-z 0-9 _ - = :)", ErrInvalidEffectKey, key, rune(c))
		}
	}
	return nil
}
