package testutil_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestClusterFailoverAndRestart(t *testing.T) {
	t.Parallel()
	c := testutil.RunCluster(t, 3)
	if got := len(c.ClientURLs()); got != 3 {
		t.Fatalf("ClientURLs: %d URLs, want 3", got)
	}
	_, js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("replicas = %d", r)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "t.x", []byte(fmt.Sprint(i)), jetstream.WithMsgID(fmt.Sprint(i)),
				jetstream.WithRetryAttempts(100), jetstream.WithRetryWait(50*time.Millisecond)); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, 10)

	leader := c.StreamLeader(t, "T")
	c.StopNode(leader)
	if c.Server(leader) != nil {
		t.Fatal("stopped node still listed")
	}
	next := c.StreamLeader(t, "T")
	if next == leader {
		t.Fatalf("leader %d still leads after it stopped", leader)
	}
	publish(10, 20)

	c.RestartNode(t, leader)
	c.WaitJetStreamReady(t)
	c.WaitStreamCurrent(t, "T")
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 20 {
		t.Fatalf("stream holds %d messages, want 20", info.State.Msgs)
	}
	before := c.StreamLeader(t, "T")
	if got := c.StepDownStream(t, "T"); got == before {
		t.Fatalf("step down kept leader %d", got)
	}

	if _, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if i := c.ConsumerLeader(t, "T", "C"); i < 0 || i >= c.Size() {
		t.Fatalf("consumer leader %d", i)
	}
}
