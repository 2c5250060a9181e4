package workflow

import (
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
// ([WithRetention]) expires.
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
	filter := c.names.RunSubject(">")
	prefix := c.names.RunSubject("")
	var seq uint64 = 1
	// The stream keeps one revision per run; should it hold more (a
	// per-subject limit raised by hand), the last one of a run wins.
	at := make(map[string]int)
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
		if i, ok := at[id]; ok {
			runs[i] = nil // superseded
		}
		if (f.Workflow != "" && r.Workflow != f.Workflow) || (f.Status != "" && r.Status != f.Status) {
			delete(at, id)
			continue
		}
		at[id] = len(runs)
		runs = append(runs, r)
	}
	runs = slices.DeleteFunc(runs, func(r *Run) bool { return r == nil })
	// Stream order is update order: newest last.
	for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
		runs[i], runs[j] = runs[j], runs[i]
	}
	if len(runs) > limit {
		runs, truncated = runs[:limit], true
	}
	return runs, truncated, nil
}
