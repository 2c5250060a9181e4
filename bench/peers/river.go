package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSystem runs River on PostgreSQL with a short fetch cooldown (in its
// favour: the default 100 ms would idle a worker between fetches).
type riverSystem struct {
	cfg    config
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

type benchArgs struct {
	Pad string `json:"pad"`
}

func (benchArgs) Kind() string { return "peers_bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	done func()
}

func (w *benchWorker) Work(context.Context, *river.Job[benchArgs]) error {
	w.done()
	return nil
}

func newRiver(ctx context.Context, cfg config) (*riverSystem, error) {
	pool, err := pgxpool.New(ctx, cfg.pgDSN)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	// An insert-only client.
	cl, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quietLogger()})
	if err != nil {
		pool.Close()
		return nil, err
	}
	s := &riverSystem{cfg: cfg, pool: pool, client: cl}
	return s, s.truncate(ctx)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (s *riverSystem) name() string { return "river" }
func (s *riverSystem) close()       { s.pool.Close() }

func (s *riverSystem) truncate(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

func (s *riverSystem) params(n int) []river.InsertManyParams {
	ps := make([]river.InsertManyParams, n)
	for i := range ps {
		ps[i] = river.InsertManyParams{Args: benchArgs{Pad: string(payload[8 : len(payload)-2])}}
	}
	return ps
}

func (s *riverSystem) drain(ctx context.Context, n int) (float64, error) {
	if _, err := s.client.InsertMany(ctx, s.params(n)); err != nil {
		return 0, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{done: func() {
		if done.Add(1) == int64(n) {
			close(finished)
		}
	}})
	cl, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.cfg.conc}},
		Workers:       workers,
		FetchCooldown: time.Millisecond,
		Logger:        quietLogger(),
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cl.Start(ctx); err != nil {
		return 0, err
	}
	werr := waitDone(ctx, finished, s.cfg.timeout, "the River drain")
	elapsed := time.Since(start)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Stop(sctx); err != nil && werr == nil {
		werr = err
	}
	if werr != nil {
		return 0, werr
	}
	return float64(n) / elapsed.Seconds(), s.truncate(ctx)
}

func (s *riverSystem) enqueueOne(ctx context.Context, n int) (float64, error) {
	args := benchArgs{Pad: string(payload[8 : len(payload)-2])}
	start := time.Now()
	for range n {
		if _, err := s.client.Insert(ctx, args, nil); err != nil {
			return 0, err
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, s.truncate(ctx)
}

func (s *riverSystem) enqueueBulk(ctx context.Context, n int) (float64, error) {
	ps := s.params(n)
	start := time.Now()
	if _, err := s.client.InsertMany(ctx, ps); err != nil {
		return 0, err
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, s.truncate(ctx)
}
