package ui

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// The JSON API. Every answer is an object; errors are {"error": "..."} with
// a 4xx or 5xx status. Times are RFC 3339; absent times are omitted.

// Queue is one (type, priority) queue in [Overview].
type Queue struct {
	Type     string `json:"type"`
	Priority string `json:"priority"`
	// Consumer is the queue's durable consumer; empty when no worker ever
	// served the queue (it only has scheduled tasks).
	Consumer    string `json:"consumer,omitempty"`
	Waiting     uint64 `json:"waiting"`
	InFlight    int    `json:"in_flight"`
	Redelivered int    `json:"redelivered"`
	Scheduled   int    `json:"scheduled"`
	// Delivered counts deliveries since the consumer was created; the
	// pages chart its rate.
	Delivered uint64 `json:"delivered"`
	Acked     uint64 `json:"acked"`
	Pulling   int    `json:"pulling"`
	// OldestWaitingSeconds is the age of the oldest task not yet delivered.
	OldestWaitingSeconds float64   `json:"oldest_waiting_seconds"`
	OldestWaiting        time.Time `json:"oldest_waiting,omitzero"`
	LastDelivery         time.Time `json:"last_delivery,omitzero"`
	Paused               bool      `json:"paused"`
	PausedUntil          time.Time `json:"paused_until,omitzero"`
	// Workers counts the live workers serving the queue (the worker
	// registry; 0 when [Overview].Registry is false). NoWorker is true when
	// tasks wait and none serves it.
	Workers  int  `json:"workers"`
	NoWorker bool `json:"no_worker"`
}

// Overview is the answer of GET api/overview.
type Overview struct {
	Taken              time.Time         `json:"taken"`
	Queues             []Queue           `json:"queues"`
	Dead               map[string]uint64 `json:"dead"`
	DeadTotal          uint64            `json:"dead_total"`
	Scheduled          int               `json:"scheduled"`
	ScheduledTruncated bool              `json:"scheduled_truncated"`
	Cron               int               `json:"cron"`
	Paused             int               `json:"paused"`
	// Registry is true when the worker registry was read: the queues'
	// worker counts are known.
	Registry bool `json:"registry"`
}

// snapshot returns the overview, read at most once per cache period
// whatever the number of open pages and scrapes; mutations clear it.
func (h *handler) snapshot(r *http.Request) (*Overview, error) {
	h.cacheMu.Lock()
	defer h.cacheMu.Unlock()
	if h.cached != nil && time.Since(h.cachedAt) < h.cacheFor {
		return h.cached, nil
	}
	ov, err := h.readSnapshot(r)
	if err != nil {
		return nil, err
	}
	h.cached, h.cachedAt = ov, time.Now()
	return ov, nil
}

// invalidate drops the cached overview after a mutation.
func (h *handler) invalidate() {
	h.cacheMu.Lock()
	h.cached = nil
	h.cacheMu.Unlock()
}

// readSnapshot reads the overview: queue stats merged with queue activity.
func (h *handler) readSnapshot(r *http.Request) (*Overview, error) {
	ctx := r.Context()
	st, err := h.op.QueueStats(ctx)
	if err != nil {
		return nil, err
	}
	acts, err := h.op.QueueActivity(ctx)
	if err != nil {
		return nil, err
	}
	type key struct {
		typ  string
		prio framework.Priority
	}
	act := make(map[key]inspect.QueueActivity, len(acts))
	for _, a := range acts {
		act[key{a.Type, a.Priority}] = a
	}
	ov := &Overview{Taken: st.Taken.UTC(), Dead: st.Dead, Scheduled: st.Scheduled,
		ScheduledTruncated: st.ScheduledTruncated, Cron: st.Cron, Queues: []Queue{}}
	for _, n := range st.Dead {
		ov.DeadTotal += n
	}
	for _, q := range st.Queues {
		out := Queue{Type: q.Type, Priority: q.Priority.String(), Waiting: uint64(q.Pending), InFlight: q.InFlight,
			Redelivered: q.Redelivered, Scheduled: q.Scheduled, Paused: q.Paused, PausedUntil: q.PausedUntil.UTC()}
		if a, ok := act[key{q.Type, q.Priority}]; ok {
			out.Consumer, out.Delivered, out.Acked, out.Pulling = a.Consumer, a.Delivered, a.Acked, a.Pulling
			out.LastDelivery = a.LastDelivery.UTC()
			if !a.OldestWaiting.IsZero() {
				out.OldestWaiting = a.OldestWaiting.UTC()
				out.OldestWaitingSeconds = max(st.Taken.Sub(a.OldestWaiting).Seconds(), 0)
			}
		}
		if out.Paused {
			ov.Paused++
		}
		ov.Queues = append(ov.Queues, out)
	}
	h.countWorkers(r, ov) // api_workers.go
	return ov, nil
}

func (h *handler) config(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"title":            h.opts.Title,
		"read_only":        h.opts.ReadOnly,
		"refresh_ms":       h.opts.RefreshInterval.Milliseconds(),
		"prefix":           h.fc.Names().Prefix(),
		"request_header":   RequestHeader,
		"priorities":       priorityNames(),
		"dead_reasons":     []dlq.Reason{dlq.ReasonPermanent, dlq.ReasonDecode, dlq.ReasonMaxDeliveries},
		"workflow_status":  []workflow.RunStatus{workflow.RunRunning, workflow.RunCompensating, workflow.RunCompleted, workflow.RunFailed, workflow.RunCancelled},
		"max_page":         dlq.MaxPageLimit,
		"default_page":     dlq.DefaultPageLimit,
		"scheduled_limit":  inspect.DefaultScheduledLimit,
		"workflow_limit":   workflow.DefaultListLimit,
		"metrics_endpoint": "metrics",
	})
}

func priorityNames() []string {
	var out []string
	for _, p := range streams.Priorities {
		out = append(out, p.String())
	}
	return out
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := h.snapshot(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

// queryInt reads a non-negative integer query parameter.
func queryInt(r *http.Request, name string) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: not a non-negative integer", errBadRequest, name)
	}
	return n, nil
}

func (h *handler) scheduled(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	tasks, truncated, err := h.op.ScheduledTasks(r.Context(), inspect.ScheduledFilter{
		Type: r.URL.Query().Get("type"), Limit: int(min(limit, inspect.MaxScheduledScan)),
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if tasks == nil {
		tasks = []framework.TaskRecord{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": tasks, "truncated": truncated})
}

func (h *handler) task(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := streams.ValidateID(id); err != nil {
		h.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	rec, err := h.ins.GetTask(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (h *handler) cancelTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.ins.CancelTask(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": id})
}
