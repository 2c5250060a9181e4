package framework_test

import (
	"cmp"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// The enqueue benchmarks compare Client.Enqueue and Client.EnqueueMany with
// what a nats.go user writes for the same semantics (a publish with a
// Nats-Msg-Id), on one embedded server. Allocations per operation are the
// figure to watch: the rates swing with the machine, see docs/benchmarks.md
// for the throughput figures (go -C bench run . -only enqueue,enqueue_one).

var benchPayload = json.RawMessage(`{"order":12345,"customer":"c-0001","amount":42.5,"note":"bench"}`)

func BenchmarkEnqueue(b *testing.B) {
	te := testutil.NewEnv(b, streams.Config{AllowTaskPurge: true})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var payload any = benchPayload
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cl.Enqueue(ctx, "bench", payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueueRawPublish(b *testing.B) {
	te := testutil.NewEnv(b, streams.Config{AllowTaskPurge: true})
	subject := streams.MustNames("").TaskSubject(streams.PriorityNormal, "bench")
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		m := &nats.Msg{Subject: subject, Data: benchPayload, Header: nats.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
		if _, err := te.JS.PublishMsg(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueueMany(b *testing.B) {
	te := testutil.NewEnv(b, streams.Config{AllowTaskPurge: true})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	jobs := make([]framework.TaskSpec, batch)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "bench", Payload: benchPayload}
	}
	ctx := b.Context()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		purgeEvery(b, te, i)
		if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}

func BenchmarkEnqueueManyRawPublishAsync(b *testing.B) {
	te := testutil.NewEnv(b, streams.Config{AllowTaskPurge: true})
	subject := streams.MustNames("").TaskSubject(streams.PriorityNormal, "bench")
	js, err := jetstream.New(te.Conn, jetstream.WithPublishAsyncMaxPending(framework.DefaultMaxPending))
	if err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	ctx := b.Context()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		purgeEvery(b, te, i)
		futures := make(chan jetstream.PubAckFuture, framework.DefaultMaxPending)
		done := make(chan error, 1)
		go func() {
			var first error
			for f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					first = cmp.Or(first, err)
				case <-ctx.Done():
					first = cmp.Or(first, ctx.Err())
				}
			}
			done <- first
		}()
		for range batch {
			m := &nats.Msg{Subject: subject, Data: benchPayload, Header: nats.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			futures <- f
		}
		close(futures)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}

// purgeEvery empties the task stream every 1,000 batches, outside the
// timer, so that a long -benchtime stays within the test server's store.
func purgeEvery(b *testing.B, te *testutil.Env, i int) {
	if i == 0 || i%1000 != 0 {
		return
	}
	b.StopTimer()
	defer b.StartTimer()
	s, err := te.JS.Stream(b.Context(), streams.MustNames("").TaskStream())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Purge(b.Context()); err != nil {
		b.Fatal(err)
	}
}
