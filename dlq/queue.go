package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Queue inspects, replays and purges the dead-letter stream of a client's
// topology. Get one with [New]. It is safe for concurrent use.
type Queue struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	core   *deadletter.Core
	op     *inspect.Operator // for MoveStranded
	window int               // in-flight publishes of a bulk replay
}

// New returns the dead-letter operations of c's topology (its prefix, see
// [framework.WithPrefix]).
func New(c *framework.Client) *Queue {
	names := c.Names()
	return &Queue{
		nc:     c.Conn(),
		js:     c.JetStream(),
		names:  names,
		core:   deadletter.NewCore(c.Conn(), c.JetStream(), topology.DeadLetterTopology(names), c.Logger()),
		op:     inspect.New(c),
		window: min(c.MaxPending(), replayWindow),
	}
}

// replayWindow bounds the unacknowledged publishes of a bulk replay.
const replayWindow = 256

// scanBatch is the number of records read per request.
const scanBatch = 256

// Page limits of [Queue.List].
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// MaxPageBytes bounds the payloads and headers of one page: a page
	// ends early, with a cursor, once its records hold that many bytes.
	// It always holds at least one record.
	MaxPageBytes = 16 << 20
)

// Filter selects dead-letter records. The zero value selects all;
// set fields narrow the selection (all must match).
type Filter struct {
	// Type selects one task type.
	Type string
	// Reason selects one reason.
	Reason Reason
	// From and To bound the time the record was stored (inclusive). A scan
	// stops at the first record stored after To.
	From, To time.Time
	// ErrorContains selects records whose last error contains it, ignoring
	// case.
	ErrorContains string
	// TaskID selects the records of one task (a task dead-lettered, replayed
	// and dead-lettered again has one record each time). The stream is not
	// indexed by task ID: a lookup reads every record of the selected type,
	// or of all types.
	TaskID string
}

// Page asks for one page of [Queue.List].
type Page struct {
	// Limit is the most records returned. Default
	// [DefaultPageLimit], at most [MaxPageLimit].
	Limit int
	// After returns records with a sequence above it: 0 for the first page,
	// then the cursor the previous page returned.
	After uint64
}

func (f Filter) subject(n streams.Names) (string, error) {
	if f.Type == "" {
		return n.Prefix() + ".dlq.>", nil
	}
	if err := streams.ValidateTaskType(f.Type); err != nil {
		return "", fmt.Errorf("%w: filter: %w", framework.ErrInvalidOption, err)
	}
	return n.DLQSubject(f.Type), nil
}

// bySubjectOnly reports whether the subject alone selects the records.
func (f Filter) bySubjectOnly() bool {
	return f.Reason == "" && f.From.IsZero() && f.To.IsZero() && f.ErrorContains == "" && f.TaskID == ""
}

func (f Filter) match(d *Record) bool {
	if f.Reason != "" && d.Reason != f.Reason {
		return false
	}
	if f.TaskID != "" && d.TaskID != f.TaskID {
		return false
	}
	if !f.From.IsZero() && d.Time.Before(f.From) {
		return false
	}
	if !f.To.IsZero() && d.Time.After(f.To) {
		return false
	}
	if f.ErrorContains != "" && !strings.Contains(strings.ToLower(d.LastError), strings.ToLower(f.ErrorContains)) {
		return false
	}
	return true
}

// dlqErr turns a direct get failure on the dead-letter stream into the
// package's errors.
func (d *Queue) wrapErr(what string, err error) error {
	return natserr.Wrap("dlq: "+what, err)
}

// scan calls fn for the records matching f from sequence after+1 up to
// sequence to (0: no bound). fn returns false to stop.
func (d *Queue) scan(ctx context.Context, f Filter, after, to uint64, batch int,
	fn func(dl *Record, m jsapi.Stored) (bool, error)) error {
	subj, err := f.subject(d.names)
	if err != nil {
		return err
	}
	if after == math.MaxUint64 {
		return nil // no sequence above it; after+1 would wrap to the first record
	}
	from, start := after+1, time.Time{}
	if after == 0 && !f.From.IsZero() {
		from, start = 0, f.From
	}
	return jsapi.Scan(ctx, d.nc, d.names.DLQStream(), subj, from, to, start, batch,
		func(m jsapi.Stored) (bool, error) {
			dl := recordFrom(m)
			if !f.To.IsZero() && dl.Time.After(f.To) {
				return false, nil
			}
			if !f.match(&dl) {
				return true, nil
			}
			return fn(&dl, m)
		})
}

