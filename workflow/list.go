package workflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// RunFilter selects runs for [Client.List]. The zero value selects all.
type RunFilter struct {
	// Workflow selects runs of one workflow.
	Workflow string
	// Status selects runs in one status.
	Status RunStatus
	// Limit is the most runs returned, the most recently updated first.
	// Default [DefaultListLimit], at most [MaxListScan].
	Limit int
}

// Limits of [Client.List].
const (
	DefaultListLimit = 50
	// MaxListScan bounds the run documents one List reads.
	MaxListScan = 10_000
)

// List returns the runs stored in the run stream that match f, the most
// recently updated first. The stream keeps one document per run (a new
// version replaces the previous one), so List reads one message per run, in
// stream order, at most
// [MaxListScan] of them; truncated is true when it stopped there or when
// more than f.Limit runs matched. Documents that do not decode are skipped.
// Finished runs stay listed until their workflow's retention
// ([WithRetention]) expires. It holds at most twice f.Limit decoded
// documents at a time, whatever the size of the documents it scans.
func (c *Client) List(ctx context.Context, f RunFilter) (runs []*Run, truncated bool, err error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListScan)
	st, err := c.store.runStream(ctx)
	if err != nil {
		return nil, false, err
	}
	// Run IDs are one token: "*" leaves out the item subjects of fan-outs
	// ("<run>.fan.…", "<run>.in.…", "<run>.out.…").
	filter := c.names.RunSubject("*")
	prefix := c.names.RunSubject("")
	var seq uint64 = 1
	// Every matching run by ID, with the sequence of its last revision. The
	// stream keeps one revision per run, but a run updated during the scan
	// (or a per-subject limit raised by hand) shows more: the last one wins.
	// Only the newest runs keep their document (see listed.trim); a run
	// that ends up among the newest without it is read again at the end.
	l := listed{at: make(map[string]*listEntry), limit: limit}
	for n := 0; ; n++ {
		if n == MaxListScan {
			truncated = true
			break
		}
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("workflow: list runs: %w", err)
		}
		seq = m.Sequence + 1
		id := strings.TrimPrefix(m.Subject, prefix)
		r, err := decodeRun(id, m.Data, m.Sequence)
		if err != nil || r.ID != id {
			continue
		}
		l.add(id, m.Sequence, r, f.matches(r))
	}
	newest := l.newest()
	if len(newest) > limit {
		newest, truncated = newest[:limit], true
	}
	runs = make([]*Run, 0, len(newest))
	for _, e := range newest {
		r := e.run
		if r == nil {
			m, err := st.GetMsg(ctx, e.seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // replaced since: the newer revision was past the scan
			}
			if err != nil {
				return nil, false, fmt.Errorf("workflow: list runs: %w", err)
			}
			if r, err = decodeRun(e.id, m.Data, m.Sequence); err != nil {
				continue
			}
		}
		runs = append(runs, r)
	}
	return runs, truncated, nil
}

// matches reports whether r passes f's workflow and status filters.
func (f RunFilter) matches(r *Run) bool {
	return (f.Workflow == "" || r.Workflow == f.Workflow) && (f.Status == "" || r.Status == f.Status)
}

// listed collects the matching runs of a List scan.
type listed struct {
	at    map[string]*listEntry
	limit int
	held  int // entries whose run is set
	peak  int // the most held at once (for tests)
}

// listEntry is a run's last revision seen by a scan; run is nil once trim
// dropped its document.
type listEntry struct {
	id  string
	seq uint64
	run *Run
}

// add records revision seq of run id, decoded as r. A revision that does
// not match the filter removes the run: its last revision decides.
func (l *listed) add(id string, seq uint64, r *Run, match bool) {
	if e := l.at[id]; e != nil && e.run != nil {
		l.held--
	}
	if !match {
		delete(l.at, id)
		return
	}
	l.at[id] = &listEntry{id: id, seq: seq, run: r}
	l.held++
	l.peak = max(l.peak, l.held)
	if l.held >= 2*l.limit {
		l.trim()
	}
}

// trim keeps the documents of the limit newest runs only. A run whose
// document it drops can still be among the newest at the end (when newer
// ones are replaced by revisions that do not match): List reads it again.
func (l *listed) trim() {
	held := make([]*listEntry, 0, l.held)
	for _, e := range l.at {
		if e.run != nil {
			held = append(held, e)
		}
	}
	slices.SortFunc(held, func(a, b *listEntry) int { return cmp.Compare(b.seq, a.seq) })
	for _, e := range held[l.limit:] {
		e.run = nil
	}
	l.held = l.limit
}

// newest returns every matching run, the last updated first.
func (l *listed) newest() []*listEntry {
	out := make([]*listEntry, 0, len(l.at))
	for _, e := range l.at {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *listEntry) int { return cmp.Compare(b.seq, a.seq) })
	return out
}
