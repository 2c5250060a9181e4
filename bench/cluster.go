package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// figClusterDrain is the figure name of [runClusterDrain].
const figClusterDrain = "cluster_drain"

// clusterReplicas is the cluster size and the replica count of every stream
// of the cluster_drain figure.
const clusterReplicas = 3

// runClusterDrain measures the drain figure on a three-node embedded
// cluster with R3 streams, and prints
//
//	RESULT cluster_drain replicas=3 jetflow_per_s=… raw_per_s=… ratio=… n=… runs=…
//
// The method is the drain figure's, unchanged (same env methods, same
// consumer configuration, state tracking off on both sides): n tasks are
// pre-enqueued, then drained by a jetflow worker or by cfg.concurrency raw
// goroutines pulling and acking, alternately cfg.runs times, and the medians
// are reported. Clients connect in-process to the first node; every stream
// write and every ack is replicated to the two other nodes over loopback
// routes, which is what the figure adds to the single-server one.
func runClusterDrain(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	e, shutdown, err := newClusterEnv(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer shutdown()
	var rawRates, jfRates []float64
	// Each side starts on a new task stream, as in the drain figure (env.fresh,
	// decision 029): the three servers of the cluster each keep the ID table
	// of the stream, in the bench's heap.
	drainRaw, drainJetflow := e.fresh(e.drainRawRun), e.fresh(e.drainJetflowRun)
	for r := 1; r <= cfg.runs; r++ {
		rr, err := drainRaw(ctx)
		if err != nil {
			return fmt.Errorf("raw run %d: %w", r, err)
		}
		e.progress("%s run %d/%d raw:     %8.0f tasks/s", figClusterDrain, r, cfg.runs, rr.rate)
		jr, err := drainJetflow(ctx)
		if err != nil {
			return fmt.Errorf("jetflow run %d: %w", r, err)
		}
		e.progress("%s run %d/%d jetflow: %8.0f tasks/s (ratio %.3f)", figClusterDrain, r, cfg.runs, jr.rate, jr.rate/rr.rate)
		rawRates = append(rawRates, rr.rate)
		jfRates = append(jfRates, jr.rate)
	}
	mr, mj := median(rawRates), median(jfRates)
	ratio := 0.0
	if mr > 0 {
		ratio = mj / mr
	}
	printResult(stdout, figClusterDrain, fint("replicas", clusterReplicas), frate("jetflow_per_s", mj),
		frate("raw_per_s", mr), fratio("ratio", ratio), fint("n", cfg.n), fint("runs", cfg.runs))
	return nil
}

// newClusterEnv starts a three-node cluster and returns an env whose
// connections go to its first node, with the topology ensured at R3.
// shutdown stops the cluster and removes its stores.
func newClusterEnv(ctx context.Context, cfg config, stderr io.Writer) (_ *env, shutdown func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-cluster-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: store dir: %w", err)
	}
	e := &env{cfg: cfg, stderr: stderr, names: streams.MustNames("")}
	var c *testutil.Cluster
	shutdown = func() {
		if e.admin != nil {
			e.admin.Close()
		}
		if c != nil {
			c.Shutdown()
		}
		_ = os.RemoveAll(dir)
	}
	// A return with an error sets shutdown to nil before this runs: keep
	// the function to call.
	cleanup := shutdown
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	c, err = testutil.StartCluster(clusterReplicas, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if err := c.WaitReady(ctx); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	e.srv = c.Server(0).Server
	e.cluster = c
	e.progress("%d-node cluster ready", clusterReplicas)
	if e.admin, err = e.connect(); err != nil {
		return nil, nil, err
	}
	if e.js, err = jetstream.New(e.admin); err != nil {
		return nil, nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	if _, err := streams.Ensure(ctx, e.js, e.topology()); err != nil {
		return nil, nil, fmt.Errorf("bench: ensure R%d topology: %w", clusterReplicas, err)
	}
	if err := framework.EnsureBuckets(ctx, e.js); err != nil {
		return nil, nil, fmt.Errorf("bench: ensure buckets: %w", err)
	}
	if e.stream, err = e.js.Stream(ctx, e.names.TaskStream()); err != nil {
		return nil, nil, fmt.Errorf("bench: task stream: %w", err)
	}
	pad := max(cfg.payloadSize-len(`{"pad":""}`), 0)
	e.payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	return e, shutdown, nil
}
