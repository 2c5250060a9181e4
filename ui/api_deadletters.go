package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetflow-io/jetflow/dlq"
)

// The JSON API's dead-letter endpoints: list, show, replay one or by
// filter, purge.

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

func deadLetterOut(d *dlq.Record, full bool) DeadLetter {
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

func (f filterFields) filter() (dlq.Filter, error) {
	out := dlq.Filter{Type: f.Type, Reason: dlq.Reason(f.Reason), ErrorContains: f.Contains}
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
	page := dlq.Page{After: after, Limit: int(min(limit, dlq.MaxPageLimit))}
	list, next, err := dlq.New(h.fc).List(r.Context(), f, page)
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
	d, err := dlq.New(h.fc).Get(r.Context(), seq)
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
	info, err := dlq.New(h.fc).Replay(r.Context(), seq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": info.ID, "type": info.Type, "duplicate": info.Duplicate})
}

// maxBody bounds request bodies.
const maxBody = 64 << 10

func readFilter(r *http.Request) (filterFields, dlq.Filter, error) {
	var ff filterFields
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return ff, dlq.Filter{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &ff); err != nil {
			return ff, dlq.Filter{}, fmt.Errorf("%w: body: %w", errBadRequest, err)
		}
	}
	if ff.empty() && !ff.All {
		return ff, dlq.Filter{}, fmt.Errorf("%w: an empty filter selects every record: send \"all\": true", errBadRequest)
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
	n, err := dlq.New(h.fc).ReplayFilter(r.Context(), f, nil)
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
	n, err := dlq.New(h.fc).Purge(r.Context(), f)
	if err != nil {
		h.opts.Logger.Warn("jetflow dashboard purge incomplete", "purged", n, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"purged": n, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n})
}
