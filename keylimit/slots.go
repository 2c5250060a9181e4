package keylimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// Slots. A key of a type with limit n has n slots, the subjects
// "$KV.<bucket>.slot.<type>.<key>.<i>" for i in [0, n), type and key
// escaped into one token each (as state keys are). A running task holds one
// slot: a message stored there only while the subject is empty (expected
// last subject sequence 0), with a per-message TTL of the type's ack wait,
// renewed every third of it while the task runs. Its task gives it back by
// deleting that message (by sequence: a lease that expired and was taken
// by another task is not touched). A worker that dies holding a slot
// renews it no more: the server removes the message when its TTL passes,
// within the ack wait, the time after which its task is redelivered anyway.
//
// The bucket is a KV stream with per-message TTLs and no delete markers
// (an expired slot leaves its subject empty, free for the next task), and
// allows deleting single messages.

// lease is a slot a running task holds.
type lease struct {
	subject string
	// mu orders a renewal and the release: a renewal racing the release
	// would store a new message after the old one was deleted, and hold the
	// slot until its TTL.
	mu       sync.Mutex
	seq      uint64 // of the slot's message; renewals move it
	released bool
}

// slotStore takes and gives back slots.
type slotStore struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	bucket string
	ttl    time.Duration
	log    *slog.Logger
}

// Bucket returns the configuration of the key-limits bucket's stream.
func bucketConfig(names streams.Names) jetstream.StreamConfig {
	b := names.KeyLimitsBucket()
	return jetstream.StreamConfig{
		Name:              "KV_" + b,
		Description:       "jetflow per-key limits: the slots running tasks hold (expiring), and the limits set at run time",
		Subjects:          []string{"$KV." + b + ".>"},
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardNew,
		AllowDirect:       true,
		AllowRollup:       true,
		AllowMsgTTL:       true,
		Storage:           jetstream.FileStorage,
		Replicas:          1,
	}
}

// ensureBucket creates the bucket's stream, with the task stream's storage
// and replicas, when it is missing.
func ensureBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, "KV_"+names.KeyLimitsBucket())
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("keylimit: bucket %s: %w", names.KeyLimitsBucket(), err)
	}
	cfg := bucketConfig(names)
	if ts, err := js.Stream(ctx, names.TaskStream()); err == nil {
		tc := ts.CachedInfo().Config
		cfg.Storage, cfg.Replicas = tc.Storage, tc.Replicas
	}
	s, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, cfg.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("keylimit: create bucket %s: %w", names.KeyLimitsBucket(), err)
	}
	return s, nil
}

func newSlotStore(ctx context.Context, js jetstream.JetStream, names streams.Names, ttl time.Duration, log *slog.Logger) (*slotStore, error) {
	s, err := ensureBucket(ctx, js, names)
	if err != nil {
		return nil, err
	}
	// Per-message TTLs are whole seconds.
	ttl = max(ttl.Truncate(time.Second), time.Second)
	return &slotStore{js: js, stream: s, bucket: names.KeyLimitsBucket(), ttl: ttl, log: log}, nil
}

// slotPrefix returns the subject prefix of the slots of (taskType, key).
func slotPrefix(bucket, taskType, key string) string {
	return "$KV." + bucket + ".slot." + staterec.Key(taskType) + "." + staterec.Key(key) + "."
}

// acquire takes a free slot of (taskType, key) among limit, trying them
// from a random one; nil when every slot is held.
func (s *slotStore) acquire(ctx context.Context, taskType, key string, limit int, taskID string) (*lease, error) {
	prefix := slotPrefix(s.bucket, taskType, key)
	first := rand.N(limit)
	for i := range limit {
		subject := prefix + strconv.Itoa((first+i)%limit)
		pctx, cancel := jsapi.WithTimeout(ctx)
		ack, err := s.js.Publish(pctx, subject, []byte(taskID), jetstream.WithExpectLastSequencePerSubject(0),
			jetstream.WithMsgTTL(s.ttl), jetstream.WithExpectStream("KV_"+s.bucket))
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			return &lease{subject: subject, seq: ack.Sequence}, nil
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164):
			continue // held
		default:
			return nil, err
		}
	}
	return nil, nil
}

// release deletes the lease's message; an expired one is gone already.
func (s *slotStore) release(l *lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = true
	ctx, cancel := jsapi.WithTimeout(context.Background())
	defer cancel()
	if err := s.stream.DeleteMsg(ctx, l.seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		// The slot stays held until its TTL passes.
		s.log.Warn("jetflow keylimit: slot not given back; it frees itself when its TTL passes",
			slog.String("slot", l.subject), slog.Duration("ttl", s.ttl), slog.Any("error", err))
	}
}

// renew writes the lease again with a fresh TTL, if it is still the
// slot's message.
func (s *slotStore) renew(ctx context.Context, l *lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return
	}
	pctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	ack, err := s.js.Publish(pctx, l.subject, nil, jetstream.WithExpectLastSequencePerSubject(l.seq),
		jetstream.WithMsgTTL(s.ttl), jetstream.WithExpectStream("KV_"+s.bucket))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("jetflow keylimit: slot not renewed; its task runs on, and the slot frees itself when its TTL passes",
				slog.String("slot", l.subject), slog.Any("error", err))
		}
		return
	}
	l.seq = ack.Sequence
}
