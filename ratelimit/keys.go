package ratelimit

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	engine "github.com/jetflow-io/jetflow/internal/ratelimit"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Limits per task key (issue 34, item 3): a type declares one limit that
// applies to each key ([framework.WithKey]) on its own, "10 per second per
// customer". Each key used is a limiter of its own on its own record of the
// limits bucket, created when a task of the key first asks and dropped from
// the worker's memory once idle (its record stays, a few dozen bytes; a
// key's record with a due time in the past is the same as none).

// keyLimitKey is the key of a type's per-key limit among its handler values.
type keyLimitKey struct{}

// String names the option in the error of a worker without [Install].
func (keyLimitKey) String() string { return "ratelimit.WithKeyLimit needs ratelimit.Install" }

// WithKeyLimit limits how often tasks of each key of this type start
// ([framework.WithKey], a tenant or a customer), across every worker of the
// cluster: each key has the limit l to itself, so a key over its limit
// waits while other keys run. Tasks without a key are not limited by it.
// A task waits for its permit as with [WithLimit] (set aside for a long
// wait, no attempt spent), and first for its key's permit when the type
// also has [WithLimit]. Every worker must declare the same limit. Without
// [Install] the worker's Start fails with [framework.ErrInvalidOption]; an
// invalid limit makes Register panic.
func WithKeyLimit(l Limit) framework.HandlerOption {
	n, err := l.withDefaults()
	if err != nil {
		return framework.InvalidHandlerOption(err)
	}
	return framework.WithHandlerValue(keyLimitKey{}, n)
}

// keyIdle is how long a key's limiter stays in a worker's memory after its
// last request.
const keyIdle = time.Minute

// keyLimiters are a worker's limiters of keys, created on demand.
type keyLimiters struct {
	mu   sync.Mutex
	byID map[string]*keyLimiter // by bucket key
	gate engine.Gate            // *Task → permit of a key limit
}

// keyLimiter is one key's limiter and when it was last asked.
type keyLimiter struct {
	lim  *engine.Limiter
	used time.Time
}

// KeyOf returns the bucket key of the limit of key for taskType:
// "key.<type>.<key in unpadded base64url>", so that any valid task key,
// dots and spaces included, makes a valid bucket key that names one key.
func keyOf(taskType, key string) string {
	return "key." + taskType + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// ParseKey returns the task type and task key of a bucket key of a
// per-key limit ("key.<type>.<base64url>"); ok is false for any other.
func ParseKey(bucketKey string) (taskType, key string, ok bool) {
	rest, found := strings.CutPrefix(bucketKey, "key.")
	i := strings.LastIndexByte(rest, '.')
	if !found || i < 1 {
		return "", "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest[i+1:])
	if err != nil || taskmsg.ValidateKey(string(raw)) != nil {
		return "", "", false
	}
	return rest[:i], string(raw), true
}

// get returns the limiter of (taskType, key) under l, created on first use.
func (k *keyLimiters) get(x *limits, taskType, key string, l engine.Limit) *engine.Limiter {
	id := keyOf(taskType, key)
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.byID[id]
	if kl == nil {
		kl = &keyLimiter{lim: engine.NewLimiter(id, l, x.kv, x.log, x.stop)}
		k.byID[id] = kl
	}
	kl.used = time.Now()
	return kl.lim
}

// forget drops the key permit held for t, if any.
func (k *keyLimiters) forget(t *framework.Task) {
	key := t.Key()
	if key == "" {
		return
	}
	k.mu.Lock()
	kl := k.byID[keyOf(t.Type, key)]
	k.mu.Unlock()
	if kl != nil {
		k.gate.ForgetIn(t, kl.lim)
	}
}

// sweep drops the limiters idle since before cutoff: no waiter, no
// reservation under way.
func (k *keyLimiters) sweep(cutoff time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, kl := range k.byID {
		if kl.used.Before(cutoff) && kl.lim.Idle() {
			delete(k.byID, id)
		}
	}
}

// sweepKeys sweeps x's idle key limiters every keyIdle until ctx ends.
func (x *limits) sweepKeys(ctx context.Context) {
	tick := time.NewTicker(keyIdle)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			x.keys.sweep(now.Add(-keyIdle))
		}
	}
}

// admitKey waits for the permit of t's key under l, or returns the hold
// that sets t aside. A task without a key goes at once; one whose key
// fails validation (it came from the wire) fails for good, dead-lettered
// as corrupt, rather than run outside its limit.
func (x *limits) admitKey(ctx context.Context, l engine.Limit, t *framework.Task) (time.Duration, error) {
	key := t.Key()
	if key == "" {
		return 0, nil
	}
	if err := taskmsg.ValidateKey(key); err != nil {
		return 0, framework.Permanent(fmt.Errorf("%w: header %s: %w", framework.ErrCorruptTask, framework.HeaderKey, err))
	}
	return x.keys.gate.Admit(ctx, x.keys.get(x, t.Type, key, l), t)
}
