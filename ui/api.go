package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetflow-io/jetflow/framework"
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
	st, err := h.ins.QueueStats(ctx)
	if err != nil {
		return nil, err
	}
	acts, err := h.ins.QueueActivity(ctx)
	if err != nil {
		return nil, err
	}
	type key struct {
		typ  string
		prio framework.Priority
	}
	act := make(map[key]framework.QueueActivity, len(acts))
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
		"dead_reasons":     []framework.DeadLetterReason{framework.DeadLetterPermanent, framework.DeadLetterDecode, framework.DeadLetterMaxDeliveries},
		"workflow_status":  []workflow.RunStatus{workflow.RunRunning, workflow.RunCompensating, workflow.RunCompleted, workflow.RunFailed, workflow.RunCancelled},
		"max_page":         framework.MaxDeadLetterPageLimit,
		"default_page":     framework.DefaultDeadLetterPageLimit,
		"scheduled_limit":  framework.DefaultScheduledLimit,
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
	tasks, truncated, err := h.ins.ScheduledTasks(r.Context(), framework.ScheduledFilter{
		Type: r.URL.Query().Get("type"), Limit: int(min(limit, framework.MaxScheduledScan)),
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

// DeadLetter is a dead-letter record as the API shows it.
type DeadLetter struct {
	Seq              uint64            `json:"seq"`
	Time             time.Time         `json:"time"`
	TaskID           string            `json:"task_id"`
	Type             string            `json:"type"`
	Priority         string            `json:"priority"`
	Reason           string            `json:"reason"`
	Deliveries       int               `json:"deliveries"`
	LastError        string            `json:"last_error,omitempty"`
	LastErrorAttempt int               `json:"last_error_attempt,omitempty"`
	FirstFailure     time.Time         `json:"first_failure,omitzero"`
	LastFailure      time.Time         `json:"last_failure,omitzero"`
	DeadCount        int               `json:"dead_count,omitempty"`
	RoutedBy         string            `json:"routed_by,omitempty"`
	OriginalSubject  string            `json:"original_subject,omitempty"`
	OriginalSeq      uint64            `json:"original_seq,omitempty"`
	PayloadOmitted   bool              `json:"payload_omitted,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	// Payload is the payload as text when it is valid UTF-8; otherwise
	// PayloadBase64 holds it.
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
	PayloadBytes  int    `json:"payload_bytes"`
}

func deadLetterOut(d *framework.DeadLetter, full bool) DeadLetter {
	out := DeadLetter{Seq: d.Seq, Time: d.Time.UTC(), TaskID: d.TaskID, Type: d.Type, Priority: d.Priority.String(),
		Reason: string(d.Reason), Deliveries: d.Deliveries, LastError: d.LastError, LastErrorAttempt: d.LastErrorAttempt,
		FirstFailure: d.FirstFailure.UTC(), LastFailure: d.LastFailure.UTC(), DeadCount: d.DeadCount, RoutedBy: d.RoutedBy,
		OriginalSubject: d.OriginalSubject, OriginalSeq: d.OriginalSeq, PayloadOmitted: d.PayloadOmitted,
		PayloadBytes: len(d.Payload)}
	if !full {
		return out
	}
	out.Headers = make(map[string]string, len(d.Headers))
	for k, vs := range d.Headers {
		out.Headers[k] = strings.Join(vs, ", ")
	}
	if utf8.Valid(d.Payload) {
		out.Payload = string(d.Payload)
	} else {
		out.PayloadBase64 = d.Payload
	}
	return out
}

// filterFrom reads a dead-letter filter from query parameters or a JSON
// body's fields: type, reason, contains, from, to (RFC 3339).
type filterFields struct {
	Type     string `json:"type"`
	Reason   string `json:"reason"`
	Contains string `json:"contains"`
	From     string `json:"from"`
	To       string `json:"to"`
	// All must be true to act on every record (an empty filter).
	All bool `json:"all"`
}

func (f filterFields) filter() (framework.DeadLetterFilter, error) {
	out := framework.DeadLetterFilter{Type: f.Type, Reason: framework.DeadLetterReason(f.Reason), ErrorContains: f.Contains}
	for _, t := range []struct {
		s   string
		dst *time.Time
	}{{f.From, &out.From}, {f.To, &out.To}} {
		if t.s == "" {
			continue
		}
		ts, err := time.Parse(time.RFC3339, t.s)
		if err != nil {
			return out, fmt.Errorf("%w: time %q is not RFC 3339", errBadRequest, t.s)
		}
		*t.dst = ts
	}
	return out, nil
}

func (f filterFields) empty() bool {
	return f.Type == "" && f.Reason == "" && f.Contains == "" && f.From == "" && f.To == ""
}

func (h *handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ff := filterFields{Type: q.Get("type"), Reason: q.Get("reason"), Contains: q.Get("contains"), From: q.Get("from"), To: q.Get("to")}
	f, err := ff.filter()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	after, err := queryInt(r, "after")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page := framework.DeadLetterPage{After: after, Limit: int(min(limit, framework.MaxDeadLetterPageLimit))}
	list, next, err := h.fc.DeadLetters().List(r.Context(), f, page)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]DeadLetter, 0, len(list))
	for i := range list {
		out = append(out, deadLetterOut(&list[i], false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out, "next": next})
}

func pathSeq(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: bad sequence %q", errBadRequest, r.PathValue("seq"))
	}
	return seq, nil
}

func (h *handler) deadLetter(w http.ResponseWriter, r *http.Request) {
	seq, err := pathSeq(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d, err := h.fc.DeadLetters().Get(r.Context(), seq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, deadLetterOut(d, true))
}

func (h *handler) replayOne(w http.ResponseWriter, r *http.Request) {
	seq, err := pathSeq(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	info, err := h.fc.DeadLetters().Replay(r.Context(), seq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": info.ID, "type": info.Type, "duplicate": info.Duplicate})
}

// maxBody bounds request bodies.
const maxBody = 64 << 10

func readFilter(r *http.Request) (filterFields, framework.DeadLetterFilter, error) {
	var ff filterFields
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return ff, framework.DeadLetterFilter{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &ff); err != nil {
			return ff, framework.DeadLetterFilter{}, fmt.Errorf("%w: body: %w", errBadRequest, err)
		}
	}
	if ff.empty() && !ff.All {
		return ff, framework.DeadLetterFilter{}, fmt.Errorf("%w: an empty filter selects every record: send \"all\": true", errBadRequest)
	}
	f, err := ff.filter()
	return ff, f, err
}

func (h *handler) replayFilter(w http.ResponseWriter, r *http.Request) {
	_, f, err := readFilter(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	n, err := h.fc.DeadLetters().ReplayFilter(r.Context(), f, nil)
	if err != nil {
		h.opts.Logger.Warn("jetflow dashboard replay incomplete", "replayed", n, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"replayed": n, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": n})
}

func (h *handler) purge(w http.ResponseWriter, r *http.Request) {
	_, f, err := readFilter(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	n, err := h.fc.DeadLetters().Purge(r.Context(), f)
	if err != nil {
		h.opts.Logger.Warn("jetflow dashboard purge incomplete", "purged", n, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"purged": n, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n})
}

// Schedule is a repeating schedule as the API shows it.
type Schedule struct {
	Name     string            `json:"name"`
	Spec     string            `json:"spec"`
	TimeZone string            `json:"time_zone,omitempty"`
	Type     string            `json:"type"`
	Priority string            `json:"priority"`
	Next     time.Time         `json:"next,omitzero"`
	Stored   time.Time         `json:"stored"`
	Payload  string            `json:"payload,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
}

func (h *handler) cron(w http.ResponseWriter, r *http.Request) {
	list, err := h.fc.Schedules().List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]Schedule, 0, len(list))
	for _, s := range list {
		sc := Schedule{Name: s.Name, Spec: s.Spec, TimeZone: s.TimeZone, Type: s.Type, Priority: s.Priority.String(),
			Next: s.Next.UTC(), Stored: s.Stored.UTC(), Headers: s.Headers}
		if utf8.Valid(s.Payload) {
			sc.Payload = string(s.Payload)
		}
		out = append(out, sc)
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}

// Breaker is a dependency's latest breaker record as the API shows it.
type Breaker struct {
	Dependency string    `json:"dependency"`
	State      string    `json:"state"`
	Since      time.Time `json:"since"`
	Until      time.Time `json:"until,omitzero"`
	// Probing is true for an open record whose Until has passed: workers
	// let probe calls through again.
	Probing   bool     `json:"probing"`
	Worker    string   `json:"worker,omitempty"`
	Failures  uint32   `json:"failures,omitempty"`
	TaskTypes []string `json:"task_types,omitempty"`
	Consumers []string `json:"consumers,omitempty"`
}

func (h *handler) breakerList(r *http.Request) ([]Breaker, error) {
	recs, err := h.ins.BreakerRecords(r.Context())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Breaker, 0, len(recs))
	for _, b := range recs {
		out = append(out, Breaker{Dependency: b.Dependency, State: b.State.String(), Since: b.Since.UTC(), Until: b.Until.UTC(),
			Probing: b.State == framework.BreakerOpen && !b.Until.After(now), Worker: b.Worker, Failures: b.Failures,
			TaskTypes: b.TaskTypes, Consumers: b.Consumers})
	}
	return out, nil
}

