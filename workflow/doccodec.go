package workflow

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jetflow-io/jetflow/internal/jsonw"
)

// The run document's codec (decision 032). Every step reads its run's
// document and writes it back, and encoding/json's reflection was a sixth
// of a step's CPU. encodeRun writes the bytes json.Marshal would, without
// reflection; the document memo skips decoding a document whose bytes this
// process has just written or read.

// encodeRun returns the JSON encoding of r: byte for byte what json.Marshal
// returns (the tests hold it to that), at a fraction of its cost. verbatim
// reports that every raw JSON value of r (input, outputs) went into it
// unchanged, so that decoding the result gives back r exactly.
func encodeRun(r *Run) (data []byte, verbatim bool, err error) {
	if !encodableTimes(r) {
		// Outside what RFC 3339 can write: let encoding/json report it.
		data, err = json.Marshal(r)
		return data, false, err
	}
	e := runEncoder{b: make([]byte, 0, 256+len(r.Input)+len(r.Steps)*160), verbatim: true}
	e.run(r)
	if e.invalid {
		// A raw value that is not JSON: encoding/json says which.
		data, err = json.Marshal(r)
		return data, false, err
	}
	return e.b, e.verbatim, nil
}

// encodableTimes reports whether every time of r is one time.Time's
// MarshalJSON accepts: a year in [0, 9999] and a zone offset under a day.
func encodableTimes(r *Run) bool {
	ok := func(t time.Time) bool {
		if y := t.Year(); y < 0 || y > 9999 {
			return false
		}
		_, off := t.Zone()
		return off > -24*3600 && off < 24*3600
	}
	if !ok(r.CreatedAt) || !ok(r.UpdatedAt) || !ok(r.EndedAt) {
		return false
	}
	for _, st := range r.Steps {
		if st != nil && (!ok(st.EnqueuedAt) || !ok(st.StartedAt) || !ok(st.EndedAt) || !ok(st.CompensatedAt) || !ok(st.WakeAt) || !ok(st.Deadline)) {
			return false
		}
	}
	return true
}

type runEncoder struct {
	b        []byte
	verbatim bool
	invalid  bool // a raw value did not compact
}

