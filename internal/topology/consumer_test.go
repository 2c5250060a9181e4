package topology_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func jsContext(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := testutil.RunServer(t)
	_, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, js
}

func TestEnsureConsumer(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	names := streams.MustNames("")
	spec := topology.ConsumerSpec{TaskType: "a.b", Priority: streams.PriorityHigh}

	if _, err := topology.EnsureConsumer(ctx, js, names, spec); !errors.Is(err, jetstream.ErrStreamNotFound) ||
		!strings.Contains(err.Error(), "streams.Ensure") {
		t.Fatalf("EnsureConsumer without stream = %v, want a hint to call Ensure", err)
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	c, err := topology.EnsureConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if cfg.Durable != "a_b-high" || cfg.FilterSubject != "jetflow.task.high.a.b" || cfg.AckPolicy != jetstream.AckExplicitPolicy ||
		cfg.MaxDeliver != topology.DefaultMaxDeliver || cfg.AckWait != topology.DefaultAckWait ||
		cfg.MaxAckPending != topology.DefaultMaxAckPending || cfg.Metadata[topology.MetaTaskType] != "a.b" ||
		cfg.Metadata[topology.MetaPriority] != "high" {
		t.Errorf("consumer config %+v", cfg)
	}

	// "a_b" maps to the same consumer name: refused, not silently shared.
	_, err = topology.EnsureConsumer(ctx, js, names, topology.ConsumerSpec{TaskType: "a_b", Priority: streams.PriorityHigh})
	if !errors.Is(err, streams.ErrDrift) || !strings.Contains(err.Error(), "a_b-high") {
		t.Fatalf("colliding consumer: %v, want ErrDrift naming the consumer", err)
	}

	// A changed limit is updated in place, and a pause survives it.
	until := time.Now().Add(time.Hour).UTC()
	if _, err := js.PauseConsumer(ctx, names.TaskStream(), "a_b-high", until); err != nil {
		t.Fatal(err)
	}
	spec.MaxDeliver = 3
	spec.AckWait = 5 * time.Second
	c, err = topology.EnsureConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.MaxDeliver != 3 || ci.Config.AckWait != 5*time.Second {
		t.Errorf("updated config %+v", ci.Config)
	}
	if !ci.Paused || ci.Config.PauseUntil == nil || !ci.Config.PauseUntil.Equal(until) {
		t.Errorf("pause lost by the update: paused=%v until=%v", ci.Paused, ci.Config.PauseUntil)
	}

	for _, bad := range []topology.ConsumerSpec{{TaskType: "A"}, {TaskType: "a", Priority: 9}} {
		if _, err := topology.EnsureConsumer(ctx, js, names, bad); !errors.Is(err, streams.ErrInvalidTaskType) &&
			!errors.Is(err, streams.ErrInvalidPriority) {
			t.Errorf("spec %+v: %v", bad, err)
		}
	}
}
