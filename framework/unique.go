package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/streams"
)

// Unique tasks: a reservation per uniqueness key in a KV bucket whose keys
// carry their own TTL (the period). See docs/unique.md.

// Header names of unique tasks, set by the client. Workers read them back
// from the wire and validate them before use.
const (
	// HeaderUniqueKey is the task's uniqueness key: "<type>.<64 hex digits>",
	// the SHA-256 of the caller's key or of the encoded payload.
	HeaderUniqueKey = "Jetflow-Unique-Key"
	// HeaderUniqueUntil is when the reservation ends at the latest (RFC 3339).
	HeaderUniqueUntil = "Jetflow-Unique-Until"
	// HeaderUniqueRevision is the revision of the reservation in the unique
	// bucket; set only on tasks that release it when they succeed
	// ([UniqueUntilDone]).
	HeaderUniqueRevision = "Jetflow-Unique-Rev"
)

// Limits of unique tasks.
const (
	// MinUniquePeriod is the shortest period of [Unique]: the server's
	// per-message TTLs count whole seconds.
	MinUniquePeriod = time.Second
	// MaxUniqueKeyLen is the longest caller key accepted by [UniqueKey], in
	// bytes. Keys are hashed, so any bytes are allowed.
	MaxUniqueKeyLen = 4096
)

// ErrUniqueBucket reports that the unique bucket could not be created or
// reached; nothing was enqueued.
var ErrUniqueBucket = errors.New("framework: unique bucket unavailable")

// Unique makes the task unique for period: a second enqueue of the same task
// type with the same uniqueness key before the period ends stores nothing and
// returns a [TaskInfo] with Duplicate set and the ID of the task holding the
// reservation. The key is the SHA-256 of the encoded payload (unique by
// arguments) unless [UniqueKey] names one. The reservation lives in a
// JetStream KV bucket ([streams.Names.UniqueBucket]) with a per-key TTL, so
// it holds across client, worker and server restarts. By default it lasts
// the whole period even after the task ran; with [UniqueUntilDone] it ends
// when the task succeeds. period is rounded up to whole seconds and must be
// at least [MinUniquePeriod].
//
// Unique costs one KV create per enqueue (see docs/benchmarks.md) and is
// not available with [Client.EnqueueMany].
func Unique(period time.Duration) EnqueueOption {
	return func(c *enqueueConfig) error {
		if period < MinUniquePeriod {
			return fmt.Errorf("%w: unique period %v, want ≥ %v", ErrInvalidOption, period, MinUniquePeriod)
		}
		c.unique.period = (period + time.Second - 1).Truncate(time.Second)
		return nil
	}
}

// UniqueKey sets the uniqueness key of a [Unique] task instead of deriving
// it from the payload, for example "settle:2026-11-30". The key is hashed
// with the task type, so any 1 to [MaxUniqueKeyLen] bytes are accepted and
// the same key of two task types does not collide.
func UniqueKey(key string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if key == "" || len(key) > MaxUniqueKeyLen {
			return fmt.Errorf("%w: unique key of %d bytes, want 1 to %d", ErrInvalidOption, len(key), MaxUniqueKeyLen)
		}
		c.unique.key = key
		c.unique.hasKey = true
		return nil
	}
}

// UniqueUntilDone ends the reservation of a [Unique] task as soon as the task
// succeeds, instead of at the end of its period. A task that fails for good
// (dead letter) keeps its reservation until the period ends.
func UniqueUntilDone() EnqueueOption {
	return func(c *enqueueConfig) error { c.unique.untilDone = true; return nil }
}

// uniqueConfig is the part of an enqueue's configuration set by the options
// above.
type uniqueConfig struct {
	period    time.Duration
	key       string
	hasKey    bool
	untilDone bool
}

// headers validates the unique options and returns the custom headers with
// the task's unique headers added (a copy), and whether the task is unique.
func (u uniqueConfig) headers(taskType string, data []byte, now time.Time, custom map[string]string) (map[string]string, bool, error) {
	if u.period == 0 {
		if u.hasKey || u.untilDone {
			return nil, false, fmt.Errorf("%w: UniqueKey and UniqueUntilDone need Unique(period)", ErrInvalidOption)
		}
		return custom, false, nil
	}
	h := sha256.New()
	h.Write([]byte(taskType))
	if u.hasKey {
		h.Write([]byte{0, 'k', 0})
		h.Write([]byte(u.key))
	} else {
		h.Write([]byte{0, 'p', 0})
		h.Write(data)
	}
	out := make(map[string]string, len(custom)+3)
	for k, v := range custom {
		out[k] = v
	}
	out[HeaderUniqueKey] = taskType + "." + hex.EncodeToString(h.Sum(nil))
	out[HeaderUniqueUntil] = now.Add(u.period).UTC().Format(time.RFC3339)
	if u.untilDone {
		out[HeaderUniqueRevision] = "0" // set once reserved
	}
	return out, true, nil
}

