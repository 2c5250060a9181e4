package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// The JSON API's operations endpoints: cron schedules, circuit breakers,
// pausing and resuming queues, workflow runs.

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
	list, err := schedule.New(h.fc).List(r.Context())
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
	recs, err := h.op.BreakerRecords(r.Context())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Breaker, 0, len(recs))
	for _, b := range recs {
		out = append(out, Breaker{Dependency: b.Dependency, State: b.State.String(), Since: b.Since.UTC(), Until: b.Until.UTC(),
			Probing: b.State == breaker.StateOpen && !b.Until.After(now), Worker: b.Worker, Failures: b.Failures,
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
		until = time.Now().Add(time.Duration(min(body.Seconds, int64(inspect.PauseForever/time.Second))) * time.Second)
	}
	if err := h.op.PauseQueue(r.Context(), typ, p, until); err != nil {
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
	if err := h.op.ResumeQueue(r.Context(), typ, p); err != nil {
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