// List returns one page of the records matching f, oldest first, and the
// cursor of the next page (its [Page.After]), or 0 when there are
// no more records. A page holds up to [Page.Limit] records, fewer when
// their sizes reach [MaxPageBytes]: records are as large as the server's
// max payload, and a thousand of them would not fit an operator's memory.
func (d *Queue) List(ctx context.Context, f Filter, p Page) ([]Record, uint64, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultPageLimit
	}
	if limit > MaxPageLimit {
		return nil, 0, fmt.Errorf("%w: page limit %d, at most %d", framework.ErrInvalidOption, limit, MaxPageLimit)
	}
	batch := scanBatch
	if f.bySubjectOnly() {
		batch = min(limit, scanBatch)
	}
	var out []Record
	var next uint64
	var size int64
	err := d.scan(ctx, f, p.After, 0, batch, func(dl *Record, m jsapi.Stored) (bool, error) {
		out = append(out, *dl)
		size += taskmsg.Size(&nats.Msg{Header: m.Header, Data: m.Data})
		if len(out) < limit && size < MaxPageBytes {
			return true, nil
		}
		if m.NumPending > 0 {
			next = m.Seq
		}
		return false, nil
	})
	if err != nil {
		return nil, 0, d.wrapErr("list dead letters", err)
	}
	return out, next, nil
}

// Get returns the record at sequence seq, or an error wrapping [framework.ErrNotFound].
func (d *Queue) Get(ctx context.Context, seq uint64) (*Record, error) {
	var found *Record
	_, err := jsapi.DirectGet(ctx, d.nc, d.names.DLQStream(), jsapi.GetRequest{Seq: seq}, func(m jsapi.Stored) error {
		dl := recordFrom(m)
		found = &dl
		return nil
	})
	if err != nil {
		return nil, d.wrapErr(fmt.Sprintf("get dead letter %d", seq), err)
	}
	if found == nil {
		return nil, fmt.Errorf("%w: dead letter %d", framework.ErrNotFound, seq)
	}
	return found, nil
}

// Purge deletes the records matching f and returns how many it deleted. A
// filter on the type alone (or the zero filter: every record) is one purge
// request; other filters delete the matching records one by one.
func (d *Queue) Purge(ctx context.Context, f Filter) (int, error) {
	subj, err := f.subject(d.names)
	if err != nil {
		return 0, err
	}
	if f.bySubjectOnly() {
		return d.purgeSubject(ctx, subj)
	}
	ds, err := d.core.Stream(ctx, d.names.DLQStream())
	if err != nil {
		return 0, err
	}
	si, err := ds.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("dlq: purge dead letters: stream info: %w", err)
	}
	purged := 0
	err = d.scan(ctx, f, 0, si.State.LastSeq, scanBatch, func(dl *Record, _ jsapi.Stored) (bool, error) {
		gone, err := d.core.DeleteMsg(ctx, d.names.DLQStream(), dl.Seq)
		if err != nil {
			return false, err
		}
		if gone {
			purged++
		}
		return true, nil
	})
	if err != nil {
		return purged, d.wrapErr("purge dead letters", err)
	}
	return purged, nil
}

// purgeSubject purges subj from the dead-letter stream in one request and
// returns the number of records purged.
func (d *Queue) purgeSubject(ctx context.Context, subj string) (int, error) {
	n, err := jsapi.PurgeSubject(ctx, d.nc, d.names.DLQStream(), subj)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, fmt.Errorf("dlq: purge dead letters: %w: %w", framework.ErrTopologyMissing, err)
		}
		return 0, fmt.Errorf("dlq: purge dead letters: %w", err)
	}
	return int(n), nil
}

// Reconcile finds tasks that reached their max deliveries but whose
// max-deliveries advisory was lost, and moves them to the dead-letter
// stream, like the reconciler every worker runs periodically
// ([framework.Timings].ReconcileInterval). It looks twice, two seconds apart, and routes
// only what both looks found, so that a task acknowledged at the moment of
// the first look is never taken for a dead one. It never touches waiting or
// running tasks. It returns the number of tasks routed; tasks routed at the
// same time by a router or another reconciler are routed once.
func (d *Queue) Reconcile(ctx context.Context) (int, error) {
	return d.core.Reconcile(ctx, deadletter.ReconcileGrace)
}

// topology names the dead-letter core's streams, bucket and subjects in
// names' topology, as the worker's dead-letter extension does.
