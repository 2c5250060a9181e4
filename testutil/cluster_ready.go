package testutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WaitJetStreamReady waits until the running nodes have a JetStream meta
// leader, every running node is current with it and the JetStream API
// answers, and fails the test after [DefaultClusterWait].
func (c *Cluster) WaitJetStreamReady(tb TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), DefaultClusterWait)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		tb.Fatalf("%v", err)
	}
}

// WaitReady is [Cluster.WaitJetStreamReady] without a test: it returns an
// error when ctx ends first.
func (c *Cluster) WaitReady(ctx context.Context) error {
	err := c.poll(ctx, func() bool {
		leader, running := false, 0
		for _, s := range c.Servers() {
			if s == nil {
				continue
			}
			running++
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				// Every running node must be known to the leader.
				leader = len(s.JetStreamClusterPeers()) >= running
			}
		}
		if !leader {
			return false
		}
		// A meta leader is not the whole story: check that an API
		// request is answered, and that a replicated stream can be
		// placed (the leader places streams only on peers whose
		// resources it has heard of, a moment after they joined: before
		// that a create answers "no suitable peers for placement").
		return c.apiAnswers(ctx) && c.canPlace(ctx, min(running, 3))
	})
	if err != nil {
		return fmt.Errorf("testutil: cluster JetStream not ready: %w", err)
	}
	return nil
}

func (c *Cluster) apiAnswers(ctx context.Context) bool {
	return c.probe(ctx, 2*time.Second, func(ctx context.Context, js jetstream.JetStream) bool {
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
}

// probe runs f on a connection of its own that does not reconnect, bounded
// by timeout; false when the connection fails.
func (c *Cluster) probe(ctx context.Context, timeout time.Duration, f func(context.Context, jetstream.JetStream) bool) bool {
	nc, err := c.ConnectURL(nats.MaxReconnects(0))
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(pctx, js)
}

// placementProbe is the stream [Cluster.WaitReady] creates and deletes to
// see that replicated streams can be placed.
const placementProbe = "TESTUTIL_PLACEMENT_PROBE"

// canPlace reports whether a stream of the given replicas can be created
// now; the probe is deleted again.
func (c *Cluster) canPlace(ctx context.Context, replicas int) bool {
	return c.probe(ctx, 5*time.Second, func(ctx context.Context, js jetstream.JetStream) bool {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: placementProbe, Subjects: []string{"_testutil.placement_probe"},
			Storage: jetstream.MemoryStorage, Replicas: replicas})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false
		}
		return js.DeleteStream(ctx, placementProbe) == nil
	})
}
