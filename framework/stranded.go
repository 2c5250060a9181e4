package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/queuestate"
)

// StrandedSubject is a work subject holding tasks that no consumer of the
// task stream reads: a type no worker ever registered (or registered at
// another priority), or a subject jetflow's client would refuse (an
// upper-case type, for example) published by another tool. Such tasks never
// run and never fail: they wait until a worker serves the subject or an
// operator removes them.
type StrandedSubject struct {
	// Subject is the work subject, "<prefix>.task.<priority>.<type>".
	Subject string
	// Tasks is how many tasks wait on it.
	Tasks uint64
	// Oldest is when the oldest of them was stored; Age is how long ago,
	// when the report was made.
	Oldest time.Time
	Age    time.Duration
}

// MaxStrandedSubjects bounds how many subjects [Inspector.Stranded] reports.
const MaxStrandedSubjects = 1000

// Stranded reports the work subjects of the task stream that hold tasks
// but match no consumer's filter, oldest first, at most
// [MaxStrandedSubjects]. A subject whose consumer exists but has no running
// worker is not stranded: [Inspector.QueueStats] counts its tasks as
// pending. Cost: one stream info request, one consumer listing, and one
// direct get per stranded subject.
func (i *Inspector) Stranded(ctx context.Context) ([]StrandedSubject, error) {
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("framework: stranded tasks: %w: %w", ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("framework: stranded tasks: %w", err)
	}
	subs, err := queuestate.Stranded(ctx, i.nc, stream, i.names.TaskStream(), i.names.TaskWildcard(), MaxStrandedSubjects)
	if err != nil {
		return nil, fmt.Errorf("framework: stranded tasks: %w", err)
	}
	var out []StrandedSubject
	for _, s := range subs {
		out = append(out, StrandedSubject(s))
	}
	return out, nil
}
