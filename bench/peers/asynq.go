package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqSystem runs asynq with its defaults (one "default" queue) on Redis.
type asynqSystem struct {
	cfg    config
	opt    asynq.RedisClientOpt
	client *asynq.Client
	rdb    *redis.Client
}

const asynqType = "peers:bench"

func newAsynq(ctx context.Context, cfg config) (*asynqSystem, error) {
	opt := asynq.RedisClientOpt{Addr: cfg.redisAddr}
	s := &asynqSystem{cfg: cfg, opt: opt, client: asynq.NewClient(opt), rdb: redis.NewClient(&redis.Options{Addr: cfg.redisAddr})}
	if err := s.rdb.FlushDB(ctx).Err(); err != nil {
		s.close()
		return nil, fmt.Errorf("asynq: redis: %w", err)
	}
	return s, nil
}

func (s *asynqSystem) name() string { return "asynq" }

func (s *asynqSystem) close() {
	_ = s.client.Close()
	_ = s.rdb.Close()
}

func (s *asynqSystem) drain(ctx context.Context, n int) (float64, error) {
	if _, err := s.enqueueOne(ctx, n); err != nil { // asynq has no batch enqueue
		return 0, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServer(s.opt, asynq.Config{Concurrency: s.cfg.conc, LogLevel: asynq.WarnLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqType, func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	})
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	werr := waitDone(ctx, finished, s.cfg.timeout, "the asynq drain")
	elapsed := time.Since(start)
	srv.Shutdown()
	if werr != nil {
		return 0, werr
	}
	return float64(n) / elapsed.Seconds(), s.rdb.FlushDB(ctx).Err()
}

func (s *asynqSystem) enqueueOne(ctx context.Context, n int) (float64, error) {
	start := time.Now()
	for range n {
		if _, err := s.client.EnqueueContext(ctx, asynq.NewTask(asynqType, payload)); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// enqueueBulk: asynq has no batch enqueue.
func (s *asynqSystem) enqueueBulk(context.Context, int) (float64, error) { return 0, nil }
