package framework_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestStartEnsuresEveryConsumer checks that Start, which ensures consumers
// several at a time, leaves one consumer per registered (type, priority)
// pair, each consumed: more pairs than it ensures at once.
func TestStartEnsuresEveryConsumer(t *testing.T) {
	const types = 6 // 24 pairs
	e := newEnv(t)
	w := e.worker(t)
	var ran atomic.Int64
	all := make(chan struct{})
	for i := range types {
		w.HandleFunc(fmt.Sprintf("start.t%d", i), func(context.Context, *framework.Task) error {
			if ran.Add(1) == types*int64(len(streams.Priorities)) {
				close(all)
			}
			return nil
		})
	}
	startWorker(t, w)
	for i := range types {
		for _, p := range streams.Priorities {
			e.consumerInfo(t, fmt.Sprintf("start.t%d", i), p) // fails the test if missing
			e.enqueue(t, fmt.Sprintf("start.t%d", i), nil, framework.WithPriority(p))
		}
	}
	testutil.Recv(t, all, waitLong, "a task of every (type, priority) pair")
}

// TestStartReportsTheFailingConsumer checks that when one consumer cannot
// be ensured, Start returns that consumer's error, not the cancellation it
// caused in the others, and that the worker is then closed.
func TestStartReportsTheFailingConsumer(t *testing.T) {
	e := newEnv(t)
	names := streams.MustNames("")
	// A consumer with the name of start.bad's normal consumer that filters
	// another type's subject.
	if _, err := e.js.CreateConsumer(t.Context(), names.TaskStream(), jetstream.ConsumerConfig{
		Durable:       names.ConsumerName("start.bad", streams.PriorityNormal),
		FilterSubject: names.TaskSubject(streams.PriorityNormal, "start.other"),
		AckPolicy:     jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	w := e.worker(t)
	noop := func(context.Context, *framework.Task) error { return nil }
	w.HandleFunc("start.first", noop)
	w.HandleFunc("start.bad", noop)
	for i := range 4 {
		w.HandleFunc(fmt.Sprintf("start.after%d", i), noop)
	}
	err := w.Start(t.Context())
	if !errors.Is(err, streams.ErrDrift) {
		t.Fatalf("Start = %v, want an error wrapping streams.ErrDrift", err)
	}
	if err := w.Start(t.Context()); !errors.Is(err, framework.ErrWorkerClosed) {
		t.Fatalf("second Start = %v, want ErrWorkerClosed", err)
	}
}
