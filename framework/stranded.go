package framework

import (
	"context"
	"time"

	"github.com/jetflow-io/jetflow/internal/stranded"
)

// A worker looks for tasks of its own types that wait on subjects no
// consumer reads: ordered tasks ([Ordered]) of a type registered without
// [WithOrdering], or tasks at a priority that no worker serves
// ([WithServedPriorities]). The producer cannot know the workers, so the
// enqueue succeeds; such tasks never run and never fail. The worker checks
// at Start and then every [Timings].StrandedCheck interval, logs each stranded
// subject once at Warn, and reports them in [Worker.Stranded] (package
// health puts them in its report).

// StrandedSubject is a subject of the task stream that holds tasks of one of
// the worker's types but matches no consumer's filter: its tasks wait until
// a worker reads the subject or an operator moves them (dlq.Queue.MoveStranded).
type StrandedSubject struct {
	// Type is the task type.
	Type string `json:"type"`
	// Subject is the subject the tasks wait on.
	Subject string `json:"subject"`
	// Tasks is how many tasks wait on it.
	Tasks uint64 `json:"tasks"`
	// Oldest is when the oldest of them was stored.
	Oldest time.Time `json:"oldest,omitzero"`
	// Why says why no consumer reads the subject and what to change.
	Why string `json:"why"`
}

// Stranded returns what the latest check found: the subjects holding tasks
// of the worker's types that no consumer reads, oldest first. It is nil
// before the first check and when nothing is stranded. Safe to call at any
// time from any goroutine.
func (w *Worker) Stranded() []StrandedSubject {
	return stranded.FoundAs(&w.strandCheck, func(s stranded.Subject) StrandedSubject { return StrandedSubject(s) })
}

// startStrandedCheck runs the first check (internal/stranded), then, in a
// service goroutine, one every interval until svcCtx ends.
func (w *Worker) startStrandedCheck(startCtx, svcCtx context.Context) {
	every := w.opts.strandedCheck
	if every == 0 {
		return
	}
	c := &w.strandCheck
	served := func(typ string) (stranded.Served, bool) {
		tt := w.types[typ]
		if tt == nil {
			return stranded.Served{}, false
		}
		o := tt.cfg.ordering
		return stranded.Served{Priorities: tt.cfg.priorities, Ordered: o != nil,
			OldOrdered: o != nil && o.Lanes == 0 && w.in.Partitions().Layout().OldOrderedSubjects}, true
	}
	*c = stranded.Checker{JS: w.js, NC: w.nc, Streams: w.partitions, Missing: ErrTopologyMissing,
		Unread: func(subject string) (string, string) { return stranded.Unread(w.names, subject, served) },
		Before: w.in.CheckPartitions, // partitions added (internal/intake)
	}
	c.LogTo(w.log)
	c.Check(startCtx)
	w.services.Go(func() { c.Loop(svcCtx, every) })
}
