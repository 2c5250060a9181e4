package enqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/testutil"
)

// info stands for framework.TaskInfo.
type info struct {
	id       string
	seq      uint64
	stream   string
	dup      bool
	traced   bool // the tracer was called before the publish
	resolved bool // the tracer got the result
}

// result is one report of a batch.
type result struct {
	i    int
	info info
	err  error
}

// batchRun is a batch of tasks on one connection and what it reported.
type batchRun struct {
	b       Batch[string, info]
	mu      sync.Mutex
	sends   []*nats.Msg // the messages given to Send
	tracerr []error     // the results the tracers got
}

var errFailed = errors.New("test: publish failed")

// newBatch returns a batch on nc with a window of size whose tasks are
// acknowledged within timeout; send stands for the synchronous publish
// (nil: Send fails the test).
func newBatch(t *testing.T, nc *nats.Conn, size int, timeout time.Duration, send func(*nats.Msg) (asyncpub.Ack, error)) *batchRun {
	r := &batchRun{}
	r.b = Batch[string, info]{Conn: nc, Window: size, AckTimeout: timeout, Stream: "S",
		Trace: func(ctx context.Context, msg *nats.Msg, in info) func(info, error) {
			return func(_ info, err error) {
				r.mu.Lock()
				r.tracerr = append(r.tracerr, err)
				r.mu.Unlock()
			}
		},
		Send: func(ctx context.Context, msg *nats.Msg) (asyncpub.Ack, error) {
			r.mu.Lock()
			r.sends = append(r.sends, msg)
			r.mu.Unlock()
			if send == nil {
				t.Errorf("Send(%s): no retry expected", msg.Subject)
				return asyncpub.Ack{}, errFailed
			}
			return send(msg)
		},
		Failed:  func(in info, err error) error { return fmt.Errorf("failed %s: %w", in.id, err) },
		Unacked: func(in info, err error) error { return fmt.Errorf("unacked %s: %w", in.id, err) },
		Stored: func(ctx context.Context, in info, ack asyncpub.Ack) info {
			in.seq, in.stream, in.dup, in.resolved = ack.Seq, ack.Stream, ack.Duplicate, true
			return in
		},
	}
	return r
}

// run publishes the tasks of ids to subject (an id "bad" fails to build)
// and returns the reports in the order they came.
func (r *batchRun) run(ctx context.Context, subject string, ids []string, n int) []result {
	var out []result
	r.b.Run(ctx, slices.All(ids), n, func(id string) (*nats.Msg, info, error) {
		if id == "bad" {
			return nil, info{}, errInvalid
		}
		m := &nats.Msg{Subject: subject, Data: []byte(id), Header: nats.Header{jetstream.MsgIDHeader: []string{id}}}
		return m, info{id: id, traced: true}, nil
	}, func(i int, in info, err error) { out = append(out, result{i, in, err}) })
	return out
}

func ids(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = "id-" + strconv.Itoa(i)
	}
	return s
}

// checkOrder fails unless out reports each of n tasks once, in order.
func checkOrder(t *testing.T, out []result, n int) {
	t.Helper()
	if len(out) != n {
		t.Fatalf("%d reports, want %d", len(out), n)
	}
	for i, r := range out {
		if r.i != i {
			t.Fatalf("report %d is for task %d", i, r.i)
		}
	}
}

// silent starts a server and a core subscriber on q.> that never answers,
// so that publishes to q.> are never acknowledged.
func silent(t *testing.T) *nats.Conn {
	t.Helper()
	nc, _ := testutil.JetStream(t, testutil.RunServer(t))
	sub, err := nc.SubscribeSync("q.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return nc
}

// Far more tasks than the window: each is stored once and reported in
// order with its acknowledgement; a task that cannot be built is reported
// in its place, and a duplicate ID is stored once.
func TestBatchStoresInOrder(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r := newBatch(t, nc, 4, time.Minute, nil)
	tasks := append(ids(100), "bad", "id-3")
	out := r.run(t.Context(), "s.a", tasks, len(tasks))
	checkOrder(t, out, len(tasks))
	for i, res := range out[:100] {
		if res.err != nil || res.info.seq != uint64(i+1) || res.info.stream != "S" || !res.info.resolved || res.info.dup {
			t.Fatalf("task %d: %+v, %v", i, res.info, res.err)
		}
	}
	if res := out[100]; !errors.Is(res.err, errInvalid) || res.info != (info{}) {
		t.Errorf("bad task: %+v, %v", res.info, res.err)
	}
	if res := out[101]; res.err != nil || !res.info.dup || res.info.seq != 4 {
		t.Errorf("duplicate: %+v, %v", res.info, res.err)
	}
	if len(r.tracerr) != 101 || slices.ContainsFunc(r.tracerr, func(err error) bool { return err != nil }) {
		t.Errorf("tracers got %d results: %v", len(r.tracerr), r.tracerr)
	}
	if st, err := js.Stream(t.Context(), "S"); err != nil || st.CachedInfo().State.Msgs != 100 {
		t.Errorf("stream: %v", err)
	}
}

// An acknowledgement that does not come within the timeout is retried
// with Send, without the window's reply subject; a failed retry is
// reported through Failed.
func TestBatchRetriesUnacknowledged(t *testing.T) {
	t.Parallel()
	nc := silent(t)
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			r := newBatch(t, nc, 2, 10*time.Millisecond, func(m *nats.Msg) (asyncpub.Ack, error) {
				if fail {
					return asyncpub.Ack{}, errFailed
				}
				n, _ := strconv.Atoi(string(m.Data[3:]))
				return asyncpub.Ack{Stream: "S", Seq: uint64(n + 10)}, nil
			})
			out := r.run(t.Context(), "q.a", ids(5), -1)
			checkOrder(t, out, 5)
			if len(r.sends) != 5 {
				t.Fatalf("%d retries, want 5", len(r.sends))
			}
			for _, m := range r.sends {
				if m.Reply != "" {
					t.Errorf("retried with reply %q", m.Reply)
				}
			}
			for i, res := range out {
				switch {
				case fail && (!errors.Is(res.err, errFailed) || res.err.Error() != "failed id-"+strconv.Itoa(i)+": "+errFailed.Error()):
					t.Errorf("task %d: %v", i, res.err)
				case !fail && (res.err != nil || res.info.seq != uint64(i+10) || !res.info.resolved):
					t.Errorf("task %d: %+v, %v", i, res.info, res.err)
				}
			}
			if failed := slices.ContainsFunc(r.tracerr, func(err error) bool { return err != nil }); len(r.tracerr) != 5 || failed != fail {
				t.Errorf("tracers got %v", r.tracerr)
			}
		})
	}
}

