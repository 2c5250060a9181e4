package keylimit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Overrides are records "limit.<type>" (the type's limit) and
// "limit.<type>.<key>" (one key's) in the key-limits bucket, type and key
// escaped into one token each. Every worker with [Install] watches them:
// a change applies to the tasks that take a slot after it arrives, within
// a moment, without a restart. A key's override wins over the type's,
// which wins over [PerKey].

// Override is a limit set at run time with [Set].
type Override struct {
	Type string `json:"type"`
	// Key is "" for the type's own limit (every key without an override
	// of its own).
	Key   string    `json:"key,omitempty"`
	Limit int       `json:"limit"`
	Set   time.Time `json:"set"`
}

func overrideKey(taskType, key string) string {
	k := "limit." + staterec.Key(taskType)
	if key != "" {
		k += "." + staterec.Key(key)
	}
	return k
}

func checkTarget(taskType, key string) error {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
	}
	if key != "" {
		if err := taskmsg.ValidateKey(key); err != nil {
			return fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
		}
	}
	return nil
}

// decode reads an override record; it comes from the bucket, where anyone
// with write permission may have put anything.
func decode(k string, b []byte) (Override, error) {
	var o Override
	if err := json.Unmarshal(b, &o); err != nil {
		return o, err
	}
	if err := checkTarget(o.Type, o.Key); err != nil {
		return o, err
	}
	if o.Limit < 1 || o.Limit > MaxLimit {
		return o, fmt.Errorf("limit %d", o.Limit)
	}
	if overrideKey(o.Type, o.Key) != k {
		return o, fmt.Errorf("record for %s/%s under key %s", o.Type, o.Key, k)
	}
	return o, nil
}

// ErrUnknownType is wrapped by the error of [Set] for a type that no live
// worker serves while workers are running: most likely a misspelt type,
// whose override would never apply. [AnyType] sets it all the same.
var ErrUnknownType = errors.New("keylimit: no live worker serves the task type")

// SetOption configures [Set].
type SetOption func(*setConfig)

type setConfig struct{ anyType bool }

// AnyType lets [Set] store an override for a type that no live worker
// serves yet (a type about to be deployed).
func AnyType() SetOption { return func(c *setConfig) { c.anyType = true } }

// Set stores limit n (1 to [MaxLimit]) for key of taskType, or with key ""
// for every key of taskType without a limit of its own; every worker
// applies it within a moment. It creates the bucket when missing. Bad
// input gets an error wrapping [framework.ErrInvalidOption]; so does a
// type that no live worker serves while the worker registry lists some
// ([ErrUnknownType], unless [AnyType]). Without a registry, or without
// permission to read it, the type is not checked.
func Set(ctx context.Context, c *framework.Client, taskType, key string, n int, opts ...SetOption) error {
	if err := checkTarget(taskType, key); err != nil {
		return err
	}
	if n < 1 || n > MaxLimit {
		return fmt.Errorf("%w: limit %d, want 1 to %d", framework.ErrInvalidOption, n, MaxLimit)
	}
	var cfg setConfig
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.anyType && !served(ctx, c, taskType) {
		return fmt.Errorf("%w: %w: %s (keylimit.AnyType to set it anyway)", framework.ErrInvalidOption, ErrUnknownType, taskType)
	}
	if _, err := ensureBucket(ctx, c.JetStream(), c.Names()); err != nil {
		return err
	}
	kv, err := c.JetStream().KeyValue(ctx, c.Names().KeyLimitsBucket())
	if err != nil {
		return fmt.Errorf("keylimit: %w", err)
	}
	b, _ := json.Marshal(Override{Type: taskType, Key: key, Limit: n, Set: time.Now().UTC()})
	if _, err := kv.Put(ctx, overrideKey(taskType, key), b); err != nil {
		return fmt.Errorf("keylimit: set %s %q: %w", taskType, key, err)
	}
	return nil
}

// served reports whether a live worker serves taskType, or whether that
// cannot be known (no registry, no worker in it, no permission to read it).
func served(ctx context.Context, c *framework.Client, taskType string) bool {
	rules := fleet.Rules{TaskType: streams.ValidateTaskType}
	l, err := rules.List(ctx, c.JetStream(), c.Names().WorkersBucket())
	if err != nil || len(l.Records) == 0 {
		return true
	}
	for _, r := range l.Records {
		for _, s := range r.Types {
			if s.Type == taskType {
				return true
			}
		}
	}
	return false
}

// Remove deletes the override of key of taskType ("" for the type's own);
// the limit falls back to the type's override, then [PerKey]. Removing an
// override that does not exist is not an error.
func Remove(ctx context.Context, c *framework.Client, taskType, key string) error {
	if err := checkTarget(taskType, key); err != nil {
		return err
	}
	kv, err := c.JetStream().KeyValue(ctx, c.Names().KeyLimitsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("keylimit: %w", err)
	}
	if err := kv.Purge(ctx, overrideKey(taskType, key)); err != nil {
		return fmt.Errorf("keylimit: remove %s %q: %w", taskType, key, err)
	}
	return nil
}

