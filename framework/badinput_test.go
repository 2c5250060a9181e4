package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestEnqueueRejectsInvalidTaskType(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name, typ, msg string
	}{
		{"empty", "", "empty"},
		{"upper case", "Payments.charge", `'P'`},
		{"space", "payments charge", `' '`},
		{"wildcard", "payments.*", `'*'`},
		{"full wildcard", "payments.>", `'>'`},
		{"leading dot", ".charge", "empty token"},
		{"double dot", "payments..charge", "empty token"},
		{"trailing dot", "payments.", "ends with a dot"},
		{"non ascii", "paiements.déjà", "contains"},
		{"too long", strings.Repeat("a", streamdefs.MaxTaskTypeLen+1), "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.cl.Enqueue(t.Context(), c.typ, nil)
			if !errors.Is(err, framework.ErrInvalidTaskType) {
				t.Fatalf("Enqueue(%q) = %v, want ErrInvalidTaskType", c.typ, err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not explain (%q)", err, c.msg)
			}
		})
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Errorf("invalid enqueues stored %d messages", n)
	}
}

func TestEnqueueRejectsBadOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name   string
		opt    framework.EnqueueOption
		target error
	}{
		{"id with dot", framework.WithID("a.b"), framework.ErrInvalidID},
		{"empty id", framework.WithID(""), framework.ErrInvalidID},
		{"id with space", framework.WithID("a b"), framework.ErrInvalidID},
		{"id wildcard", framework.WithID("*"), framework.ErrInvalidID},
		{"id too long", framework.WithID(strings.Repeat("x", taskmsg.MaxIDLen+1)), framework.ErrInvalidID},
		{"priority", framework.WithPriority(framework.Priority(9)), framework.ErrInvalidOption},
		{"reserved header", framework.WithHeader("Nats-Msg-Id", "x"), framework.ErrInvalidOption},
		{"own header", framework.WithHeader("jetflow-id", "x"), framework.ErrInvalidOption},
		{"empty header", framework.WithHeader("", "x"), framework.ErrInvalidOption},
		// A schedule cannot hold it (the server's clock wraps).
		{"due after 2262", framework.At(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)), framework.ErrInvalidOption},
		{"delay past 2262", framework.In(time.Duration(math.MaxInt64)), framework.ErrInvalidOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.cl.Enqueue(t.Context(), "bad.options", nil, c.opt)
			if !errors.Is(err, c.target) || !errors.Is(err, framework.ErrInvalidOption) {
				t.Fatalf("err = %v, want %v and ErrInvalidOption", err, c.target)
			}
		})
	}
}

func TestEnqueuePayloadTooLarge(t *testing.T) {
	t.Parallel()
	const limit = 1024
	e := newEnv(t, testutil.WithMaxPayload(limit))
	if got := e.nc.MaxPayload(); got != limit {
		t.Fatalf("server max payload %d, want %d", got, limit)
	}
	for _, opts := range [][]framework.EnqueueOption{nil, {framework.In(time.Hour)}} {
		_, err := e.cl.Enqueue(t.Context(), "big.payload", make([]byte, limit), opts...)
		if !errors.Is(err, framework.ErrPayloadTooLarge) {
			t.Fatalf("err = %v, want ErrPayloadTooLarge", err)
		}
		if !strings.Contains(err.Error(), fmt.Sprint(limit)) {
			t.Errorf("error %q does not state the limit", err)
		}
	}
	// Just under the limit with headers fits.
	if _, err := e.cl.Enqueue(t.Context(), "big.payload", make([]byte, limit/2)); err != nil {
		t.Fatalf("half the limit: %v", err)
	}
	if n := e.taskStreamMsgs(t); n != 1 {
		t.Errorf("task stream holds %d messages, want 1", n)
	}
}

func TestEnqueueEncodeFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, payload := range []any{make(chan int), func() {}, map[bool]complex128{true: 1}} {
		_, err := e.cl.Enqueue(t.Context(), "encode.fail", payload)
		if !errors.Is(err, framework.ErrEncode) {
			t.Errorf("payload %T: err = %v, want ErrEncode", payload, err)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%T", payload)) {
			t.Errorf("error %q does not name the payload type", err)
		}
	}
}

