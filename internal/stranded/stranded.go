// Package stranded finds the tasks of a worker's types that wait on
// subjects no consumer reads (ordered tasks of a type registered without
// ordering, tasks at a priority no worker serves): the producer cannot know
// the workers, so such enqueues succeed, and the tasks never run and never
// fail. A [Checker] looks at Start and then at an interval, keeps its
// latest findings and reports each subject once when it becomes stranded.
package stranded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/streams"
)

// Subject is a subject of a task stream that holds tasks of one of the
// worker's types but matches no consumer's filter.
type Subject struct {
	Type    string    `json:"type"`
	Subject string    `json:"subject"`
	Tasks   uint64    `json:"tasks"`
	Oldest  time.Time `json:"oldest,omitzero"`
	Why     string    `json:"why"`
}

// Max bounds the subjects one check reports.
const Max = 100

// CheckTimeout bounds one check.
const CheckTimeout = 10 * time.Second

// Checker looks for stranded subjects in the task streams of Streams.
type Checker struct {
	JS jetstream.JetStream
	NC *nats.Conn
	// Streams returns the names of the task partitions to look in.
	Streams func() []streams.Names
	// Unread returns the type of a task subject and why the worker does
	// not read it, or an empty why when it does (or the subject is not
	// one of its types').
	Unread func(subject string) (taskType, why string)
	// Missing is wrapped in the error of a check that finds no task
	// stream.
	Missing error
	// Before runs before each check (the worker's partition count check).
	Before func(ctx context.Context)
	// Stranded is told of each subject found stranded that the previous
	// check had not found; Failed of a check that failed.
	Stranded func(Subject)
	Failed   func(error)

	seen  map[string]bool
	found atomic.Pointer[[]Subject]
}

// Found returns a copy of the latest check's findings, oldest first: nil
// before the first check and when nothing is stranded.
func (c *Checker) Found() []Subject {
	if p := c.found.Load(); p != nil && len(*p) > 0 {
		return slices.Clone(*p)
	}
	return nil
}

// FoundAs returns c's latest findings ([Checker.Found]) converted by conv
// (to a public type of the same fields): nil when Found is.
func FoundAs[T any](c *Checker, conv func(Subject) T) []T {
	found := c.Found()
	if found == nil {
		return nil
	}
	out := make([]T, len(found))
	for i, s := range found {
		out[i] = conv(s)
	}
	return out
}

// Loop checks every interval, in the calling goroutine, until ctx ends
// (the first check is the caller's, with Check).
func (c *Checker) Loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Check(ctx)
		}
	}
}

// Check runs one check, stores its findings and reports the subjects the
// previous check had not found. Not safe for concurrent use.
func (c *Checker) Check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	if c.Before != nil {
		c.Before(ctx)
	}
	found, err := c.find(ctx)
	if err != nil {
		if ctx.Err() == nil && c.Failed != nil {
			c.Failed(err)
		}
		return
	}
	c.found.Store(&found)
	now := make(map[string]bool, len(found))
	for _, s := range found {
		now[s.Subject] = true
		if !c.seen[s.Subject] && c.Stranded != nil {
			c.Stranded(s)
		}
	}
	c.seen = now
}

// find looks in every task stream.
func (c *Checker) find(ctx context.Context) ([]Subject, error) {
	var out []Subject
	for _, names := range c.Streams() {
		found, err := c.findIn(ctx, names)
		if err != nil {
			return out, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// findIn looks in the task stream of names' partition. Two stream info
// requests find the subjects of the worker's types that it does not read
// itself; only when there are some does it list the stream's consumers,
// whose filters may cover them (another worker's).
func (c *Checker) findIn(ctx context.Context, names streams.Names) ([]Subject, error) {
	name := names.TaskStream()
	stream, err := c.JS.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("framework: stranded tasks: %w: %w", c.Missing, err)
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
			if typ, why := c.Unread(subj); n > 0 && why != "" && !slices.Contains(types, typ) {
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
		// Ordered slots in both layouts (streams/ordering.go).
		wildcards = append(wildcards, work+"*."+typ, ord+typ+".*", ord+typ+".K.>")
	}
	subs, err := queuestate.Stranded(ctx, c.NC, stream, name, wildcards, Max)
	if err != nil {
		return nil, fmt.Errorf("framework: stranded tasks: %w", err)
	}
	var out []Subject
	for _, s := range subs {
		if typ, why := c.Unread(s.Subject); why != "" {
			out = append(out, Subject{Type: typ, Subject: s.Subject, Tasks: s.Tasks, Oldest: s.Oldest, Why: why})
		}
	}
	return out, nil
}

// LogTo makes c log on log, at Warn, each subject it finds stranded and
// each check that fails (its Stranded and Failed).
func (c *Checker) LogTo(log *slog.Logger) {
	c.Stranded = func(s Subject) {
		log.Warn("jetflow tasks of a type this worker serves wait on a subject no consumer reads; they will never run",
			slog.String("task_type", s.Type), slog.String("subject", s.Subject), slog.Uint64("tasks", s.Tasks),
			slog.String("why", s.Why))
	}
	c.Failed = func(err error) {
		log.Warn("jetflow worker could not look for stranded tasks", slog.Any("error", err))
	}
}
