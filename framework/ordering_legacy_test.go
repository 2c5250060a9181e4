package framework_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// publishLegacy publishes ev as a producer of an earlier version did: on
// the slot subject of its key in the old layout, "<prefix>.ord.<type>.<slot>".
func (e *env) publishLegacy(t *testing.T, taskType string, ev orderEvent) {
	t.Helper()
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	subject := streams.MustNames("").LegacyOrderedSubject(taskType, ordering.Slot(ev.Key, streamdefs.OrderedSlots))
	if _, err := e.js.Publish(t.Context(), subject, data); err != nil {
		t.Fatal(err)
	}
}

// orderedFilters returns the filter subjects of partition p of 4 of
// taskType's ordered consumers.
func (e *env) orderedFilters(t *testing.T, taskType string, p int) []string {
	t.Helper()
	names := streams.MustNames("")
	c, err := e.js.Consumer(t.Context(), names.TaskStream(), names.OrderedConsumerName(taskType, 4, p))
	if err != nil {
		t.Fatal(err)
	}
	return c.CachedInfo().Config.FilterSubjects
}

// In a deployment an earlier version created, the tasks its producers
// published on the old slot subjects, before the worker started and after,
// run in stream order with the later tasks of their keys. In one this
// version created, an ordered partition has one filter.
func TestOrderedTasksOfEarlierProducers(t *testing.T) {
	t.Parallel()
	t.Run("created by an earlier version", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		names := streams.MustNames("")
		s, err := e.js.Stream(t.Context(), names.TaskStream())
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.Metadata = nil // as an earlier version created it
		if _, err := e.js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		const keys = 6
		key := func(k int) string { return "legacy-" + string(rune('a'+k)) }
		c := newOrderChecker(keys * 4)
		for k := range keys { // events 0 and 1 from an earlier producer, 2 from this version's
			e.publishLegacy(t, "order.old", orderEvent{Key: key(k), N: 0})
			e.publishLegacy(t, "order.old", orderEvent{Key: key(k), N: 1})
			e.enqueue(t, "order.old", orderEvent{Key: key(k), N: 2}, framework.Ordered(key(k)))
		}
		w := e.worker(t, framework.WithConcurrency(4))
		framework.Handle(w, "order.old", func(_ context.Context, _ *framework.Task, ev orderEvent) error {
			c.start(ev)
			c.end(ev, true)
			return nil
		}, framework.WithOrdering(framework.Ordering{Partitions: 4}))
		startWorker(t, w)
		for k := range keys { // event 3 from an earlier producer still running
			e.publishLegacy(t, "order.old", orderEvent{Key: key(k), N: 3})
		}
		c.wait(t)
		if got := e.orderedFilters(t, "order.old", 1); len(got) != 1+streamdefs.OrderedSlots/4 {
			t.Errorf("partition 1 of 4: %d filters, want the bits filter and %d old slot subjects", len(got), streamdefs.OrderedSlots/4)
		}
	})
	t.Run("created by this version", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		w := e.worker(t)
		framework.Handle(w, "order.new", func(context.Context, *framework.Task, orderEvent) error { return nil },
			framework.WithOrdering(framework.Ordering{Partitions: 4}))
		startWorker(t, w)
		names := streams.MustNames("")
		if got := e.orderedFilters(t, "order.new", 1); len(got) != 1 || got[0] != names.OrderedFilter("order.new", 4, 1) {
			t.Errorf("partition 1 of 4 filters %v, want the bits filter alone", got)
		}
	})
}
