package ordering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
)

const (
	logKeyTaskID = "task_id"
	logKeyError  = "error"
)

// Resolutions of a blocked task.
const (
	ResolveRetry = "retry" // run the task again (one more attempt)
	ResolveSkip  = "skip"  // dead-letter it; its key moves on
)

// ErrNotBlocked reports a task that has no blocked record.
var ErrNotBlocked = errors.New("not blocked")

// Blocked is the record of a task that failed for good and keeps its key
// blocked, stored in the ordering bucket under [BlockedKey].
type Blocked struct {
	Type       string    `json:"type"`
	TaskID     string    `json:"id"`
	Key        string    `json:"key"`
	Error      string    `json:"error"`
	Since      time.Time `json:"since"`
	Attempts   int       `json:"attempts"`
	Resolution string    `json:"resolution,omitempty"`
}

// BlockedKey is the bucket key of a blocked task: its type and its ID
// escaped like a state key (task IDs may hold ':', which KV keys may not;
// a record that cannot be written would leave the task holding its key with
// nothing to resolve).
func BlockedKey(taskType, id string) string { return taskType + "." + staterec.Key(id) }

// EnsureBucket creates the ordering bucket (stored like the task stream) if
// needed and returns it.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, bucket, taskStream string) (jetstream.KeyValue, error) {
	cfg := jsapi.TaskStreamBucket(ctx, js, taskStream, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "jetflow ordered tasks blocked after failing for good, by type and task ID",
		History:     1,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// Verdict is what a [Blocker] decides before an attempt.
type Verdict int

const (
	// Run runs the handler.
	Run Verdict = iota
	// Hold sets the task aside; it stays blocked.
	Hold
	// Skip dead-letters the task: an operator skipped it.
	Skip
	// Fail returns the error: the record could not be read.
	Fail
)

// Blocker keeps the blocked tasks of one ordered type.
type Blocker struct {
	kv       jetstream.KeyValue
	taskType string
	log      *slog.Logger
	mine     sync.Map // task ID → Blocked by this process
}

// NewBlocker returns the blocker of taskType on the ordering bucket kv.
func NewBlocker(kv jetstream.KeyValue, taskType string, log *slog.Logger) *Blocker {
	return &Blocker{kv: kv, taskType: taskType, log: log}
}

func (b *Blocker) put(ctx context.Context, rec Blocked) {
	val, err := json.Marshal(rec)
	if err == nil {
		_, err = b.kv.Put(context.WithoutCancel(ctx), BlockedKey(b.taskType, rec.TaskID), val)
	}
	if err != nil {
		b.log.Error("jetflow could not record a blocked ordered task; holding it and trying again",
			slog.String(logKeyTaskID, rec.TaskID), slog.Any(logKeyError, err))
	}
}

// Before decides whether attempt of task id runs. A task blocked by this
// process, or one delivered again, is checked against its record: held
// while unresolved, run again or skipped once an operator resolved it. With
// Hold, cause is the error that blocked it (or why the record could not be
// read).
func (b *Blocker) Before(ctx context.Context, id string, attempt int) (v Verdict, cause string, err error) {
	local, isMine := b.mine.Load(id)
	if !isMine && attempt <= 1 {
		return Run, "", nil
	}
	rk := BlockedKey(b.taskType, id)
	e, err := b.kv.Get(ctx, rk)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if isMine { // our record was not written: write it again
			b.put(ctx, local.(Blocked))
			return Hold, local.(Blocked).Error, nil
		}
	case err != nil:
		if isMine {
			return Hold, err.Error(), nil
		}
		return Fail, "", fmt.Errorf("framework: read blocked record: %w", err) // retried with backoff
	default:
		// Held only on a record the operator's list shows (see
		// Rules.validBlocked): a task held on one it skips could not be
		// resolved.
		var rec Blocked
		if json.Unmarshal(e.Value(), &rec) != nil || rec.TaskID != id || rec.Type != b.taskType || ValidateKey(rec.Key) != nil {
			b.log.Warn("jetflow invalid blocked-task record; removing it", slog.String(logKeyTaskID, id))
			_ = b.kv.Purge(ctx, rk, jetstream.LastRevision(e.Revision()))
			break
		}
		switch rec.Resolution {
		case ResolveRetry, ResolveSkip:
			if err := b.kv.Purge(ctx, rk, jetstream.LastRevision(e.Revision())); err != nil {
				return Hold, rec.Error, nil
			}
			b.mine.Delete(id)
			if rec.Resolution == ResolveSkip {
				return Skip, "", nil
			}
		default:
			return Hold, rec.Error, nil
		}
	}
	return Run, "", nil
}

// Block records rec: its task failed for good and now blocks its key.
func (b *Blocker) Block(ctx context.Context, rec Blocked) {
	b.mine.Store(rec.TaskID, rec)
	b.put(ctx, rec)
}

// validBlocked reports whether a record read under bucket key k is usable.
func (r Rules) validBlocked(k string, b *Blocked) bool {
	return r.TaskType(b.Type) == nil && r.ID(b.TaskID) == nil && k == BlockedKey(b.Type, b.TaskID) &&
		ValidateKey(b.Key) == nil
}

// ListBlocked reads the blocked records of bucket; records that fail
// validation are skipped and a missing bucket lists nothing.
func (r Rules) ListBlocked(ctx context.Context, js jetstream.JetStream, bucket string) ([]Blocked, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []Blocked
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var b Blocked
		if json.Unmarshal(e.Value(), &b) != nil || !r.validBlocked(k, &b) {
			continue
		}
		out = append(out, b)
	}
	return out, nil
}

// Resolve sets the resolution of the blocked task id of taskType with
// compare-and-set. It returns [ErrNotBlocked] when there is no record.
func Resolve(ctx context.Context, js jetstream.JetStream, bucket, taskType, id, resolution string) error {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return ErrNotBlocked
	}
	if err != nil {
		return fmt.Errorf("framework: resolve blocked task: %w", err)
	}
	for range 10 {
		e, err := kv.Get(ctx, BlockedKey(taskType, id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ErrNotBlocked
		}
		if err != nil {
			return fmt.Errorf("framework: resolve blocked task: %w", err)
		}
		var r Blocked
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return fmt.Errorf("framework: blocked record of %s: %w", id, err)
		}
		r.Resolution = resolution
		val, _ := json.Marshal(r)
		_, err = kv.Update(ctx, e.Key(), val, e.Revision())
		if err == nil {
			return nil
		}
		if !natserr.WrongLastSequence(err) && !strings.Contains(err.Error(), "wrong last sequence") {
			return fmt.Errorf("framework: resolve blocked task: %w", err)
		}
	}
	return fmt.Errorf("framework: resolve blocked task %s: too many concurrent updates", id)
}

// BlockedRecheck is how often a held blocked task reads its record again.
const BlockedRecheck = 2 * time.Second

// HoldError sets a blocked task aside until its record is read again: the
// error a blocked key's gate returns instead of running the handler.
type HoldError struct{ Cause string }

func (e *HoldError) Error() string {
	return "framework: ordered task blocked after failing for good (resolve with inspect.Operator.ResolveBlocked): " + e.Cause
}

// Held reports how long a task whose attempt failed with err is set aside
// before its blocked record is read again (BlockedRecheck on average,
// spread), and whether err is a [HoldError] at all.
func Held(err error) (time.Duration, bool) {
	var h *HoldError
	if errors.As(err, &h) {
		return BlockedRecheck/2 + rand.N(BlockedRecheck), true
	}
	return 0, false
}
