package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// ListTimeout bounds one read of the registry by a worker's [Gate].
const ListTimeout = 5 * time.Second

// Service is a worker's registry service: it ensures the registry bucket
// and then announces the worker ([Announcer]) until its context ends. Set
// every field before Run.
type Service struct {
	// JS reads and writes the registry.
	JS jetstream.JetStream
	// Bucket is the registry bucket; TaskStream the task stream whose
	// storage and replicas it takes when it is created.
	Bucket, TaskStream string
	// Interval is how often the record is written; Rules check it.
	Interval time.Duration
	Rules    Rules
	// Self is the worker's record without what changes while it runs;
	// Now sets that (busy slots, refusals, lanes, start time) on a copy of
	// it, once per interval.
	Self Record
	Now  func(rec *Record)
	// Log receives the warnings.
	Log *slog.Logger
}

// Run ensures the bucket (within 10 s) and writes the worker's record
// every interval until ctx ends, then deletes it. A bucket that cannot be
// ensured is logged, and the writes are tried anyway: the worker is listed
// once the bucket exists.
func (s *Service) Run(ctx context.Context) {
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := EnsureBucket(ectx, s.JS, s.Bucket, s.TaskStream)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.Log.Warn("jetflow worker registry: bucket not ensured; the worker is not listed until it exists",
			slog.String("bucket", s.Bucket), slog.Any("error", err))
	}
	a := &Announcer{JS: s.JS, Bucket: s.Bucket, Interval: s.Interval, Rules: s.Rules, Log: s.Log,
		Snapshot: func() Record {
			rec := s.Self
			s.Now(&rec)
			return rec
		}}
	a.Run(ctx)
}

// Hostname returns the host name a worker's record carries: the
// system's, or "unknown" when it cannot be read or is longer than
// [MaxTextLen].
func Hostname() string {
	host, err := os.Hostname()
	if err != nil || len(host) > MaxTextLen {
		return "unknown"
	}
	return host
}

// Watch makes g read bucket, the registry, through js with r (each read
// bounded by [ListTimeout] and by ctx), and log on log a read that fails.
func (g *Gate) Watch(ctx context.Context, js jetstream.JetStream, bucket string, r Rules, log *slog.Logger) {
	g.List = func() (*Listing, error) {
		lctx, cancel := context.WithTimeout(ctx, ListTimeout)
		defer cancel()
		return r.List(lctx, js, bucket)
	}
	g.ListFailed = func(typ string, v int, err error) {
		log.Warn("jetflow could not read the worker registry to find a worker for a payload version; dead-lettering after the grace",
			slog.String("task_type", typ), slog.Int("version", v), slog.Any("error", err))
	}
}

// HandBackTask stores the task of b as a one-shot schedule in stream, the
// schedule stream, that fires it into its queue again at b.Due
// ([StoreHandBack]), within [jsapi.WithTimeout] of ctx. A task that cannot
// fire from a schedule gets an error instead: an ordered one (it stays in
// its key's queue) or one under a cron tick's ID ([taskmsg.ReservedID]).
func HandBackTask(ctx context.Context, js jetstream.JetStream, stream string, ordered bool, b *taskmsg.HandBack) error {
	if ordered {
		return errors.New("an ordered task stays in its key's queue")
	}
	if taskmsg.ReservedID(b.ID) {
		return fmt.Errorf("task ID %s cannot be a delayed task's", b.ID)
	}
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	return StoreHandBack(ctx, js, stream, b)
}
