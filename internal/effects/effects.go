package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/retry"
)

// Record is the value stored per (task, effect key).
type Record struct {
	State   string          `json:"state"` // started, done, failed
	Attempt int             `json:"attempt"`
	At      time.Time       `json:"at"`
	Value   json.RawMessage `json:"value,omitempty"`
	// Omitted: the value was larger than the limit, or not JSON.
	Omitted bool   `json:"value_omitted,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Record states.
const (
	Started = "started"
	Done    = "done"
	Failed  = "failed"
)

// Call is one run of an effect.
type Call struct {
	TaskID  string
	Attempt int
	Key     string // the effect's name; KV key is the caller's
	KVKey   string
	// Rerun runs the effect again over a claim without outcome instead of
	// reporting it uncertain.
	Rerun bool
	// MaxValue bounds the recorded value's bytes.
	MaxValue int
	// ErrorText shortens an error for the failed record.
	ErrorText func(string) string
	Log       *slog.Logger
}

// Uncertain reports a claim by an earlier delivery that never recorded
// its outcome.
type Uncertain struct {
	Attempt   int
	ClaimedAt time.Time
}

func (u *Uncertain) Error() string { return "effect outcome unknown" }

// ErrOmitted reports an effect applied earlier whose value was not
// recorded.
var ErrOmitted = errors.New("effect applied; value not recorded")

// Unrecordable wraps the error of encoding an effect's value: the effect
// happened, only its value cannot be recorded.
type Unrecordable struct{ Err error }

func (e *Unrecordable) Error() string { return "unrecordable effect value: " + e.Err.Error() }

// maxConflicts bounds the compare-and-set retries of one claim.
const maxConflicts = 5

// writeTimeout bounds the ledger writes made after an effect ran, which do
// not use the caller's (possibly ended) context.
const writeTimeout = 10 * time.Second

// Run claims c's effect in kv, runs fn unless an earlier delivery applied
// it, and records the outcome. It returns a nil value when fn ran (the
// caller keeps fn's own value) and the recorded value when the effect was
// applied earlier ("null" for none). Errors: fn's own (the claim released),
// *[Uncertain], [ErrOmitted], or a ledger error.
func Run(ctx context.Context, kv jetstream.KeyValue, c Call, fn func(ctx context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	k := c.KVKey
	claim := mustJSON(Record{State: Started, Attempt: c.Attempt, At: time.Now().UTC()})
	var rev uint64
	var err error
	for conflicts := 0; ; conflicts++ {
		if conflicts >= maxConflicts {
			return nil, fmt.Errorf("framework: effect %s of task %s: still conflicting after %d attempts", c.Key, c.TaskID, conflicts)
		}
		rev, err = kv.Create(ctx, k, claim)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("framework: effect %s of task %s: claim: %w", c.Key, c.TaskID, err)
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // expired or deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("framework: effect %s of task %s: read: %w", c.Key, c.TaskID, err)
		}
		var rec Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			rec = Record{State: Started} // unreadable: treat as unknown outcome
		}
		switch {
		case rec.State == Done:
			c.Log.Debug("jetflow effect already applied; skipped", slog.Int("by_attempt", rec.Attempt))
			if rec.Omitted {
				return nil, ErrOmitted
			}
			if rec.Value == nil {
				return json.RawMessage("null"), nil
			}
			return rec.Value, nil
		case rec.State == Failed:
			// The earlier run reported that the effect did not happen.
		case c.Rerun:
			c.Log.Warn("jetflow effect claimed earlier with no recorded outcome; running it again (policy rerun)",
				slog.Int("claimed_by_attempt", rec.Attempt), slog.Time("claimed_at", rec.At))
		default:
			return nil, &Uncertain{Attempt: rec.Attempt, ClaimedAt: rec.At}
		}
		rev, err = kv.Update(ctx, k, claim, e.Revision())
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("framework: effect %s of task %s: claim: %w", c.Key, c.TaskID, err)
		}
	}

	// Apply it.
	value, ferr := fn(ctx)
	omit := false
	if uv := (*Unrecordable)(nil); errors.As(ferr, &uv) {
		c.Log.Warn("jetflow effect value not recorded: cannot encode it as JSON", slog.Any("error", uv.Err))
		value, ferr, omit = nil, nil, true
	}

	// Record the outcome, even if the caller's context ended meanwhile.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if ferr != nil {
		rec := Record{State: Failed, Attempt: c.Attempt, At: time.Now().UTC(), Error: c.ErrorText(ferr.Error())}
		if _, err := kv.Update(wctx, k, mustJSON(rec), rev); err != nil {
			c.Log.Warn("jetflow could not release the claim of a failed effect; the next attempt will find its outcome unknown",
				slog.Any("error", err), slog.Any("cause", ferr))
		}
		return nil, ferr
	}
	rec := Record{State: Done, Attempt: c.Attempt, At: time.Now().UTC(), Value: value, Omitted: omit}
	if len(value) > c.MaxValue {
		rec.Value, rec.Omitted = nil, true
		c.Log.Warn("jetflow effect value not recorded: too large", slog.Int("bytes", len(value)), slog.Int("limit", c.MaxValue))
	}
	data := mustJSON(rec)
	var err2 error
	for i := range 5 {
		if _, err2 = kv.Update(wctx, k, data, rev); err2 == nil {
			return nil, nil
		}
		if errors.Is(err2, jetstream.ErrKeyRevisionMismatch) || wctx.Err() != nil {
			break
		}
		retry.Sleep(wctx, time.Duration(i+1)*100*time.Millisecond)
	}
	return nil, fmt.Errorf("framework: effect %s of task %s was applied but could not be recorded; a redelivery will find its outcome unknown: %w",
		c.Key, c.TaskID, err2)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