func TestTopologyMissing(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc := testutil.Connect(t, srv)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := cl.Enqueue(ctx, "no.stream", nil); !errors.Is(err, framework.ErrTopologyMissing) {
		t.Errorf("Enqueue: %v, want ErrTopologyMissing", err)
	}
	if _, err := cl.Enqueue(ctx, "no.stream", nil, framework.In(time.Minute)); !errors.Is(err, framework.ErrTopologyMissing) {
		t.Errorf("delayed Enqueue: %v, want ErrTopologyMissing", err)
	}
	_, err = cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: "no.stream"}})
	if !errors.Is(err, framework.ErrTopologyMissing) {
		t.Errorf("EnqueueMany: %v, want ErrTopologyMissing", err)
	}
	if err := cl.Cancel(ctx, "x"); !errors.Is(err, framework.ErrTopologyMissing) {
		t.Errorf("Cancel: %v, want ErrTopologyMissing", err)
	}

	w, err := framework.NewWorker(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("no.stream", func(context.Context, *framework.Task) error { return nil })
	if err := w.Start(ctx); !errors.Is(err, framework.ErrTopologyMissing) {
		t.Errorf("Worker.Start: %v, want ErrTopologyMissing", err)
	}
	// A worker that failed to start shuts down cleanly and cannot restart.
	if err := w.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after a failed Start: %v", err)
	}
	if err := w.Start(ctx); !errors.Is(err, framework.ErrWorkerClosed) {
		t.Errorf("second Start: %v, want ErrWorkerClosed", err)
	}
}

func TestEnqueueOnClosedConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := e.cl.Enqueue(ctx, "dead.conn", nil); !errors.Is(err, framework.ErrNotConnected) {
		t.Errorf("Enqueue: %v, want ErrNotConnected", err)
	}
	if _, err := e.cl.Enqueue(ctx, "dead.conn", nil, framework.In(time.Minute)); !errors.Is(err, framework.ErrNotConnected) {
		t.Errorf("delayed Enqueue: %v, want ErrNotConnected", err)
	}
	_, err := e.cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: "dead.conn"}, {Type: "dead.conn"}})
	var be *framework.BatchError
	if !errors.As(err, &be) || len(be.Errors) != 2 || !errors.Is(err, framework.ErrNotConnected) {
		t.Errorf("EnqueueMany: %v, want a BatchError of ErrNotConnected", err)
	}
	if err := e.cl.Cancel(ctx, "x"); !errors.Is(err, framework.ErrNotConnected) {
		t.Errorf("Cancel: %v, want ErrNotConnected", err)
	}
}

func TestUndecodablePayloadIsNotRetried(t *testing.T) {
	t.Parallel()
	const typ = "decode.fail"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	calls := 0
	framework.Handle(w, typ, func(context.Context, *framework.Task, greeting) error {
		calls++
		return nil
	}, framework.WithMaxAttempts(5), framework.WithBackoff(framework.BackoffPolicy{Initial: time.Millisecond}))
	startWorker(t, w)
	// Sent as JSON (no encoding header) but not valid JSON.
	e.enqueue(t, typ, json.RawMessage("{not json"), framework.WithID("poison"))

	failed := rec.waitFor(t, "failed", "poison")
	var de *framework.DecodeError
	if !errors.As(failed.Err, &de) || !errors.Is(failed.Err, framework.ErrDecode) {
		t.Fatalf("Failed hook err = %v (%T), want *DecodeError", failed.Err, failed.Err)
	}
	if de.TaskType != typ || de.Encoding != "json" || de.Err == nil {
		t.Errorf("DecodeError %+v", de)
	}
	if !framework.IsPermanent(failed.Err) {
		t.Errorf("decode failure is not permanent: %v", failed.Err)
	}
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	if ci.Delivered.Consumer != 1 || rec.count("started", "poison") != 1 || rec.count("retried", "poison") != 0 {
		t.Fatalf("delivered %d times, started %d, retried %d; want one attempt",
			ci.Delivered.Consumer, rec.count("started", "poison"), rec.count("retried", "poison"))
	}
	if calls != 0 {
		t.Errorf("typed handler called %d times with an undecodable payload", calls)
	}
}

type otherCodec struct{}

func (otherCodec) Name() string                { return "other" }
func (otherCodec) Marshal(any) ([]byte, error) { return []byte("x"), nil }
func (otherCodec) Unmarshal([]byte, any) error { return nil }

