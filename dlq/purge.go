package dlq

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// PurgeProgress deletes the records matching f like [Queue.Purge]
// and reports its advance: progress, if not nil, is called after each batch
// of examined records and at the end with the number examined and the
// number in the scanned range when the purge started. A filter on the type
// alone (or the zero filter) is one purge request, reported once at the
// end.
func (d *Queue) PurgeProgress(ctx context.Context, f Filter, progress func(done, total int)) (int, error) {
	if progress == nil || f.bySubjectOnly() {
		n, err := d.Purge(ctx, f)
		if progress != nil && err == nil {
			progress(n, n)
		}
		return n, err
	}
	last, total, err := d.scanRange(ctx, f, "purge dead letters")
	if err != nil {
		return 0, err
	}
	purged, done := 0, 0
	scanFilter := Filter{Type: f.Type, From: f.From}
	err = d.scan(ctx, scanFilter, 0, last, scanBatch, func(dl *Record, m jsapi.Stored) (bool, error) {
		if done == 0 && !f.From.IsZero() {
			total = int(m.NumPending) + 1 // the scan starts at f.From
		}
		done++
		if !f.To.IsZero() && dl.Time.After(f.To) {
			return false, nil
		}
		if f.match(dl) {
			gone, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), dl.Seq)
			if err != nil {
				return false, err
			}
			if gone {
				purged++
			}
		}
		if done%scanBatch == 0 {
			progress(done, max(total, done))
		}
		return true, nil
	})
	progress(done, max(total, done))
	if err != nil {
		return purged, d.wrapErr("purge dead letters", err)
	}
	return purged, nil
}

// scanRange returns the last sequence of the dead-letter stream and the
// number of records on f's subjects, where a scan for f starts; what names
// the operation in an error.
func (d *Queue) scanRange(ctx context.Context, f Filter, what string) (last uint64, total int, err error) {
	subj, err := f.subject(d.names)
	if err != nil {
		return 0, 0, err
	}
	ds, err := d.core.Stream(ctx, d.names.DLQStream())
	if err != nil {
		return 0, 0, err
	}
	si, err := ds.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, 0, fmt.Errorf("dlq: %s: dead-letter stream info: %w", what, err)
	}
	for _, n := range si.State.Subjects {
		total += int(n)
	}
	return si.State.LastSeq, total, nil
}
