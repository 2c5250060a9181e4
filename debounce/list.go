package debounce

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Burst is a key's burst of enqueues that has not run yet, as [List] reads
// it from the bucket.
type Burst struct {
	Type string `json:"type"`
	Key  string `json:"key"`
	// First is when the burst's first enqueue came; its run is due by
	// First + MaxWait.
	First   time.Time     `json:"first"`
	MaxWait time.Duration `json:"max_wait"`
	// Enqueues counts the enqueues of the burst so far.
	Enqueues int `json:"enqueues"`
}

// List returns the bursts under way, oldest first, reading at most limit
// of them (0: all). Records that fail validation (the bucket is writable
// by producers) are skipped and counted in invalid. Without the bucket (no
// debounce was ever used) it returns nothing.
func List(ctx context.Context, c *framework.Client, limit int) (bursts []Burst, invalid int, err error) {
	kv, err := c.JetStream().KeyValue(ctx, c.Names().DebounceBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("debounce: %w", err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("debounce: %w", err)
	}
	for k := range lister.Keys() {
		if limit > 0 && len(bursts) >= limit {
			continue // drain the lister
		}
		b, ok := readBurst(ctx, kv, k)
		if !ok {
			invalid++
			continue
		}
		bursts = append(bursts, b)
	}
	slices.SortFunc(bursts, func(a, b Burst) int { return a.First.Compare(b.First) })
	return bursts, invalid, nil
}

// readBurst reads the record under bucket key k; ok is false for a key or
// record that is not one of Enqueue's, or one gone since it was listed.
func readBurst(ctx context.Context, kv jetstream.KeyValue, k string) (Burst, bool) {
	i := strings.LastIndexByte(k, '.')
	if i < 1 {
		return Burst{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(k[i+1:])
	if err != nil || taskmsg.ValidateKey(string(raw)) != nil || streams.ValidateTaskType(k[:i]) != nil {
		return Burst{}, false
	}
	e, err := kv.Get(ctx, k)
	if err != nil {
		return Burst{}, false
	}
	var rec record
	if json.Unmarshal(e.Value(), &rec) != nil || rec.First <= 0 || rec.MaxWait <= 0 || rec.Count < 1 {
		return Burst{}, false
	}
	return Burst{Type: k[:i], Key: string(raw), First: time.Unix(0, rec.First), MaxWait: time.Duration(rec.MaxWait),
		Enqueues: rec.Count}, true
}
