package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	ledger "github.com/jetflow-io/jetflow/internal/effects"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// MaxValueBytes is the largest JSON value [OnceValue] records. A
// larger value is returned to the first caller but not recorded: a later
// delivery gets an error wrapping [framework.ErrResultTooLarge].
const MaxValueBytes = 64 << 10

// Sentinel errors of the effects ledger.
var (
	// ErrUncertain reports an effect claimed by an earlier delivery
	// that never recorded its outcome; see [UncertainError].
	ErrUncertain = errors.New("effects: effect outcome unknown")
	// ErrInvalidKey reports an effect key that is empty, too long or
	// not made of A-Z a-z 0-9 _ - = :.
	ErrInvalidKey = errors.New("effects: invalid effect key")
)

// UncertainError is returned, wrapped in a [framework.PermanentError], by
// [Once] under [FailUncertain] when an earlier delivery of the task
// claimed the effect and never recorded whether it was applied. The task is
// dead-lettered for a person to check the external system. It wraps
// [ErrUncertain].
type UncertainError struct {
	TaskID string
	Key    string
	// Attempt is the attempt that claimed the effect, and ClaimedAt when.
	Attempt   int
	ClaimedAt time.Time
}

// Error describes the failure; it implements the error interface.
func (e *UncertainError) Error() string {
	return fmt.Sprintf("effects: effect %q of task %s was started by attempt %d at %s but its outcome was never recorded "+
		"(the worker crashed or lost its connection, or that attempt still runs); check the external system, "+
		"then replay the task with effects.WithPolicy(effects.Rerun) or discard it",
		e.Key, e.TaskID, e.Attempt, e.ClaimedAt.UTC().Format(time.RFC3339))
}

// Unwrap returns [ErrUncertain].
func (e *UncertainError) Unwrap() error { return ErrUncertain }

// Policy decides what [Once] does with an effect whose earlier claim
// has no recorded outcome.
type Policy int

const (
	// FailUncertain fails the task permanently with an
	// *[UncertainError], so that it is dead-lettered for review: the
	// effect happens at most once. The default.
	FailUncertain Policy = iota
	// Rerun runs the effect again: the effect happens at least once.
	// Choose it when the effect is idempotent on its own side, for example
	// an API call carrying [framework.IdempotencyKey].
	Rerun
)

// String returns "fail-uncertain" or "rerun".
func (p Policy) String() string {
	switch p {
	case FailUncertain:
		return "fail-uncertain"
	case Rerun:
		return "rerun"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Option configures one [Once] or [OnceValue] call.
type Option func(*config) error

type config struct {
	policy Policy
}

// WithPolicy sets what happens when an earlier claim of the effect has
// no recorded outcome. Default [FailUncertain].
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if p != FailUncertain && p != Rerun {
			return fmt.Errorf("%w: effect policy %d", framework.ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// Once runs fn unless an earlier delivery of the same task already applied
// the effect called key, and records that it was applied. Keys are scoped
// by task type and task ID, so a task fired by a repeating schedule and
// delivered twice runs it once too, and a task of another type with the
// same ID neither sees nor claims it.
//
// If fn returns an error, the claim is released: a later attempt runs fn
// again, so fn must only return an error when the effect did not happen (or
// may safely happen again). Once returns fn's error unchanged.
//
// When an earlier delivery claimed the effect and never recorded its
// outcome (crash, lost connection), the effect may or may not have
// happened; the policy decides ([WithPolicy]): by default the task
// fails permanently with an *[UncertainError].
//
// Once costs two KV round trips when fn runs (claim, record) and two when
// it is skipped. It must be called from a handler (else [framework.ErrNoTask]); key is
// 1 to 128 bytes of A-Z a-z 0-9 _ - = : (else [ErrInvalidKey]).
func Once(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	_, err := runOnce(ctx, key, func(ctx context.Context) (json.RawMessage, error) {
		return nil, fn(ctx)
	}, opts)
	return err
}

// OnceValue is [Once] for an effect that produces a value, for example the
// ID of a payment: the first successful run records the value (as JSON, at
// most [MaxValueBytes]), and later deliveries return the recorded
// value without running fn.
func OnceValue[T any](ctx context.Context, key string, fn func(ctx context.Context) (T, error), opts ...Option) (T, error) {
	var v T
	raw, err := runOnce(ctx, key, func(ctx context.Context) (json.RawMessage, error) {
		var err error
		v, err = fn(ctx)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, &ledger.Unrecordable{Err: err}
		}
		return raw, nil
	}, opts)
	if err != nil || raw == nil {
		return v, err
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("effects: effect %s: decode recorded value: %w", key, err)
	}
	return out, nil
}

// runOnce is the ledger protocol. fn returns the effect's value as JSON. It
// returns nil value when fn ran (the caller keeps fn's own value), and the
// recorded value when the effect was applied earlier.
func runOnce(ctx context.Context, key string, fn func(ctx context.Context) (json.RawMessage, error), opts []Option) (json.RawMessage, error) {
	t, w := framework.TaskFromContext(ctx), framework.TaskFromContext(ctx).Worker()
	if t == nil || w == nil {
		return nil, framework.ErrNoTask
	}
	if err := validateKey(key); err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	kv, err := w.EffectsBucket(ctx)
	if err != nil {
		return nil, err
	}
	value, err := ledger.Run(ctx, kv, ledger.Call{
		TaskID: t.ID, Attempt: t.Attempt, Key: key, KVKey: effectKey(t.Type, t.ID, key),
		Rerun: cfg.policy == Rerun, MaxValue: MaxValueBytes,
		ErrorText: func(s string) string { return truncate(s, maxErrorText) },
		Log:       t.Logger().With(slog.String("effect", key)),
	}, fn)
	var u *ledger.Uncertain
	switch {
	case errors.As(err, &u):
		return nil, framework.Permanent(&UncertainError{TaskID: t.ID, Key: key, Attempt: u.Attempt, ClaimedAt: u.ClaimedAt})
	case errors.Is(err, ledger.ErrOmitted):
		return nil, framework.Permanent(fmt.Errorf("%w: effect %s of task %s was applied but its value was not recorded (above %d bytes)",
			framework.ErrResultTooLarge, key, t.ID, MaxValueBytes))
	}
	return value, err
}

// maxErrorText bounds the error text of a failed claim, like the error
// of a task state record.
const maxErrorText = 1024

// truncate cuts s to at most n bytes without splitting a UTF-8 character.
func truncate(s string, n int) string { return textcut.Cut(s, n) }

// effectKey is the KV key of effect key of task id of type taskType:
// "<type>.<id>.<key>", each escaped like state keys ("payments.charge" is
// "payments=2Echarge"), so that one token names the type and a permission
// "$KV.<bucket>.<escaped type>.>" covers one type's effects.
func effectKey(taskType, id, key string) string {
	return staterec.Key(taskType) + "." + staterec.Key(id) + "." + staterec.Key(key)
}

func validateKey(key string) error {
	if key == "" || len(key) > 128 {
		return fmt.Errorf("%w: %q must be 1 to 128 bytes", ErrInvalidKey, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '=' || c == ':') {
			return fmt.Errorf("%w: %q contains %q (allowed: A-Z a-z 0-9 _ - = :)", ErrInvalidKey, key, rune(c))
		}
	}
	return nil
}