// run writes r with Run's JSON tags, in their order.
func (e *runEncoder) run(r *Run) {
	e.b = append(e.b, `{"id":`...)
	e.str(r.ID)
	e.b = append(e.b, `,"workflow":`...)
	e.str(r.Workflow)
	e.b = append(e.b, `,"status":`...)
	e.str(string(r.Status))
	e.optRaw(`,"input":`, r.Input)
	e.optStr(`,"error":`, r.Error)
	if r.CompensateOnCancel {
		e.b = append(e.b, `,"compensate_on_cancel":true`...)
	}
	if p := r.Parent; p != nil {
		e.b = append(e.b, `,"parent":{"run":`...)
		e.str(p.Run)
		e.b = append(e.b, `,"workflow":`...)
		e.str(p.Workflow)
		e.b = append(e.b, `,"step":`...)
		e.str(p.Step)
		e.b = append(e.b, `,"priority":`...)
		e.str(p.Priority)
		e.b = append(e.b, '}')
	}
	e.time(`,"created_at":`, r.CreatedAt, false)
	e.time(`,"updated_at":`, r.UpdatedAt, false)
	e.time(`,"ended_at":`, r.EndedAt, true)
	e.b = append(e.b, `,"steps":`...)
	if r.Steps == nil {
		e.b = append(e.b, "null"...)
	} else {
		e.b = append(e.b, '[')
		for i, st := range r.Steps {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.step(st)
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, '}')
}

// step writes st with StepStatus's JSON tags, in their order.
func (e *runEncoder) step(st *StepStatus) {
	if st == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, `{"name":`...)
	e.str(st.Name)
	if st.After != nil && len(st.After) == 0 {
		e.verbatim = false // omitted: decodes as nil
	}
	if len(st.After) > 0 {
		e.b = append(e.b, `,"after":[`...)
		for i, a := range st.After {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.str(a)
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, `,"state":`...)
	e.str(string(st.State))
	if st.Compensable {
		e.b = append(e.b, `,"compensable":true`...)
	}
	if st.Chained {
		e.b = append(e.b, `,"chained":true`...)
	}
	e.int(`,"attempts":`, st.Attempts)
	e.optRaw(`,"output":`, st.Output)
	e.optStr(`,"error":`, st.Error)
	e.int(`,"completion":`, st.Completion)
	e.int(`,"compensation_attempts":`, st.CompensationAttempts)
	e.optStr(`,"compensation_error":`, st.CompensationError)
	e.time(`,"enqueued_at":`, st.EnqueuedAt, true)
	e.time(`,"started_at":`, st.StartedAt, true)
	e.time(`,"ended_at":`, st.EndedAt, true)
	e.time(`,"compensated_at":`, st.CompensatedAt, true)
	e.time(`,"wake_at":`, st.WakeAt, true)
	e.optStr(`,"event_key":`, st.EventKey)
	e.time(`,"deadline":`, st.Deadline, true)
	if st.TimedOut {
		e.b = append(e.b, `,"timed_out":true`...)
	}
	e.int(`,"items":`, st.Items)
	e.int(`,"items_done":`, st.ItemsDone)
	e.int(`,"items_failed":`, st.ItemsFailed)
	e.optStr(`,"child_run":`, st.ChildRun)
	e.b = append(e.b, '}')
}

// optRaw writes an omitempty raw value field. A value that is empty but
// not nil is omitted and decodes as nil, so it clears verbatim.
func (e *runEncoder) optRaw(key string, m json.RawMessage) {
	if len(m) == 0 {
		if m != nil {
			e.verbatim = false
		}
		return
	}
	e.b = append(e.b, key...)
	e.raw(m)
}

// optStr writes an omitempty string field.
func (e *runEncoder) optStr(key, s string) {
	if s != "" {
		e.b = append(e.b, key...)
		e.str(s)
	}
}

// str writes a JSON string; invalid UTF-8 does not decode back the same.
func (e *runEncoder) str(s string) {
	if !utf8.ValidString(s) {
		e.verbatim = false
	}
	e.b = jsonw.String(e.b, s)
}

// int writes an omitempty int field.
func (e *runEncoder) int(key string, v int) {
	if v != 0 {
		e.b = append(e.b, key...)
		e.b = strconv.AppendInt(e.b, int64(v), 10)
	}
}

// time writes a time field as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds); omitZero: the field's omitzero tag.
func (e *runEncoder) time(key string, t time.Time, omitZero bool) {
	if omitZero && t.IsZero() {
		return
	}
	if t.Location() != time.UTC {
		e.verbatim = false // decodes with a fixed zone, not t's location
	}
	e.b = append(e.b, key...)
	e.b = jsonw.Time(e.b, t)
}

// raw writes a json.RawMessage as json.Marshal does: compacted, with <, >,
// &, U+2028 and U+2029 escaped. A value that is not JSON marks the encoding
// invalid; one written differently from m clears verbatim.
func (e *runEncoder) raw(m json.RawMessage) {
	c := []byte(m)
	if bytes.ContainsAny(m, " \t\n\r") || !json.Valid(m) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			e.invalid = true
			return
		}
		c = buf.Bytes()
	}
	n := len(e.b)
	e.b = jsonw.Raw(e.b, c)
	if !bytes.Equal(e.b[n:], m) {
		e.verbatim = false
	}
}

// cloneRun returns a copy of r that shares no memory with it. Its steps,
// their dependencies and the raw values share three allocations.
func cloneRun(r *Run) *Run {
	c := *r
	if r.Parent != nil {
		p := *r.Parent
		c.Parent = &p
	}
	if r.Steps == nil {
		c.Input = bytes.Clone(r.Input)
		return &c
	}
	raw, after := len(r.Input), 0
	for _, st := range r.Steps {
		if st != nil {
			raw += len(st.Output)
			after += len(st.After)
		}
	}
	arena := make([]byte, 0, raw)
	names := make([]string, 0, after)
	clip := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		arena = append(arena, b...)
		return arena[len(arena)-len(b) : len(arena) : len(arena)]
	}
	c.Input = clip(r.Input)
	steps := make([]StepStatus, len(r.Steps))
	c.Steps = make([]*StepStatus, len(r.Steps))
	for i, st := range r.Steps {
		if st == nil {
			continue
		}
		steps[i] = *st
		cs := &steps[i]
		cs.Output = clip(st.Output)
		if st.After != nil {
			names = append(names, st.After...)
			cs.After = names[len(names)-len(st.After) : len(names) : len(names)]
		}
		c.Steps[i] = cs
	}
	return &c
}