func TestPayloadOfAnotherCodecIsDecodeError(t *testing.T) {
	t.Parallel()
	const typ = "decode.codec"
	e := newEnv(t)
	cl, err := framework.NewClient(e.nc, framework.WithCodec(otherCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	framework.Handle(w, typ, func(context.Context, *framework.Task, greeting) error { return nil })
	startWorker(t, w)
	if _, err := cl.Enqueue(t.Context(), typ, greeting{}, framework.WithID("other")); err != nil {
		t.Fatal(err)
	}
	failed := rec.waitFor(t, "failed", "other")
	var de *framework.DecodeError
	if !errors.As(failed.Err, &de) || de.Encoding != "other" || !strings.Contains(de.Error(), `"other"`) {
		t.Fatalf("Failed hook err = %v, want a DecodeError naming the codec", failed.Err)
	}
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noop := func(context.Context, *framework.Task) error { return nil }
	cases := []struct {
		name string
		reg  func(w *framework.Worker)
		msg  string
	}{
		{"nil handler", func(w *framework.Worker) { w.Register("a.b", nil) }, "nil handler"},
		{"nil func", func(w *framework.Worker) { w.HandleFunc("a.b", nil) }, "nil handler"},
		{"nil typed func", func(w *framework.Worker) {
			framework.Handle[greeting](w, "a.b", nil)
		}, "nil handler"},
		{"duplicate", func(w *framework.Worker) {
			w.HandleFunc("a.b", noop)
			w.HandleFunc("a.b", noop)
		}, "registered twice"},
		{"invalid type", func(w *framework.Worker) { w.HandleFunc("A.B", noop) }, "invalid task type"},
		{"empty type", func(w *framework.Worker) { w.HandleFunc("", noop) }, "invalid task type"},
		{"invalid option", func(w *framework.Worker) { w.HandleFunc("a.b", noop, framework.WithMaxAttempts(0)) }, "max attempts"},
		{"heartbeat too long", func(w *framework.Worker) {
			w.HandleFunc("a.b", noop, framework.WithAckWait(time.Second), framework.WithHeartbeat(2*time.Second))
		}, "heartbeat"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := e.worker(t)
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				if !strings.Contains(fmt.Sprint(r), c.msg) {
					t.Errorf("panic %q does not mention %q", r, c.msg)
				}
			}()
			c.reg(w)
		})
	}
	t.Run("after start", func(t *testing.T) {
		w := e.worker(t)
		w.HandleFunc("a.b", noop)
		startWorker(t, w)
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("Register after Start did not panic")
			}
		}()
		w.HandleFunc("c.d", noop)
	})
}

func TestWorkerWithoutHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	if err := w.Start(t.Context()); !errors.Is(err, framework.ErrNoHandlers) {
		t.Fatalf("Start: %v, want ErrNoHandlers", err)
	}
	if err := w.Run(t.Context()); !errors.Is(err, framework.ErrNoHandlers) {
		t.Fatalf("Run: %v, want ErrNoHandlers", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc := testutil.Connect(t, srv)
	// Each invalid option fails every constructor it applies to; passing it
	// to another one does not compile (TestMisplacedOptionDoesNotCompile).
	workerCases := []struct {
		name string
		opt  framework.WorkerOption
	}{
		{"prefix", framework.WithPrefix("Bad.Prefix")},
		{"logger", framework.WithLogger(nil)},
		{"codec", framework.WithCodec(nil)},
		{"concurrency", framework.WithConcurrency(0)},
		{"weights", framework.WithWeights(1, 0, 1, 1)},
		{"shutdown timeout", framework.WithShutdownTimeout(0)},
		{"middleware", framework.WithMiddleware(nil)},
		{"stall limit", framework.WithTimings(framework.Timings{StallLimit: time.Second})},
		{"reconcile interval", framework.WithTimings(framework.Timings{ReconcileInterval: time.Millisecond})},
		{"error retention", framework.WithTimings(framework.Timings{ErrorRetention: time.Second})},
		{"registry interval", framework.WithTimings(framework.Timings{RegistryInterval: time.Hour})},
		{"stranded check", framework.WithTimings(framework.Timings{StrandedCheck: time.Millisecond})},
		{"version grace", framework.WithTimings(framework.Timings{VersionGrace: time.Millisecond})},
	}
	for _, c := range workerCases {
		t.Run("worker/"+c.name, func(t *testing.T) {
			if _, err := framework.NewWorker(nc, c.opt); !errors.Is(err, framework.ErrInvalidOption) {
				t.Errorf("NewWorker: %v, want ErrInvalidOption", err)
			}
		})
	}
	clientCases := []struct {
		name string
		opt  framework.ClientOption
	}{
		{"prefix", framework.WithPrefix("Bad.Prefix")},
		{"logger", framework.WithLogger(nil)},
		{"codec", framework.WithCodec(nil)},
		{"max pending", framework.WithMaxPending(0)},
	}
	for _, c := range clientCases {
		t.Run("client/"+c.name, func(t *testing.T) {
			if _, err := framework.NewClient(nc, c.opt); !errors.Is(err, framework.ErrInvalidOption) {
				t.Errorf("NewClient: %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := framework.NewClient(nil); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("NewClient(nil): %v", err)
	}
	if _, err := framework.NewWorker(nil); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("NewWorker(nil): %v", err)
	}
}

func TestEnqueueAfterServerDied(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	_, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	// A connection that does not try to reconnect ends up closed when the
	// server goes away.
	closed := make(chan struct{})
	nc := testutil.Connect(t, srv, nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "dead.server", nil); err != nil {
		t.Fatalf("enqueue while up: %v", err)
	}
	testutil.ShutdownServer(srv.Server)
	testutil.Recv(t, closed, waitLong, "connection closed")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = cl.Enqueue(ctx, "dead.server", nil)
	if !errors.Is(err, framework.ErrNotConnected) || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("Enqueue on a dead server: %v, want ErrNotConnected", err)
	}
}
