package queuestate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Activity is what one queue consumer reports.
type Activity struct {
	Consumer      string
	Filter        string // the consumer's filter subject
	Delivered     uint64
	Acked         uint64
	Waiting       uint64
	InFlight      int
	Pulling       int
	OldestWaiting time.Time
	LastDelivery  time.Time
	Paused        bool
	PausedUntil   time.Time
}

// Activities reads the consumers of stream (named streamName) whose filter
// subject passes isQueue: one paged consumer list, plus one direct get per
// queue with waiting tasks to date its oldest.
func Activities(ctx context.Context, nc *nats.Conn, stream jetstream.Stream, streamName string,
	isQueue func(filter string) bool) ([]Activity, error) {
	var out []Activity
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if !isQueue(ci.Config.FilterSubject) {
			continue
		}
		a := Activity{
			Consumer: ci.Name, Filter: ci.Config.FilterSubject,
			Delivered: ci.Delivered.Consumer, Acked: ci.AckFloor.Consumer,
			Waiting: ci.NumPending, InFlight: ci.NumAckPending, Pulling: ci.NumWaiting,
			Paused: ci.Paused,
		}
		if ci.Delivered.Last != nil {
			a.LastDelivery = *ci.Delivered.Last
		}
		if ci.Paused {
			a.PausedUntil = time.Now().Add(ci.PauseRemaining)
		}
		if ci.NumPending > 0 {
			// Tasks above the last delivered stream sequence have not been
			// delivered yet: the first of them is the oldest waiting.
			req := jsapi.GetRequest{Seq: ci.Delivered.Stream + 1, NextFor: ci.Config.FilterSubject}
			_, err := jsapi.DirectGet(ctx, nc, streamName, req, func(m jsapi.Stored) error {
				a.OldestWaiting = m.Time
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("oldest task of %s: %w", ci.Name, err)
			}
		}
		out = append(out, a)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	return out, nil
}

// ScanSchedules visits the messages stored on prefix+">" of streamName in
// sequence order, at most max of them, with batched direct gets; id is the
// subject after prefix. truncated is true when there were more.
func ScanSchedules(ctx context.Context, nc *nats.Conn, streamName, prefix string, max int,
	visit func(id string, m jsapi.Stored)) (truncated bool, err error) {
	seen := 0
	err = jsapi.Scan(ctx, nc, streamName, prefix+">", 0, 0, time.Time{}, 1000, func(m jsapi.Stored) (bool, error) {
		seen++
		if seen > max {
			truncated = true
			return false, nil
		}
		visit(strings.TrimPrefix(m.Subject, prefix), m)
		return true, nil
	})
	return truncated, err
}

// Subject is a stranded subject.
type Subject struct {
	Subject string
	Tasks   uint64
	Oldest  time.Time
	Age     time.Duration
}

// Stranded reports the subjects of stream (named streamName) under the
// wildcards that hold tasks but match no consumer's filter, oldest first, at
// most max.
func Stranded(ctx context.Context, nc *nats.Conn, stream jetstream.Stream, streamName string, wildcards []string,
	max int) ([]Subject, error) {
	subjects := make(map[string]uint64)
	for _, wildcard := range wildcards {
		si, err := stream.Info(ctx, jetstream.WithSubjectFilter(wildcard))
		if err != nil {
			return nil, err
		}
		maps.Copy(subjects, si.State.Subjects)
	}
	if len(subjects) == 0 {
		return nil, nil
	}
	var filters []string
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.FilterSubject != "" {
			filters = append(filters, ci.Config.FilterSubject)
		}
		filters = append(filters, ci.Config.FilterSubjects...)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	now := time.Now()
	var out []Subject
	for subj, n := range subjects {
		if n == 0 || slices.ContainsFunc(filters, func(f string) bool { return streamdefs.SubjectMatches(f, subj) }) {
			continue
		}
		s := Subject{Subject: subj, Tasks: n}
		_, err := jsapi.DirectGet(ctx, nc, streamName, jsapi.GetRequest{Seq: 1, NextFor: subj},
			func(m jsapi.Stored) error {
				s.Oldest = m.Time
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("oldest on %s: %w", subj, err)
		}
		if !s.Oldest.IsZero() {
			s.Age = now.Sub(s.Oldest)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Subject) int {
		if c := a.Oldest.Compare(b.Oldest); c != 0 {
			return c
		}
		return strings.Compare(a.Subject, b.Subject)
	})
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}
