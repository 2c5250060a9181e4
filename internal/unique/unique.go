package unique

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// Header names of unique tasks, set by the client.
const (
	// HeaderKey is the task's uniqueness key: "<type>.<64 hex digits>".
	HeaderKey = "Jetflow-Unique-Key"
	// HeaderUntil is when the reservation ends at the latest (RFC 3339).
	HeaderUntil = "Jetflow-Unique-Until"
	// HeaderRevision is the revision of the reservation in the unique
	// bucket; set only on tasks that release it when they succeed.
	HeaderRevision = "Jetflow-Unique-Rev"
)

// ErrBucket reports that the unique bucket could not be created or reached.
var ErrBucket = errors.New("framework: unique bucket unavailable")

// Spec is a unique task's options.
type Spec struct {
	Period    time.Duration
	Key       string
	HasKey    bool
	UntilDone bool
}

// Headers returns custom with the task's unique headers added (a copy). s
// must have a period.
func (s Spec) Headers(taskType string, data []byte, now time.Time, custom map[string]string) map[string]string {
	h := sha256.New()
	h.Write([]byte(taskType))
	if s.HasKey {
		h.Write([]byte{0, 'k', 0})
		h.Write([]byte(s.Key))
	} else {
		h.Write([]byte{0, 'p', 0})
		h.Write(data)
	}
	out := make(map[string]string, len(custom)+3)
	for k, v := range custom {
		out[k] = v
	}
	out[HeaderKey] = taskType + "." + hex.EncodeToString(h.Sum(nil))
	out[HeaderUntil] = now.Add(s.Period).UTC().Format(time.RFC3339)
	if s.UntilDone {
		out[HeaderRevision] = "0" // set once reserved
	}
	return out
}

// Validators check what is read back from the wire or the bucket.
type Validators struct {
	TaskType   func(string) error // a valid task type
	ID         func(string) error // a valid task ID
	MaxTypeLen int                // the longest task type
}

// ParseKey validates a unique key read back from the wire: a valid task
// type, a dot, 64 lower-case hex digits. It returns the task type.
func (v Validators) ParseKey(key string) (string, error) {
	if len(key) < 66 || len(key) > v.MaxTypeLen+65 {
		return "", fmt.Errorf("framework: unique key of %d bytes", len(key))
	}
	taskType, sum := key[:len(key)-65], key[len(key)-64:]
	if key[len(key)-65] != '.' {
		return "", errors.New("framework: unique key has no hash part")
	}
	if err := v.TaskType(taskType); err != nil {
		return "", err
	}
	for i := 0; i < len(sum); i++ {
		if c := sum[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", errors.New("framework: unique key hash is not lower-case hex")
		}
	}
	return taskType, nil
}

// ReleaseTarget validates the unique headers of a succeeded task of
// taskType that asked for an early release, and returns the reservation to
// release. revText "" means there is nothing to release (ok false, nil
// error). The error text quotes at most the first 32 bytes of revText,
// cut by cut.
func (v Validators) ReleaseTarget(taskType, key, revText string, cut func(string, int) string) (rev uint64, ok bool, err error) {
	if revText == "" {
		return 0, false, nil
	}
	kt, err := v.ParseKey(key)
	if err == nil && kt != taskType {
		err = fmt.Errorf("framework: unique key of type %s on a task of type %s", kt, taskType)
	}
	rev, perr := strconv.ParseUint(revText, 10, 64)
	if err == nil && (perr != nil || rev == 0) {
		err = fmt.Errorf("framework: invalid unique revision %q", cut(revText, 32))
	}
	if err != nil {
		return 0, false, err
	}
	return rev, true, nil
}

// Reservation is the value stored under a uniqueness key.
type Reservation struct {
	Key       string    `json:"-"`
	TaskID    string    `json:"id"`
	Type      string    `json:"type"`
	Until     time.Time `json:"until"`
	UntilDone bool      `json:"until_done,omitempty"`
	Revision  uint64    `json:"-"`
}

// EnsureBucket creates the unique bucket (per-key TTLs, markers kept for
// markerTTL, the task stream's storage and replicas) if needed and returns
// it. Errors wrap [ErrBucket].
func EnsureBucket(ctx context.Context, js jetstream.JetStream, bucket, taskStream string, markerTTL time.Duration) (jetstream.KeyValue, error) {
	cfg := jsapi.TaskStreamBucket(ctx, js, taskStream, jetstream.KeyValueConfig{
		Bucket:         bucket,
		Description:    "jetflow unique tasks: one reservation per uniqueness key, expiring with its period",
		History:        1,
		LimitMarkerTTL: markerTTL,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	return kv, nil
}

// Cache caches a handle on the unique bucket. The zero value is empty.
type Cache struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

// Ensure returns the bucket, creating it on first use.
func (c *Cache) Ensure(ctx context.Context, js jetstream.JetStream, bucket, taskStream string, markerTTL time.Duration) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := EnsureBucket(ctx, js, bucket, taskStream, markerTTL)
	if err != nil {
		return nil, err
	}
	c.kv = kv
	return kv, nil
}

// Bind returns the bucket without creating it.
func (c *Cache) Bind(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	c.kv = kv
	return kv, nil
}

// Reserve creates key for r, expiring at r.Until (at least 1 s from now).
// When another task holds the key it returns held true and the holder's ID
// if its reservation is readable and its ID passes v.ID ("" otherwise).
func (v Validators) Reserve(ctx context.Context, kv jetstream.KeyValue, key string, r Reservation) (rev uint64, held bool, holder string, err error) {
	val, err := json.Marshal(r)
	if err != nil {
		return 0, false, "", err
	}
	ttl := time.Until(r.Until).Round(time.Second)
	if ttl < time.Second {
		ttl = time.Second
	}
	rev, err = kv.Create(ctx, key, val, jetstream.KeyTTL(ttl))
	if errors.Is(err, jetstream.ErrKeyExists) {
		if e, gerr := kv.Get(ctx, key); gerr == nil {
			var h Reservation
			if json.Unmarshal(e.Value(), &h) == nil && v.ID(h.TaskID) == nil {
				holder = h.TaskID
			}
		}
		return 0, true, holder, nil
	}
	return rev, false, "", err
}

// Release purges key if its reservation is still at rev, leaving a marker
// for markerTTL.
func Release(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64, markerTTL time.Duration) error {
	return kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
}

// List reads the reservations of taskType, or of every type when taskType
// is "". Entries whose key or value fails validation are skipped; a missing
// bucket lists nothing.
func (v Validators) List(ctx context.Context, js jetstream.JetStream, bucket, taskType string) ([]Reservation, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("framework: unique reservations: %w", err)
	}
	filter := ">"
	if taskType != "" {
		filter = taskType + ".*"
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("framework: unique reservations: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []Reservation
	for _, k := range keys {
		kt, err := v.ParseKey(k)
		if err != nil || (taskType != "" && kt != taskType) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("framework: unique reservation %s: %w", k, err)
		}
		var r Reservation
		if json.Unmarshal(e.Value(), &r) != nil || r.Type != kt || v.ID(r.TaskID) != nil {
			continue
		}
		r.Key, r.Revision = k, e.Revision()
		out = append(out, r)
	}
	return out, nil
}
