package queuestate

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/testutil"
)

// queueStream starts a server with stream Q (work subjects q.<type>,
// schedules s.<id>, direct gets allowed) and a connection to it.
func queueStream(t *testing.T) (*nats.Conn, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	s, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>", "s.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, s
}

func publish(t *testing.T, js jetstream.JetStream, subjects ...string) {
	t.Helper()
	for _, subj := range subjects {
		if _, err := js.Publish(t.Context(), subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// Activities reports each queue consumer's counts and dates its oldest
// waiting task; consumers that are not queues are left out.
func TestActivities(t *testing.T) {
	t.Parallel()
	nc, js, s := queueStream(t)
	ctx := t.Context()
	publish(t, js, "q.a", "q.a", "q.a", "q.b")
	a, err := js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: "a", FilterSubject: "q.a", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "other"} {
		filter := "q." + name
		if name == "other" {
			filter = "s.>"
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.PauseConsumer(ctx, "Q", "b", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fetch(1, jetstream.FetchMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var acts []Activity
	testutil.Wait(t, 10*time.Second, "the counts", func() bool {
		acts, err = Activities(ctx, nc, s, "Q", func(f string) bool { return strings.HasPrefix(f, "q.") })
		return err == nil && len(acts) == 2 && acts[0].InFlight+acts[1].InFlight == 1
	})
	byName := map[string]Activity{}
	for _, act := range acts {
		byName[act.Consumer] = act
	}
	ga, gb := byName["a"], byName["b"]
	if ga.Filter != "q.a" || ga.Delivered != 1 || ga.Waiting != 2 || ga.InFlight != 1 || ga.LastDelivery.IsZero() || ga.OldestWaiting.IsZero() {
		t.Errorf("a: %+v", ga)
	}
	if !gb.Paused || time.Until(gb.PausedUntil) < 50*time.Minute || gb.Waiting != 1 {
		t.Errorf("b: %+v", gb)
	}
	if _, ok := byName["other"]; ok {
		t.Error("a consumer that is no queue was reported")
	}
}

// ScanSchedules visits every schedule up to max and says when there were
// more.
func TestScanSchedules(t *testing.T) {
	t.Parallel()
	nc, js, _ := queueStream(t)
	publish(t, js, "s.one", "q.a", "s.two", "s.three")
	var ids []string
	visit := func(id string, _ jsapi.Stored) { ids = append(ids, id) }
	truncated, err := ScanSchedules(t.Context(), nc, "Q", "s.", 10, visit)
	if err != nil || truncated || strings.Join(ids, ",") != "one,two,three" {
		t.Errorf("all: %v, truncated %v, %v", ids, truncated, err)
	}
	ids = nil
	truncated, err = ScanSchedules(t.Context(), nc, "Q", "s.", 2, visit)
	if err != nil || !truncated || len(ids) != 2 {
		t.Errorf("at most 2: %v, truncated %v, %v", ids, truncated, err)
	}
}

// Stranded reports the subjects no consumer reads, oldest first, at most
// max.
func TestStranded(t *testing.T) {
	t.Parallel()
	nc, js, s := queueStream(t)
	ctx := t.Context()
	publish(t, js, "q.gone", "q.read", "q.lost", "q.lost", "q.multi.x")
	for _, cfg := range []jetstream.ConsumerConfig{
		{Durable: "read", FilterSubject: "q.read"},
		{Durable: "multi", FilterSubjects: []string{"q.multi.*", "s.>"}},
	} {
		if _, err := js.CreateOrUpdateConsumer(ctx, "Q", cfg); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Stranded(ctx, nc, s, "Q", []string{"q.>"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Subject != "q.gone" || got[1].Subject != "q.lost" || got[1].Tasks != 2 || got[0].Oldest.IsZero() || got[0].Age < 0 {
		t.Fatalf("Stranded = %+v; want q.gone then q.lost (2 tasks)", got)
	}
	if got, err := Stranded(ctx, nc, s, "Q", []string{"q.>"}, 1); err != nil || len(got) != 1 || got[0].Subject != "q.gone" {
		t.Errorf("at most 1: %+v, %v", got, err)
	}
	if got, err := Stranded(ctx, nc, s, "Q", []string{"nothing.>"}, 10); err != nil || got != nil {
		t.Errorf("an empty wildcard: %+v, %v", got, err)
	}
}