// parseUniqueKey validates a unique key read back from the wire: a valid
// task type, a dot, 64 lower-case hex digits. It returns the task type.
func parseUniqueKey(key string) (string, error) {
	if len(key) < 66 || len(key) > streams.MaxTaskTypeLen+65 {
		return "", fmt.Errorf("framework: unique key of %d bytes", len(key))
	}
	taskType, sum := key[:len(key)-65], key[len(key)-64:]
	if key[len(key)-65] != '.' {
		return "", errors.New("framework: unique key has no hash part")
	}
	if err := streams.ValidateTaskType(taskType); err != nil {
		return "", err
	}
	for i := 0; i < len(sum); i++ {
		if c := sum[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", errors.New("framework: unique key hash is not lower-case hex")
		}
	}
	return taskType, nil
}

// UniqueReservation is the value stored under a uniqueness key in the unique
// bucket, and what [Inspector.UniqueReservations] lists.
type UniqueReservation struct {
	// Key is the bucket key: "<type>.<hash>".
	Key string `json:"-"`
	// TaskID is the task that holds the reservation.
	TaskID string `json:"id"`
	// Type is the task type.
	Type string `json:"type"`
	// Until is when the reservation ends at the latest.
	Until time.Time `json:"until"`
	// UntilDone is true when the task's success ends the reservation early.
	UntilDone bool `json:"until_done,omitempty"`
	// Revision is the reservation's revision in the bucket.
	Revision uint64 `json:"-"`
}

// uniqueBucketMarkerTTL is how long the unique bucket keeps the markers of
// keys that expired or were released.
const uniqueBucketMarkerTTL = streams.UniqueMarkerTTL

// ensureUniqueBucket creates the unique bucket (per-key TTLs, the task
// stream's storage and replicas) if needed and returns it.
func ensureUniqueBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	cfg := jsapi.TaskStreamBucket(ctx, js, names.TaskStream(), jetstream.KeyValueConfig{
		Bucket:         names.UniqueBucket(),
		Description:    "jetflow unique tasks: one reservation per uniqueness key, expiring with its period",
		History:        1,
		LimitMarkerTTL: uniqueBucketMarkerTTL,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUniqueBucket, err)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUniqueBucket, err)
	}
	return kv, nil
}

// uniqueStore caches a handle on the unique bucket, created on first use.
type uniqueStore struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

func (s *uniqueStore) bucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := ensureUniqueBucket(ctx, js, names)
	if err != nil {
		return nil, err
	}
	s.kv = kv
	return kv, nil
}

// bind returns the bucket without creating it.
func (s *uniqueStore) bind(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := js.KeyValue(ctx, names.UniqueBucket())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUniqueBucket, err)
	}
	s.kv = kv
	return kv, nil
}

// reserveUnique takes the reservation of a unique task before it is
// published. It returns the holder's info with Duplicate set when another
// task holds the key, or a release function that gives the reservation
// back if the publish fails.
func (c *Client) reserveUnique(ctx context.Context, msg *nats.Msg, info TaskInfo) (dup *TaskInfo, release func(), err error) {
	key := msg.Header.Get(HeaderUniqueKey)
	until, err := time.Parse(time.RFC3339, msg.Header.Get(HeaderUniqueUntil))
	if err != nil {
		return nil, nil, fmt.Errorf("framework: unique until: %w", err)
	}
	untilDone := msg.Header.Get(HeaderUniqueRevision) != ""
	kv, err := c.unique.bucket(ctx, c.js, c.names)
	if err != nil {
		return nil, nil, err
	}
	val, err := json.Marshal(UniqueReservation{TaskID: info.ID, Type: info.Type, Until: until, UntilDone: untilDone})
	if err != nil {
		return nil, nil, err
	}
	ttl := time.Until(until).Round(time.Second)
	if ttl < time.Second {
		ttl = time.Second
	}
	rev, err := kv.Create(ctx, key, val, jetstream.KeyTTL(ttl))
	if errors.Is(err, jetstream.ErrKeyExists) {
		holder := TaskInfo{Type: info.Type, Priority: info.Priority, Duplicate: true}
		if e, gerr := kv.Get(ctx, key); gerr == nil {
			var r UniqueReservation
			if json.Unmarshal(e.Value(), &r) == nil && streams.ValidateID(r.TaskID) == nil {
				holder.ID = r.TaskID
			}
		}
		return &holder, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("framework: enqueue %s: reserve unique key: %w", info.Type, c.publishErr(info, err))
	}
	if untilDone {
		msg.Header.Set(HeaderUniqueRevision, strconv.FormatUint(rev, 10))
	}
	release = func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := kv.Purge(rctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(uniqueBucketMarkerTTL)); err != nil {
			c.opts.logger.Warn("jetflow could not release a unique reservation after a failed enqueue; it ends with its period",
				slog.String(LogKeyTaskType, info.Type), slog.Any(LogKeyError, err))
		}
	}
	return nil, release, nil
}