func (h *handler) breakers(w http.ResponseWriter, r *http.Request) {
	list, err := h.breakerList(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"breakers": list})
}

func pathQueue(r *http.Request) (string, framework.Priority, error) {
	typ := r.PathValue("type")
	if err := streams.ValidateTaskType(typ); err != nil {
		return "", 0, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	p, err := streams.ParsePriority(r.PathValue("priority"))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return typ, p, nil
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	typ, p, err := pathQueue(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var body struct {
		// Seconds bounds the pause; 0 pauses until resumed.
		Seconds int64 `json:"seconds"`
	}
	if data, _ := io.ReadAll(io.LimitReader(r.Body, maxBody)); len(data) > 0 {
		if err := json.Unmarshal(data, &body); err != nil || body.Seconds < 0 {
			h.fail(w, r, fmt.Errorf("%w: body wants {\"seconds\": n >= 0}", errBadRequest))
			return
		}
	}
	var until time.Time
	if body.Seconds > 0 {
		until = time.Now().Add(time.Duration(min(body.Seconds, int64(framework.PauseForever/time.Second))) * time.Second)
	}
	if err := h.ins.PauseQueue(r.Context(), typ, p, until); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": typ + "/" + p.String()})
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	typ, p, err := pathQueue(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.ins.ResumeQueue(r.Context(), typ, p); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"resumed": typ + "/" + p.String()})
}

// RunSummary is a workflow run in the list of GET api/workflows.
type RunSummary struct {
	ID        string         `json:"id"`
	Workflow  string         `json:"workflow"`
	Status    string         `json:"status"`
	Error     string         `json:"error,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	EndedAt   time.Time      `json:"ended_at,omitzero"`
	Steps     int            `json:"steps"`
	States    map[string]int `json:"states"`
}

func (h *handler) workflows(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	runs, truncated, err := h.wf.List(r.Context(), workflow.RunFilter{
		Workflow: q.Get("workflow"), Status: workflow.RunStatus(q.Get("status")), Limit: int(min(limit, workflow.MaxListScan)),
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]RunSummary, 0, len(runs))
	for _, run := range runs {
		s := RunSummary{ID: run.ID, Workflow: run.Workflow, Status: string(run.Status), Error: run.Error,
			CreatedAt: run.CreatedAt.UTC(), UpdatedAt: run.UpdatedAt.UTC(), EndedAt: run.EndedAt.UTC(),
			Steps: len(run.Steps), States: map[string]int{}}
		for _, st := range run.Steps {
			s.States[string(st.State)]++
		}
		out = append(out, s)
	}
	names := make([]string, 0)
	for _, s := range out {
		if !slices.Contains(names, s.Workflow) {
			names = append(names, s.Workflow)
		}
	}
	slices.Sort(names)
	writeJSON(w, http.StatusOK, map[string]any{"runs": out, "truncated": truncated, "workflows": names})
}

func (h *handler) workflowRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > workflow.MaxRunIDLen || streams.ValidateID(id) != nil {
		h.fail(w, r, fmt.Errorf("%w: bad run ID", errBadRequest))
		return
	}
	run, err := h.wf.Status(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}
