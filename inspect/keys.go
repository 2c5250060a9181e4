package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/internal/fleet"
	engine "github.com/jetflow-io/jetflow/internal/ratelimit"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/ratelimit"
)

// KeyInfo is what flow control knows of one task key of a type
// (framework.WithKey): the tasks of the key running now and its
// concurrency override (package keylimit), its rate limit's use
// (ratelimit.WithKeyLimit), and its debounced burst under way (package
// debounce). For an ordered type in lanes, the key is the ordering key,
// and its tasks running and queued come from its lane owner's registry
// record (the busiest keys of each lane). Tasks of a key waiting in the
// task stream are not counted: the key travels in a header, which the
// server does not index.
type KeyInfo struct {
	Type string `json:"type"`
	Key  string `json:"key"`
	// Running counts the tasks of the key holding a slot of keylimit, or
	// running in its lane.
	Running int `json:"running"`
	// Queued counts the key's tasks its lane's owner holds behind the
	// ones running (Ordering.Lanes).
	Queued int `json:"queued,omitempty"`
	// Staged counts the key's tasks waiting for their turn of fair shares
	// (package fairness), all priorities together.
	Staged int `json:"staged,omitempty"`
	// Limit is the key's own concurrency override, 0 without one (the
	// type's limit applies).
	Limit int `json:"limit,omitempty"`
	// RateLastSecond counts the permits of the key's rate limit reserved
	// during the last full second, of RatePerSecond; Throttled is set while
	// its next permit is not due yet (the key is over its rate).
	RateLastSecond int     `json:"rate_last_second,omitempty"`
	RatePerSecond  float64 `json:"rate_per_second,omitempty"`
	Throttled      bool    `json:"throttled,omitempty"`
	// DebouncedSince is when the key's debounced burst under way began,
	// with DebouncedEnqueues enqueues so far; zero without one.
	DebouncedSince    time.Time `json:"debounced_since,omitzero"`
	DebouncedEnqueues int       `json:"debounced_enqueues,omitempty"`
}

// maxKeys bounds the keys [Operator.Keys] reads from each source.
const maxKeys = 10000

// Keys returns what flow control knows of each task key (of taskType
// only, unless it is ""), the busiest first: by running tasks, then queued
// tasks, then staged tasks, then throttled, then debounced, then by type and key. It reads at most
// maxKeys records of each source.
func (i *Operator) Keys(ctx context.Context, taskType string) ([]KeyInfo, error) {
	type id struct{ typ, key string }
	byID := make(map[id]*KeyInfo)
	get := func(typ, key string) *KeyInfo {
		if taskType != "" && typ != taskType {
			return nil
		}
		k := byID[id{typ, key}]
		if k == nil {
			if len(byID) >= maxKeys {
				return nil
			}
			k = &KeyInfo{Type: typ, Key: key}
			byID[id{typ, key}] = k
		}
		return k
	}
	use, err := keylimit.List(ctx, i.client)
	if err != nil {
		return nil, fmt.Errorf("inspect: keys: %w", err)
	}
	for _, r := range use.Running {
		if k := get(r.Type, r.Key); k != nil {
			k.Running = r.Tasks
		}
	}
	for _, o := range use.Overrides {
		if o.Key == "" {
			continue // the type's own limit
		}
		if k := get(o.Type, o.Key); k != nil {
			k.Limit = o.Limit
		}
	}
	rates, err := engine.List(ctx, i.js, i.names.LimitsBucket(), func(k string) bool { _, _, ok := ratelimit.ParseKey(k); return ok })
	if err != nil {
		return nil, fmt.Errorf("inspect: keys: %w", err)
	}
	now := time.Now()
	for _, r := range rates {
		typ, key, _ := ratelimit.ParseKey(r.Key)
		if k := get(typ, key); k != nil {
			k.RateLastSecond, k.Throttled = r.LastSecond, r.Next.After(now)
			k.RatePerSecond = float64(r.Limit.Limit) / r.Limit.Interval.Seconds()
		}
	}
	bursts, _, err := debounce.List(ctx, i.client, maxKeys)
	if err != nil {
		return nil, fmt.Errorf("inspect: keys: %w", err)
	}
	for _, b := range bursts {
		if k := get(b.Type, b.Key); k != nil {
			k.DebouncedSince, k.DebouncedEnqueues = b.First, b.Enqueues
		}
	}
	if l, err := registryRules.List(ctx, i.js, i.names.WorkersBucket()); err == nil {
		for _, r := range l.Records {
			for _, h := range r.Lanes {
				for _, lk := range h.Busiest {
					if k := get(h.Type, lk.Key); k != nil {
						k.Running += lk.Running
						k.Queued += lk.Queued
					}
				}
			}
		}
	} else if !errors.Is(err, fleet.ErrNoRegistry) {
		i.log.Debug("jetflow inspect: keys of lanes unknown: registry not read", "error", err)
	}
	staged, err := i.staged(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: keys: %w", err)
	}
	for _, st := range staged {
		if k := get(st.typ, st.key); k != nil {
			k.Staged += st.n
		}
	}
	out := make([]KeyInfo, 0, len(byID))
	for _, k := range byID {
		out = append(out, *k)
	}
	flag := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	slices.SortFunc(out, func(a, b KeyInfo) int {
		return cmp.Or(cmp.Compare(b.Running, a.Running), cmp.Compare(b.Queued, a.Queued), cmp.Compare(b.Staged, a.Staged), cmp.Compare(flag(b.Throttled), flag(a.Throttled)),
			cmp.Compare(flag(!b.DebouncedSince.IsZero()), flag(!a.DebouncedSince.IsZero())),
			cmp.Compare(a.Type, b.Type), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// stagedCount is the number of tasks of one type, priority and key staged
// for fair shares.
type stagedCount struct {
	typ, key string
	n        int
}

// staged lists the fair stream's subjects with their message counts (none
// when the stream does not exist: no fair task was ever enqueued). A
// subject whose type or key is not valid is skipped: anyone allowed to
// publish there may have made it, and the movers dead-letter it.
func (i *Operator) staged(ctx context.Context) ([]stagedCount, error) {
	st, err := i.js.Stream(ctx, i.names.FairStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(i.names.FairWildcard()))
	if err != nil {
		return nil, err
	}
	var out []stagedCount
	for subj, n := range info.State.Subjects {
		_, typ, key, err := i.names.ParseFairSubject(subj)
		if err != nil || taskmsg.ValidateKey(key) != nil {
			continue
		}
		out = append(out, stagedCount{typ, key, int(n)})
	}
	return out, nil
}
