package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
)

// The JSON API of ordered tasks, rate limits and unique tasks: partitions,
// lanes (inspect.Lane), blocked keys (and resolving them), limits against their use, uniqueness
// reservations.

// Partition is a partition of an ordered task type in GET api/ordering.
type Partition struct {
	Type       string `json:"type"`
	Partition  int    `json:"partition"`
	Partitions int    `json:"partitions"`
	// Pending is the number of tasks waiting behind the head.
	Pending uint64 `json:"pending"`
	// HeadID and HeadKey are the task in flight and its ordering key,
	// empty when the partition is idle.
	HeadID  string `json:"head_id,omitempty"`
	HeadKey string `json:"head_key,omitempty"`
	// Retrying is true when the head failed (or its worker died) and the
	// partition's keys wait for its retry.
	Retrying    bool   `json:"retrying"`
	PausedUntil string `json:"paused_until,omitempty"`
}

// BlockedKey is an ordered task that failed for good and keeps its key
// blocked until resolved, in GET api/ordering.
type BlockedKey struct {
	Type     string    `json:"type"`
	ID       string    `json:"id"`
	Key      string    `json:"key"`
	Error    string    `json:"error"`
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts"`
	// Resolution is "retry" or "skip" once resolved, until the worker
	// holding the task acts on it.
	Resolution string `json:"resolution,omitempty"`
}

// Limit is a cluster-wide rate limit in GET api/limits.
type Limit struct {
	// Name is "type.<task type>" or "dep.<dependency>".
	Name            string  `json:"name"`
	Limit           int     `json:"limit"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Burst           int     `json:"burst"`
	// LastSecond is the number of permits reserved during the last full
	// second; LimitPerSecond is the limit it compares with.
	LastSecond     int       `json:"last_second"`
	LimitPerSecond float64   `json:"limit_per_second"`
	Next           time.Time `json:"next,omitzero"`
	ThrottledUntil time.Time `json:"throttled_until,omitzero"`
	Throttled      bool      `json:"throttled"`
}

// Reservation is a uniqueness reservation in GET api/unique.
type Reservation struct {
	Type string `json:"type"`
	// Hash identifies the uniqueness key (a hash of the payload or of the
	// caller's key) within the type.
	Hash      string    `json:"hash"`
	ID        string    `json:"id"`
	Until     time.Time `json:"until"`
	UntilDone bool      `json:"until_done"`
}

func (h *handler) ordering(w http.ResponseWriter, r *http.Request) {
	parts, err := h.op.OrderingPartitions(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	bs, err := h.op.BlockedTasks(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ps := make([]Partition, 0, len(parts))
	for _, p := range parts {
		v := Partition{Type: p.Type, Partition: p.Partition, Partitions: p.Partitions, Pending: p.Pending, PausedUntil: p.PausedUntil}
		if p.Head != nil {
			v.HeadID, v.HeadKey, v.Retrying = p.Head.TaskID, p.Head.Key, p.Head.Retrying
		}
		ps = append(ps, v)
	}
	slices.SortFunc(ps, func(a, b Partition) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Partition - b.Partition
	})
	lanes, err := h.op.Lanes(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	blocked := make([]BlockedKey, 0, len(bs))
	for _, b := range bs {
		blocked = append(blocked, BlockedKey{Type: b.Type, ID: b.TaskID, Key: b.Key, Error: b.Error, Since: b.Since.UTC(),
			Attempts: b.Attempts, Resolution: b.Resolution})
	}
	writeJSON(w, http.StatusOK, map[string]any{"partitions": ps, "lanes": lanes, "blocked": blocked})
}

// resolveBlocked answers POST api/ordering/{type}/{id}/resolve with body
// {"resolution": "retry"|"skip"}.
func (h *handler) resolveBlocked(w http.ResponseWriter, r *http.Request) {
	typ, id := r.PathValue("type"), r.PathValue("id")
	if err := streams.ValidateTaskType(typ); err != nil {
		h.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	if err := streams.ValidateID(id); err != nil {
		h.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	var body struct {
		Resolution string `json:"resolution"`
	}
	data, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err := json.Unmarshal(data, &body); err != nil ||
		(body.Resolution != inspect.ResolveRetry && body.Resolution != inspect.ResolveSkip) {
		h.fail(w, r, fmt.Errorf("%w: body wants {\"resolution\": %q or %q}", errBadRequest, inspect.ResolveRetry, inspect.ResolveSkip))
		return
	}
	if err := h.op.ResolveBlocked(r.Context(), typ, id, body.Resolution); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": typ, "id": id, "resolution": body.Resolution})
}

func (h *handler) limits(w http.ResponseWriter, r *http.Request) {
	infos, err := h.op.RateLimits(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	now := time.Now()
	out := make([]Limit, 0, len(infos))
	for _, in := range infos {
		l := Limit{Name: in.Name, Limit: in.Limit.Limit, IntervalSeconds: in.Limit.Interval.Seconds(), Burst: in.Limit.Burst,
			LastSecond: in.LastSecond, Next: in.Next.UTC(), ThrottledUntil: in.ThrottledUntil.UTC(),
			Throttled: in.ThrottledUntil.After(now)}
		if in.Limit.Interval > 0 {
			l.LimitPerSecond = float64(in.Limit.Limit) / in.Limit.Interval.Seconds()
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Limit) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"limits": out})
}

// tenants serves GET api/tenants[?type=T]: what flow control knows of each
// task key (inspect.Operator.Keys), busiest first.
func (h *handler) tenants(w http.ResponseWriter, r *http.Request) {
	typ := r.URL.Query().Get("type")
	if typ != "" {
		if err := streams.ValidateTaskType(typ); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
	}
	keys, err := h.op.Keys(r.Context(), typ)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

func (h *handler) unique(w http.ResponseWriter, r *http.Request) {
	typ := r.URL.Query().Get("type")
	if typ != "" {
		if err := streams.ValidateTaskType(typ); err != nil {
			h.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
			return
		}
	}
	rs, err := h.op.UniqueReservations(r.Context(), typ)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]Reservation, 0, len(rs))
	for _, res := range rs {
		out = append(out, Reservation{Type: res.Type, Hash: strings.TrimPrefix(res.Key, res.Type+"."), ID: res.TaskID,
			Until: res.Until.UTC(), UntilDone: res.UntilDone})
	}
	slices.SortFunc(out, func(a, b Reservation) int { return a.Until.Compare(b.Until) })
	writeJSON(w, http.StatusOK, map[string]any{"reservations": out})
}
