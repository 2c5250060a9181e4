package topology_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestEnsureConsumerRetriesUnansweredRequest loses the first JetStream API
// request of EnsureConsumer (as a request to a consumer whose leader is
// being elected goes unanswered) and checks that the attempt is abandoned
// after its own deadline and tried again, so the consumer is ensured well
// within a caller's deadline that is three attempt deadlines long; waiting
// on the lost request for the caller's whole deadline fails.
func TestEnsureConsumerRetriesUnansweredRequest(t *testing.T) {
	t.Parallel()
	const per = 500 * time.Millisecond
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	// A JetStream API on "lossy.api" that drops its first request and
	// relays the others to the server's API.
	var requests, lost atomic.Int32
	sub, err := nc.Subscribe("lossy.api.>", func(m *nats.Msg) {
		if requests.Add(1) == 1 {
			lost.Add(1)
			return
		}
		resp, err := nc.Request("$JS.API."+strings.TrimPrefix(m.Subject, "lossy.api."), m.Data, 5*time.Second)
		if err != nil {
			t.Errorf("relay %s: %v", m.Subject, err)
			return
		}
		if err := m.Respond(resp.Data); err != nil {
			t.Errorf("respond: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	lossy, err := jetstream.NewWithAPIPrefix(nc, "lossy.api")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*per)
	defer cancel()
	c, err := topology.EnsureConsumerWithin(ctx, lossy, streams.MustNames(""), topology.ConsumerSpec{TaskType: "mail.send"}, per)
	if err != nil {
		t.Fatalf("EnsureConsumer with its first request lost: %v (requests %d)", err, requests.Load())
	}
	if lost.Load() != 1 || requests.Load() < 2 || c.CachedInfo().Config.FilterSubject != "jetflow.task.normal.mail.send" {
		t.Errorf("lost %d of %d requests; consumer %+v", lost.Load(), requests.Load(), c.CachedInfo().Config)
	}
}
