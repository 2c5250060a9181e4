package jsapi_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/testutil"
)

// directStream starts a server with stream D (direct gets allowed) holding
// n messages on d.<i%3> with data "<i>", i from 1.
func directStream(t *testing.T, n int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "D", Subjects: []string{"d.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		h := nats.Header{"Status": {"409"}} // a hostile header: read as data, not as a status
		if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: "d." + strconv.Itoa(i%3), Header: h, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	return nc, js
}

func collect(t *testing.T, nc *nats.Conn, req jsapi.GetRequest) []jsapi.Stored {
	t.Helper()
	var out []jsapi.Stored
	n, err := jsapi.DirectGet(t.Context(), nc, "D", req, func(m jsapi.Stored) error { out = append(out, m); return nil })
	if err != nil || n != len(out) {
		t.Fatalf("DirectGet(%+v) = %d, %v with %d calls", req, n, err, len(out))
	}
	return out
}

func TestDirectGet(t *testing.T) {
	t.Parallel()
	nc, _ := directStream(t, 10)
	one := collect(t, nc, jsapi.GetRequest{Seq: 4})
	if len(one) != 1 || one[0].Seq != 4 || string(one[0].Data) != "4" || one[0].Subject != "d.1" || one[0].Time.IsZero() {
		t.Fatalf("seq 4: %+v", one)
	}
	if got := collect(t, nc, jsapi.GetRequest{Seq: 99}); len(got) != 0 {
		t.Errorf("a missing sequence gave %d messages", len(got))
	}
	batch := collect(t, nc, jsapi.GetRequest{Seq: 2, NextFor: "d.2", Batch: 10})
	if len(batch) != 3 || batch[0].Seq != 2 || batch[2].Seq != 8 || batch[2].NumPending != 0 {
		t.Errorf("batch on d.2: %d messages %+v", len(batch), batch)
	}
	last := collect(t, nc, jsapi.GetRequest{MultiLastFor: []string{"d.*"}, Batch: 8})
	if len(last) != 3 || last[len(last)-1].Seq != 10 {
		t.Errorf("multi-last: %+v", last)
	}
	if _, err := jsapi.DirectGet(t.Context(), nc, "D", jsapi.GetRequest{MultiLastFor: []string{"d.*"}}, nil); err == nil {
		t.Error("a multi-last request without a batch size was sent")
	}
	for _, req := range []jsapi.GetRequest{{Seq: 1}, {Seq: 1, Batch: 2}} {
		if _, err := jsapi.DirectGet(t.Context(), nc, "NONE", req, nil); !errors.Is(err, jsapi.ErrNoStream) {
			t.Errorf("missing stream (%+v): %v; want ErrNoStream", req, err)
		}
	}
	boom := errors.New("boom")
	if _, err := jsapi.DirectGet(t.Context(), nc, "D", jsapi.GetRequest{Seq: 1, Batch: 5}, func(jsapi.Stored) error { return boom }); err != boom {
		t.Errorf("callback error: %v", err)
	}
}

// Scan walks a filter in batches between bounds, from a time, and stops
// when asked.
func TestScan(t *testing.T) {
	t.Parallel()
	nc, js := directStream(t, 25)
	scan := func(filter string, from, to uint64, start time.Time, stopAt uint64) []uint64 {
		t.Helper()
		var seqs []uint64
		err := jsapi.Scan(t.Context(), nc, "D", filter, from, to, start, 4, func(m jsapi.Stored) (bool, error) {
			seqs = append(seqs, m.Seq)
			return m.Seq != stopAt, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	if got := scan("d.>", 0, 0, time.Time{}, 0); len(got) != 25 || got[24] != 25 {
		t.Errorf("everything: %v", got)
	}
	if got := scan("d.0", 0, 0, time.Time{}, 0); len(got) != 8 || got[0] != 3 {
		t.Errorf("d.0: %v", got)
	}
	if got := scan("d.>", 5, 11, time.Time{}, 0); len(got) != 7 || got[0] != 5 || got[6] != 11 {
		t.Errorf("5 to 11: %v", got)
	}
	// A sparse filter: the batch reaches past the bound, which is kept.
	if got := scan("d.0", 1, 7, time.Time{}, 0); len(got) != 2 || got[0] != 3 || got[1] != 6 {
		t.Errorf("d.0 from 1 to 7: %v; want [3 6]", got)
	}
	if got := scan("d.>", 20, 10, time.Time{}, 0); len(got) != 0 {
		t.Errorf("from past to: %v", got)
	}
	if got := scan("d.>", 1, 0, time.Time{}, 6); len(got) != 6 {
		t.Errorf("stopped at 6: %v", got)
	}
	stream, err := js.Stream(t.Context(), "D")
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(t.Context(), 20)
	if err != nil {
		t.Fatal(err)
	}
	if got := scan("d.>", 0, 0, m.Time, 0); len(got) == 0 || got[0] > 20 || got[len(got)-1] != 25 {
		t.Errorf("from the time of 20: %v", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := jsapi.Scan(ctx, nc, "D", "d.>", 0, 0, time.Time{}, 4, func(jsapi.Stored) (bool, error) { return true, nil }); err == nil {
		t.Error("Scan with an ended context succeeded")
	}
}

func TestPurgeSubject(t *testing.T) {
	t.Parallel()
	nc, _ := directStream(t, 9)
	n, err := jsapi.PurgeSubject(t.Context(), nc, "D", "d.1")
	if err != nil || n != 3 {
		t.Errorf("purge d.1 = %d, %v; want 3", n, err)
	}
	if n, err := jsapi.PurgeSubject(t.Context(), nc, "D", "d.1"); err != nil || n != 0 {
		t.Errorf("purge again = %d, %v; want 0", n, err)
	}
	if _, err := jsapi.PurgeSubject(t.Context(), nc, "NONE", "d.1"); err == nil {
		t.Error("purge of a missing stream succeeded")
	}
}

// Buckets live like the task stream; an existing bucket keeps its
// settings unless asked to take the TTL; the cache creates a missing
// bucket once.
func TestBuckets(t *testing.T) {
	t.Parallel()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"t.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	cfg := jsapi.TaskStreamBucket(ctx, js, "TASKS", jetstream.KeyValueConfig{Bucket: "B", TTL: time.Hour})
	if cfg.Storage != jetstream.MemoryStorage {
		t.Errorf("bucket storage %v; want the task stream's (memory)", cfg.Storage)
	}
	if got := jsapi.TaskStreamBucket(ctx, js, "NONE", jetstream.KeyValueConfig{Bucket: "B"}); got.Storage != jetstream.FileStorage {
		t.Errorf("without a task stream: storage %v", got.Storage)
	}
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		kv, err := js.KeyValue(ctx, "B")
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TTL()
	}
	cfg.TTL = 2 * time.Hour
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil || ttl() != time.Hour {
		t.Errorf("without setTTL: %v, TTL %v; want kept at 1h", err, ttl())
	}
	if err := jsapi.EnsureBucket(ctx, js, cfg, true); err != nil || ttl() != 2*time.Hour {
		t.Errorf("with setTTL: %v, TTL %v; want 2h", err, ttl())
	}
	if err := jsapi.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: "bad name"}, false); err == nil {
		t.Error("a bucket with an invalid name was created")
	}

	var c jsapi.BucketCache
	created := 0
	create := func(ctx context.Context) error {
		created++
		return jsapi.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: "C"}, false)
	}
	kv, err := c.Get(ctx, js, "C", create)
	if err != nil || kv == nil {
		t.Fatal(err)
	}
	if again, err := c.Get(ctx, js, "C", create); err != nil || again != kv || created != 1 {
		t.Errorf("second Get: %v, same %v, created %d times", err, again == kv, created)
	}
	var failing jsapi.BucketCache
	boom := errors.New("no permission")
	if _, err := failing.Get(ctx, js, "D", func(context.Context) error { return boom }); err != boom {
		t.Errorf("a failing create: %v", err)
	}
}
