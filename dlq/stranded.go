package dlq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// MoveStranded moves the tasks of stranded subjects
// ([inspect.Operator.Stranded]) stored more than grace ago to the
// dead-letter stream, with reason [ReasonStranded] and the subject in the
// last error, then deletes them from the task stream; it returns how many
// it moved. Replay them once a worker serves their type. Run it when no worker that would serve those
// subjects is starting: a consumer created meanwhile could deliver a task
// that is also being moved.
func (d *Queue) MoveStranded(ctx context.Context, grace time.Duration) (int, error) {
	subs, err := d.op.Stranded(ctx)
	if err != nil {
		return 0, err
	}
	stream := d.names.TaskStream()
	cutoff := time.Now().Add(-grace)
	prefix := strings.TrimSuffix(d.names.TaskWildcard(), ">")
	moved := 0
	for _, s := range subs {
		if s.Oldest.After(cutoff) {
			continue
		}
		prio, typ, _ := strings.Cut(strings.TrimPrefix(s.Subject, prefix), ".")
		if !strings.HasPrefix(s.Subject, prefix) {
			// A slot subject of ordered tasks (which have no priority), or
			// junk under it: no slot a partition reads, no type.
			prio, typ = framework.PriorityNormal.String(), delays.RejectedType
			if t, _, err := d.names.ParseOrderedSubject(s.Subject); err == nil {
				typ = t
			}
		}
		err := jsapi.Scan(ctx, d.nc, stream, s.Subject, 0, 0, time.Time{}, 100, func(m jsapi.Stored) (bool, error) {
			if m.Time.After(cutoff) {
				return false, nil
			}
			cause := fmt.Errorf("no consumer reads %s; stored %s", s.Subject, m.Time.UTC().Format(time.RFC3339))
			err := d.core.WriteStranded(ctx, deadletter.Attempt{Seq: m.Seq, Subject: m.Subject, Header: m.Header,
				Payload: m.Data, ID: taskmsg.ID(m.Header, m.Seq, m.Time), Type: typ, Priority: prio, Cause: cause})
			if err != nil {
				return false, err
			}
			if _, err := d.core.DeleteMsg(ctx, stream, m.Seq); err != nil {
				return false, err
			}
			moved++
			return true, nil
		})
		if err != nil {
			return moved, fmt.Errorf("dlq: move stranded tasks of %s: %w", s.Subject, err)
		}
	}
	return moved, nil
}