// enqueueUnique is Enqueue for a task with unique headers.
func (c *Client) enqueueUnique(ctx context.Context, msg *nats.Msg, info TaskInfo) (TaskInfo, bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultEnqueueTimeout)
		defer cancel()
	}
	dup, release, err := c.reserveUnique(ctx, msg, info)
	if err != nil {
		return TaskInfo{}, false, err
	}
	if dup != nil {
		if h := c.opts.hooks.Enqueued; h != nil {
			callHook(c.opts.logger, nil, "Enqueued", func() { h(ctx, *dup) })
		}
		return *dup, true, nil
	}
	ack, err := c.publish(ctx, msg)
	if err != nil {
		release()
		return TaskInfo{}, false, c.publishErr(info, err)
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	return info, false, nil
}

// uniqueExt releases the reservations of [UniqueUntilDone] tasks when they
// succeed.
type uniqueExt struct {
	w     *Worker
	store uniqueStore
}

func (w *Worker) installUnique() {
	x := &uniqueExt{w: w}
	// No prepare: a worker only binds the bucket (which the client created)
	// when a UniqueUntilDone task succeeds, so that workers need no
	// permissions on it otherwise.
	w.addExtension(extension{
		name: "unique",
		finished: func(_ context.Context, t *Task, o Outcome) {
			if o.Action == ActionAck {
				x.succeeded(t)
			}
		},
	})
}

func (x *uniqueExt) succeeded(t *Task) {
	revText := t.Header(HeaderUniqueRevision)
	if revText == "" {
		return
	}
	key := t.Header(HeaderUniqueKey)
	log := t.Logger()
	taskType, err := parseUniqueKey(key)
	if err == nil && taskType != t.Type {
		err = fmt.Errorf("framework: unique key of type %s on a task of type %s", taskType, t.Type)
	}
	rev, perr := strconv.ParseUint(revText, 10, 64)
	if err == nil && (perr != nil || rev == 0) {
		err = fmt.Errorf("framework: invalid unique revision %q", truncate(revText, 32))
	}
	if err != nil {
		log.Warn("jetflow task has an invalid unique reservation header; not released", slog.Any(LogKeyError, err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := x.store.bind(ctx, x.w.js, x.w.names)
	if err == nil {
		// Only this reservation: if it expired and another task reserved
		// the key since, the revision differs and nothing is released.
		err = kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(uniqueBucketMarkerTTL))
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !natserr.WrongLastSequence(err) {
		log.Warn("jetflow could not release the unique reservation; it ends with its period", slog.Any(LogKeyError, err))
	}
}

// UniqueReservations lists the current reservations of unique tasks of
// taskType, or of every type when taskType is "". Entries whose key or value
// fails validation are skipped.
func (i *Inspector) UniqueReservations(ctx context.Context, taskType string) ([]UniqueReservation, error) {
	if taskType != "" {
		if err := streams.ValidateTaskType(taskType); err != nil {
			return nil, err
		}
	}
	kv, err := i.js.KeyValue(ctx, i.names.UniqueBucket())
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
	var out []UniqueReservation
	for _, k := range keys {
		kt, err := parseUniqueKey(k)
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
		var r UniqueReservation
		if json.Unmarshal(e.Value(), &r) != nil || r.Type != kt || streams.ValidateID(r.TaskID) != nil {
			continue
		}
		r.Key, r.Revision = k, e.Revision()
		out = append(out, r)
	}
	return out, nil
}
