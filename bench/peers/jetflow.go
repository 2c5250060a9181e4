package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// jetflowSystem runs jetflow with its defaults against a NATS server over
// TCP (file storage, one replica).
type jetflowSystem struct {
	cfg   config
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	cl    *framework.Client
}

const jetflowType = "peers.bench"

func newJetflow(ctx context.Context, cfg config) (*jetflowSystem, error) {
	nc, err := nats.Connect(cfg.natsURL)
	if err != nil {
		return nil, fmt.Errorf("jetflow: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{Storage: jetstream.FileStorage, AllowTaskPurge: true}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetflow: ensure topology: %w", err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := &jetflowSystem{cfg: cfg, nc: nc, js: js, names: streams.MustNames(""), cl: cl}
	return s, s.purge(ctx)
}

func (s *jetflowSystem) name() string { return "jetflow" }
func (s *jetflowSystem) close()       { s.nc.Close() }

func (s *jetflowSystem) purge(ctx context.Context) error {
	st, err := s.js.Stream(ctx, s.names.TaskStream())
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(s.names.TaskSubject(streams.PriorityNormal, jetflowType)))
}

func (s *jetflowSystem) jobs(n int) []framework.TaskSpec {
	jobs := make([]framework.TaskSpec, n)
	var p any = json.RawMessage(payload)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: jetflowType, Payload: p}
	}
	return jobs
}

func (s *jetflowSystem) drain(ctx context.Context, n int) (float64, error) {
	if _, err := s.cl.EnqueueMany(ctx, s.jobs(n)); err != nil {
		return 0, err
	}
	nc, err := nats.Connect(s.cfg.natsURL)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var done atomic.Int64
	finished := make(chan struct{})
	w, err := framework.NewWorker(nc, framework.WithConcurrency(s.cfg.conc))
	if err != nil {
		return 0, err
	}
	w.HandleFunc(jetflowType, func(context.Context, *framework.Task) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	})
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	werr := waitDone(ctx, finished, s.cfg.timeout, "the jetflow drain")
	elapsed := time.Since(start)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil && werr == nil {
		werr = err
	}
	return float64(n) / elapsed.Seconds(), werr
}

func (s *jetflowSystem) enqueueOne(ctx context.Context, n int) (float64, error) {
	p := json.RawMessage(payload)
	start := time.Now()
	for range n {
		if _, err := s.cl.Enqueue(ctx, jetflowType, p); err != nil {
			return 0, err
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, s.purge(ctx)
}

func (s *jetflowSystem) enqueueBulk(ctx context.Context, n int) (float64, error) {
	jobs := s.jobs(n)
	start := time.Now()
	if _, err := s.cl.EnqueueMany(ctx, jobs); err != nil {
		return 0, err
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, s.purge(ctx)
}
