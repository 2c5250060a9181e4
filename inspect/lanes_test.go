package inspect_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// A worker pulls the two lanes of a type: Lanes lists each lane, and a
// lane pinned to the worker (at its first delivery) with the worker's ID
// and its figures from the worker's registry record: a key's head running, two
// of its tasks queued behind it, until they settle. A consumer whose lane metadata is forged is not
// listed.
func TestLanesListedWithTheirOwners(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	op := inspect.New(cl)
	const typ = "lane.show"
	release := make(chan struct{})
	// One worker: with two, a lane may move once, as each plans on a
	// registry read a second late at most (TestLanesSpreadOverWorkers).
	for _, id := range []string{"w1"} {
		w, err := framework.NewWorker(cl.Conn(), framework.WithWorkerID(id), framework.WithConcurrency(4),
			framework.WithTimings(framework.Timings{RegistryInterval: framework.MinRegistryInterval}))
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			if task.Header(framework.HeaderOrderingKey) == "hold" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 2}))
		testutil.StartWorker(t, w)
	}
	forged := jetstream.ConsumerConfig{Durable: "forged-lane", FilterSubject: cl.Names().TaskSubject(framework.PriorityNormal, "forged.lane"),
		AckPolicy: jetstream.AckExplicitPolicy, Metadata: map[string]string{"jetflow.type": typ, "jetflow.lane": "9/4"}}
	if _, err := cl.JetStream().CreateConsumer(ctx, cl.Names().TaskStream(), forged); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 30*time.Second, "the worker listed", func() bool {
		f, err := op.Workers(ctx)
		return err == nil && f.ByType()[typ] == 1
	})
	// A lane is pinned at its first delivery: keys for both lanes.
	for i := range 3 {
		if _, err := cl.Enqueue(ctx, typ, []byte(fmt.Sprint(i)), framework.Ordered("hold")); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 10 {
		if _, err := cl.Enqueue(ctx, typ, []byte(`0`), framework.Ordered(fmt.Sprint("key-", k))); err != nil {
			t.Fatal(err)
		}
	}
	var ls []inspect.Lane
	var hold inspect.Lane
	testutil.Wait(t, 30*time.Second, "the lane of key hold listed with its owner, its head running and two queued", func() bool {
		var err error
		ls, err = op.Lanes(ctx)
		if err != nil || len(ls) != 2 {
			return false
		}
		for _, l := range ls {
			if l.Running == 1 && l.Queued == 2 && l.Keys == 1 && l.Delivered == 3 && l.Open && l.Owner != "" {
				hold = l
				return true
			}
		}
		return false
	})
	if hold.Owner != "w1" || hold.PinnedSince.IsZero() ||
		!slices.Equal(hold.Busiest, []inspect.LaneKey{{Key: "hold", Running: 1, Queued: 2}}) {
		t.Errorf("the lane of key hold: %+v", hold)
	}
	// The same record's busiest keys reach the keys' view.
	keys, err := op.Keys(ctx, typ)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(keys, func(k inspect.KeyInfo) bool { return k.Key == "hold" }); i != 0 || keys[i].Running != 1 || keys[i].Queued != 2 {
		t.Errorf("keys %+v: want hold first, one running and two queued", keys)
	}
	for i, l := range ls {
		if l.Type != typ || l.Lane != i || l.Lanes != 2 || l.Partition != 0 || l.Consumer != cl.Names().LaneConsumerName(typ, 2, i) {
			t.Errorf("lane %d: %+v", i, l)
		}
	}
	close(release)
	testutil.Wait(t, 30*time.Second, "the lanes empty", func() bool {
		ls, err := op.Lanes(ctx)
		if err != nil || len(ls) != 2 {
			return false
		}
		for _, l := range ls {
			if l.Running+l.Queued+l.Delivered != 0 || l.Waiting != 0 {
				return false
			}
		}
		return true
	})
}