// When ctx ends, the task awaiting its acknowledgement is reported through
// Unacked and the tasks not yet published with ctx's error, in order.
func TestBatchContextEnds(t *testing.T) {
	t.Parallel()
	nc := silent(t)
	r := newBatch(t, nc, 4, time.Hour, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out []result
	seq := func(yield func(int, string) bool) {
		for i, id := range ids(3) {
			if i == 1 {
				cancel()
			}
			if !yield(i, id) {
				return
			}
		}
	}
	r.b.Run(ctx, seq, 3, func(id string) (*nats.Msg, info, error) {
		return &nats.Msg{Subject: "q.a", Data: []byte(id)}, info{id: id}, nil
	}, func(i int, in info, err error) { out = append(out, result{i, in, err}) })
	checkOrder(t, out, 3)
	if err := out[0].err; !errors.Is(err, context.Canceled) || err.Error() != "unacked id-0: context canceled" {
		t.Errorf("task 0: %v", err)
	}
	for _, res := range out[1:] {
		if res.err != context.Canceled {
			t.Errorf("task %d: %v", res.i, res.err)
		}
	}
	if len(r.tracerr) != 1 || r.tracerr[0] == nil {
		t.Errorf("tracers got %v", r.tracerr)
	}
}

// A window that cannot be opened (a closed connection) fails every task
// that was built, through Failed, and its tracers hear of it.
func TestBatchClosedConnection(t *testing.T) {
	t.Parallel()
	nc, _ := testutil.JetStream(t, testutil.RunServer(t))
	nc.Close()
	r := newBatch(t, nc, 4, time.Minute, nil)
	out := r.run(t.Context(), "s.a", []string{"id-0", "bad", "id-2"}, 3)
	checkOrder(t, out, 3)
	for i, res := range out {
		want := errInvalid
		if i != 1 {
			want = nats.ErrConnectionClosed
		}
		if !errors.Is(res.err, want) {
			t.Errorf("task %d: %v, want %v", i, res.err, want)
		}
	}
	if len(r.tracerr) != 2 {
		t.Errorf("tracers got %v", r.tracerr)
	}
}

// Many returns the infos in order and the errors by index; Seq numbers the
// tasks of a sequence, reports them and counts the failures.
func TestBatchManyAndSeq(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	r := newBatch(t, nc, 8, time.Minute, nil)
	prepare := func(id string) (*nats.Msg, info, error) {
		if id == "bad" {
			return nil, info{}, errInvalid
		}
		return &nats.Msg{Subject: "s.a", Data: []byte(id)}, info{id: id}, nil
	}
	infos, errs := r.b.Many(t.Context(), []string{"a", "bad", "c"}, prepare)
	if len(infos) != 3 || infos[0].seq != 1 || infos[1] != (info{}) || infos[2].seq != 2 || len(errs) != 1 || !errors.Is(errs[1], errInvalid) {
		t.Errorf("Many = %+v, %v", infos, errs)
	}
	if infos, errs := r.b.Many(t.Context(), []string{"d"}, prepare); errs != nil || infos[0].seq != 3 {
		t.Errorf("Many = %+v, %v", infos, errs)
	}
	var got []int
	failed := r.b.Seq(t.Context(), slices.Values([]string{"bad", "e", "bad", "f"}), prepare, func(i int, in info, err error) { got = append(got, i) })
	if failed != 2 || !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("Seq = %d failed, reports %v", failed, got)
	}
	// Without a report, Seq still counts the failures.
	if failed := r.b.Seq(t.Context(), func(yield func(string) bool) { _ = yield("bad") && yield("g") }, prepare, nil); failed != 1 {
		t.Errorf("Seq without report = %d failed", failed)
	}
}
