package streams_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// The deployment owns the movers' consumer: Ensure creates it, and sets
// back what a worker (or anyone) changed in it, so that workers need no
// right to create or change it. What the server cannot change in place is
// drift.
func TestEnsureOwnsTheMoversConsumer(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	n := streams.MustNames("")
	want := streamdefs.DelayConsumerConfig(n)
	c, err := js.Consumer(ctx, n.DelayStream(), n.DelayConsumer())
	if err != nil {
		t.Fatalf("the movers' consumer after Ensure: %v", err)
	}
	if got := c.CachedInfo().Config; got.AckWait != want.AckWait || got.MaxAckPending != want.MaxAckPending || got.FilterSubject != "" {
		t.Errorf("the movers' consumer: %+v", got)
	}
	// A worker that could change it filters on nothing: every delayed task
	// would wait for good.
	changed := want
	changed.FilterSubject = n.DelaySubject("nothing")
	changed.MaxAckPending = 1
	if _, err := js.UpdateConsumer(ctx, n.DelayStream(), changed); err != nil {
		t.Fatal(err)
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const name = "JETFLOW_DELAYS/mover"
	if !slices.Equal(rep.Updated, []string{name}) {
		t.Errorf("Ensure after the change: %+v, want %s updated", rep, name)
	}
	c, err = js.Consumer(ctx, n.DelayStream(), n.DelayConsumer())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config; got.FilterSubject != "" || got.MaxAckPending != want.MaxAckPending {
		t.Errorf("after Ensure: filter %q, max ack pending %d", got.FilterSubject, got.MaxAckPending)
	}
	// A push consumer cannot become a pull consumer in place: reported,
	// consumer kept.
	if err := js.DeleteConsumer(ctx, n.DelayStream(), n.DelayConsumer()); err != nil {
		t.Fatal(err)
	}
	push := jetstream.ConsumerConfig{Durable: want.Durable, DeliverSubject: "elsewhere", AckPolicy: want.AckPolicy,
		AckWait: want.AckWait, MaxDeliver: want.MaxDeliver, MaxAckPending: want.MaxAckPending}
	if _, err := js.CreatePushConsumer(ctx, n.DelayStream(), push); err != nil {
		t.Fatal(err)
	}
	rep, err = streams.Ensure(ctx, js, streams.Config{})
	if !errors.Is(err, streams.ErrDrift) || len(rep.Drift) != 1 || rep.Drift[0].Resource != name || rep.Drift[0].Field != "DeliverSubject" {
		t.Errorf("Ensure on a push consumer: %v, drift %v; want its DeliverSubject as drift", err, rep.Drift)
	}
}