// Usage is what [List] reports: the overrides, and the slots held now.
type Usage struct {
	Overrides []Override `json:"overrides"`
	// Running counts the tasks holding a slot, by type and key.
	Running []Running `json:"running"`
	// Invalid counts records that break the rules and were skipped.
	Invalid int `json:"invalid,omitempty"`
}

// Running is how many tasks of a key run now.
type Running struct {
	Type  string `json:"type"`
	Key   string `json:"key"`
	Tasks int    `json:"tasks"`
}

// List returns the overrides and how many tasks of each key hold a slot
// now. Without the bucket (no limit was ever used) it returns an empty
// Usage.
func List(ctx context.Context, c *framework.Client) (*Usage, error) {
	out := &Usage{Overrides: []Override{}, Running: []Running{}}
	bucket := c.Names().KeyLimitsBucket()
	s, err := c.JetStream().Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keylimit: %w", err)
	}
	prefix := "$KV." + bucket + ".slot."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("keylimit: %w", err)
	}
	counts := make(map[[2]string]int)
	for subj := range info.State.Subjects {
		parts := strings.Split(strings.TrimPrefix(subj, prefix), ".")
		if len(parts) != 3 {
			out.Invalid++
			continue
		}
		typ, ok1 := unescape(parts[0])
		key, ok2 := unescape(parts[1])
		if !ok1 || !ok2 || checkTarget(typ, key) != nil {
			out.Invalid++
			continue
		}
		counts[[2]string{typ, key}]++
	}
	for k, n := range counts {
		out.Running = append(out.Running, Running{Type: k[0], Key: k[1], Tasks: n})
	}
	slices.SortFunc(out.Running, func(a, b Running) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Key, b.Key)) })
	kv, err := c.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("keylimit: %w", err)
	}
	w, err := kv.Watch(ctx, "limit.>")
	if err != nil {
		return nil, fmt.Errorf("keylimit: %w", err)
	}
	defer func() { _ = w.Stop() }()
read:
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("keylimit: list limits: %w", ctx.Err())
		case e = <-w.Updates():
		}
		switch {
		case e == nil:
			break read
		case e.Operation() != jetstream.KeyValuePut:
			continue
		}
		o, err := decode(e.Key(), e.Value())
		if err != nil {
			out.Invalid++
			continue
		}
		out.Overrides = append(out.Overrides, o)
	}
	slices.SortFunc(out.Overrides, func(a, b Override) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Key, b.Key)) })
	return out, nil
}

// unescape reverses staterec.Key.
func unescape(tok string) (string, bool) {
	if !strings.Contains(tok, "=") {
		return tok, tok != ""
	}
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		if tok[i] != '=' {
			b.WriteByte(tok[i])
			continue
		}
		if i+2 >= len(tok) {
			return "", false
		}
		v, err := strconv.ParseUint(tok[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// overrides is a worker's live view of the override records.
type overrides struct {
	mu     sync.RWMutex
	byKey  map[string]int // overrideKey → limit
	cancel context.CancelFunc
	done   chan struct{}
}

// watchOverrides reads the override records and keeps reading them until
// stop.
func watchOverrides(ctx context.Context, js jetstream.JetStream, names streams.Names, log *slog.Logger) (*overrides, error) {
	kv, err := js.KeyValue(ctx, names.KeyLimitsBucket())
	if err != nil {
		return nil, fmt.Errorf("keylimit: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.Watch(wctx, "limit.>")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keylimit: watch limits: %w", err)
	}
	o := &overrides{byKey: make(map[string]int), cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(o.done)
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-wctx.Done():
				return
			case e = <-w.Updates():
			}
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			o.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(o.byKey, e.Key())
			} else if rec, err := decode(e.Key(), e.Value()); err != nil {
				log.Warn("jetflow keylimit: limit record skipped", slog.String("key", e.Key()), slog.Any("error", err))
				delete(o.byKey, e.Key())
			} else {
				o.byKey[e.Key()] = rec.Limit
			}
			o.mu.Unlock()
		}
	}()
	select {
	case <-ready:
		return o, nil
	case <-ctx.Done():
		o.stop()
		return nil, fmt.Errorf("keylimit: read limits: %w", ctx.Err())
	}
}

// limit returns the limit of key of taskType: its override, the type's
// override, or def.
func (o *overrides) limit(taskType, key string, def int) int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if len(o.byKey) == 0 {
		return def
	}
	if n, ok := o.byKey[overrideKey(taskType, key)]; ok {
		return n
	}
	if n, ok := o.byKey[overrideKey(taskType, "")]; ok {
		return n
	}
	return def
}

// stop ends the watch.
func (o *overrides) stop() {
	o.cancel()
	<-o.done
}
