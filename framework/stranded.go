package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/streams"
)

// A worker looks for tasks of its own types that wait on subjects no
// consumer reads: ordered tasks ([Ordered]) of a type registered without
// [WithOrdering], or tasks at a priority that no worker serves
// ([WithServedPriorities]). The producer cannot know the workers, so the
// enqueue succeeds; such tasks never run and never fail. The worker checks
// at Start and then every [WithStrandedCheck] interval, logs each stranded
// subject once at Warn, and reports them in [Worker.Stranded] (package
// health puts them in its report).

// DefaultStrandedCheck is how often a running worker looks for stranded
// tasks of its types ([WithStrandedCheck]).
const DefaultStrandedCheck = time.Minute

// maxStranded bounds the subjects one check reports.
const maxStranded = 100

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

// WithStrandedCheck sets how often a running worker looks for tasks of its
// types stranded on subjects no consumer reads (see [Worker.Stranded]); the
// first check runs at Start. d = 0 turns the check off. Workers only.
// Default [DefaultStrandedCheck]; at least one second.
func WithStrandedCheck(d time.Duration) WorkerOption {
	return workerOnly(func(o *options) error {
		if d != 0 && d < time.Second {
			return fmt.Errorf("%w: stranded check every %v, want 0 (off) or at least 1s", ErrInvalidOption, d)
		}
		o.strandedCheck = d
		return nil
	})
}

// Stranded returns what the latest check found: the subjects holding tasks
// of the worker's types that no consumer reads, oldest first. It is nil
// before the first check and when nothing is stranded. Safe to call at any
// time from any goroutine.
func (w *Worker) Stranded() []StrandedSubject {
	if p := w.stranded.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// strandedCheckTimeout bounds one check.
const strandedCheckTimeout = 10 * time.Second

// startStrandedCheck runs the first check, then, in a service goroutine,
// one every interval until ctx ends.
func (w *Worker) startStrandedCheck(startCtx, svcCtx context.Context) {
	every := w.opts.strandedCheck
	if every == 0 {
		return
	}
	seen := make(map[string]bool)
	w.recheckStranded(startCtx, seen)
	w.services.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-svcCtx.Done():
				return
			case <-t.C:
				w.recheckStranded(svcCtx, seen)
			}
		}
	})
}

// recheckStranded runs one check, stores its findings and logs the subjects
// not seen stranded by the previous check.
func (w *Worker) recheckStranded(ctx context.Context, seen map[string]bool) {
	ctx, cancel := context.WithTimeout(ctx, strandedCheckTimeout)
	defer cancel()
	w.checkPartitionCount(ctx) // partitions.go
	found, err := w.findStranded(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("jetflow worker could not look for stranded tasks", slog.Any(LogKeyError, err))
		}
		return
	}
	w.stranded.Store(&found)
	now := make(map[string]bool, len(found))
	for _, s := range found {
		now[s.Subject] = true
		if !seen[s.Subject] {
			w.log.Warn("jetflow tasks of a type this worker serves wait on a subject no consumer reads; they will never run",
				slog.String(LogKeyTaskType, s.Type), slog.String("subject", s.Subject), slog.Uint64("tasks", s.Tasks),
				slog.String("why", s.Why))
		}
	}
	clear(seen)
	for s := range now {
		seen[s] = true
	}
}

// findStranded looks for the subjects of the worker's types that hold
// tasks and match no consumer's filter. Two stream info requests find the
// subjects of the worker's types that it does not read itself; only when
// there are some does it list the stream's consumers, whose filters may
// cover them (another worker's).
func (w *Worker) findStranded(ctx context.Context) ([]StrandedSubject, error) {
	var out []StrandedSubject
	for _, names := range w.partitions() { // partitions.go
		found, err := w.findStrandedIn(ctx, names)
		if err != nil {
			return out, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// findStrandedIn is findStranded in the task stream of names' partition.
func (w *Worker) findStrandedIn(ctx context.Context, names streams.Names) ([]StrandedSubject, error) {
	name := names.TaskStream()
	stream, err := w.js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("framework: stranded tasks: %w: %w", ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("framework: stranded tasks: %w", err)
	}
	var types []string
	for _, wildcard := range []string{names.TaskWildcard(), names.OrderedWildcard()} {
		si, err := stream.Info(ctx, jetstream.WithSubjectFilter(wildcard))
		if err != nil {
			return nil, fmt.Errorf("framework: stranded tasks: %w", err)
		}
		for subj, n := range si.State.Subjects {
			if typ, why := w.unread(subj); n > 0 && why != "" && !slices.Contains(types, typ) {
				types = append(types, typ)
			}
		}
	}
	if len(types) == 0 {
		return nil, nil
	}
	slices.Sort(types)
	work, ord := strings.TrimSuffix(names.TaskWildcard(), ">"), strings.TrimSuffix(names.OrderedWildcard(), ">")
	var wildcards []string
	for _, typ := range types {
		wildcards = append(wildcards, work+"*."+typ, ord+typ+".*")
	}
	subs, err := queuestate.Stranded(ctx, w.nc, stream, name, wildcards, maxStranded)
	if err != nil {
		return nil, fmt.Errorf("framework: stranded tasks: %w", err)
	}
	var out []StrandedSubject
	for _, s := range subs {
		if typ, why := w.unread(s.Subject); why != "" {
			out = append(out, StrandedSubject{Type: typ, Subject: s.Subject, Tasks: s.Tasks, Oldest: s.Oldest, Why: why})
		}
	}
	return out, nil
}

// unread returns the type of subject and why this worker does not read it,
// when the subject carries tasks of a type the worker serves that the
// worker's own consumers do not cover; why is empty otherwise.
func (w *Worker) unread(subject string) (taskType, why string) {
	if p, typ, err := w.names.ParseTaskSubject(subject); err == nil {
		tt := w.types[typ]
		if tt == nil || slices.Contains(tt.cfg.priorities, p) {
			return typ, ""
		}
		served := make([]string, len(tt.cfg.priorities))
		for i, q := range tt.cfg.priorities {
			served[i] = q.String()
		}
		return typ, fmt.Sprintf("tasks of priority %s, which no worker serves: this worker serves %s of the type (framework.WithServedPriorities)",
			p, strings.Join(served, ", "))
	}
	if typ, _, err := w.names.ParseOrderedSubject(subject); err == nil {
		if tt := w.types[typ]; tt != nil && tt.cfg.ordering == nil {
			return typ, "ordered tasks (framework.Ordered), which no worker reads: register the type with framework.WithOrdering"
		}
		return typ, ""
	}
	return "", ""
}