// Limits of the document memo: the number of runs, the bytes of their
// encoded documents, and the largest document it keeps.
const (
	memoRuns     = 4096
	memoBytes    = 8 << 20
	memoMaxBytes = 64 << 10
	// memoMinAge is how long the memo holds a run before a newer one may
	// take its place.
	memoMinAge = 30 * time.Second
)

// docMemo remembers, for the runs whose documents this process wrote or
// read last, the document's bytes and their decoded form. A document read
// again is decoded only when its bytes differ from the remembered ones, so
// that a hit gives exactly what decoding would: the memo never decides
// which document is current (the stream does), only how its bytes decode.
// It forgets the oldest runs first (see remember), and the runs whose
// documents are final when this process writes them. It is safe for concurrent use.
type docMemo struct {
	mu      sync.Mutex
	entries map[string]memoEntry
	order   []string // the runs in entries, oldest first
	bytes   int
	hits    atomic.Int64     // recalls answered, for tests
	clock   func() time.Time // time.Now when nil; set by tests
}

type memoEntry struct {
	data  []byte
	run   *Run      // decoded from data, Revision unset; never handed out
	added time.Time // when the run entered the memo
}

// docs is the process's document memo: documents with equal bytes decode
// alike in every store of the process.
var docs = &docMemo{entries: make(map[string]memoEntry)}

// recall returns a copy of the run that data, the document of run id,
// decodes to, or nil when the memo does not hold those bytes.
func (m *docMemo) recall(id string, data []byte) *Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok || !bytes.Equal(e.data, data) {
		return nil
	}
	m.hits.Add(1)
	return cloneRun(e.run)
}

// remember records that data, the document of run id, decodes to r. It
// keeps a copy of r; data must not change afterwards.
//
// A full memo makes room by forgetting its oldest runs, but only those it
// has held for memoMinAge; when the oldest is younger, the new run is not
// admitted. A worker working through a backlog wider than the memo then
// keeps the runs it will reach next, instead of each miss evicting the run
// after it.
func (m *docMemo) remember(id string, data []byte, r *Run) {
	if len(data) > memoMaxBytes {
		m.forget(id)
		return
	}
	c := cloneRun(r)
	c.Revision = 0
	now := time.Now()
	if m.clock != nil {
		now = m.clock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, held := m.entries[id]; held {
		// Its place in order does not change.
		m.bytes += len(data) - len(old.data)
		m.entries[id] = memoEntry{data: data, run: c, added: old.added}
		for m.bytes > memoBytes && m.evictOldest(now) {
		}
		if m.bytes > memoBytes {
			m.forgetLocked(id)
		}
		return
	}
	full := func() bool { return len(m.entries)+1 > memoRuns || m.bytes+len(data) > memoBytes }
	for full() && m.evictOldest(now) {
	}
	if full() {
		return
	}
	m.order = append(m.order, id)
	m.entries[id] = memoEntry{data: data, run: c, added: now}
	m.bytes += len(data)
}

// evictOldest forgets the oldest run when the memo has held it for
// memoMinAge, and reports whether it did. m.mu is held.
func (m *docMemo) evictOldest(now time.Time) bool {
	if len(m.order) == 0 {
		return false
	}
	oldest := m.order[0]
	e := m.entries[oldest]
	if now.Sub(e.added) < memoMinAge {
		return false
	}
	m.order = m.order[1:]
	m.bytes -= len(e.data)
	delete(m.entries, oldest)
	return true
}

// forget drops run id from the memo.
func (m *docMemo) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(id)
}

// forgetLocked is forget with m.mu held.
func (m *docMemo) forgetLocked(id string) {
	if old, ok := m.entries[id]; ok {
		m.bytes -= len(old.data)
		delete(m.entries, id)
		m.order = slices.DeleteFunc(m.order, func(s string) bool { return s == id })
	}
}
