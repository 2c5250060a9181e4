package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
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

// DeadLetterStranded moves the tasks of stranded subjects ([Inspector.Stranded])
// stored more than grace ago to the dead-letter stream, with reason
// "stranded" (package dlq's ReasonStranded) and the subject in the last error, then deletes them
// from the task stream; it returns how many it moved. Replay them once a
// worker serves their type. Run it when no worker that would serve those
// subjects is starting: a consumer created meanwhile could deliver a task
// that is also being moved.
func (i *Inspector) DeadLetterStranded(ctx context.Context, grace time.Duration) (int, error) {
	subs, err := i.Stranded(ctx)
	if err != nil {
		return 0, err
	}
	stream := i.names.TaskStream()
	core := newDeadLetterCore(i.nc, i.js, i.names, i.opts.logger)
	cutoff := time.Now().Add(-grace)
	prefix := strings.TrimSuffix(i.names.TaskWildcard(), ">")
	moved := 0
	for _, s := range subs {
		if s.Oldest.After(cutoff) {
			continue
		}
		prio, typ, _ := strings.Cut(strings.TrimPrefix(s.Subject, prefix), ".")
		err := jsapi.Scan(ctx, i.nc, stream, s.Subject, 0, 0, time.Time{}, 100, func(m jsapi.Stored) (bool, error) {
			if m.Time.After(cutoff) {
				return false, nil
			}
			cause := fmt.Errorf("no consumer reads %s; stored %s", s.Subject, m.Time.UTC().Format(time.RFC3339))
			err := core.WriteStranded(ctx, deadletter.Attempt{Seq: m.Seq, Subject: m.Subject, Header: m.Header,
				Payload: m.Data, ID: taskmsg.ID(m.Header, m.Seq, m.Time), Type: typ, Priority: prio, Cause: cause})
			if err != nil {
				return false, err
			}
			if _, err := core.DeleteMsg(ctx, stream, m.Seq); err != nil {
				return false, err
			}
			moved++
			return true, nil
		})
		if err != nil {
			return moved, fmt.Errorf("framework: dead-letter stranded tasks of %s: %w", s.Subject, err)
		}
	}
	return moved, nil
}
