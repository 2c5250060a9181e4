package jetflowotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	jetflowotel "github.com/jetflow-io/jetflow/contrib/otel"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

const waitLong = 20 * time.Second

type env struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
	tr  *jetflowotel.Tracing
	cl  *framework.Client
	srv *testutil.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := jetflowotel.New(jetflowotel.Options{TracerProvider: tp})
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc, tr.ClientOption())
	if err != nil {
		t.Fatal(err)
	}
	return &env{exp: exp, tp: tp, tr: tr, cl: cl, srv: srv}
}

func (e *env) worker(t *testing.T, register func(w *framework.Worker)) {
	t.Helper()
	w, err := framework.NewWorker(testutil.Connect(t, e.srv), framework.WithMiddleware(e.tr.Middleware()))
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	e.tr.Instrument(w)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
}

// spans waits until n spans named name ended and returns them.
func (e *env) spans(t *testing.T, name string, n int) tracetest.SpanStubs {
	t.Helper()
	var out tracetest.SpanStubs
	testutil.Wait(t, waitLong, "spans "+name, func() bool {
		out = out[:0]
		for _, s := range e.exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return len(out) >= n
	})
	return out
}

func attr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

func TestTraceCarriedAcrossTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
			_, span := e.tp.Tracer("handler").Start(ctx, "smtp")
			span.End()
			return nil
		})
	})
	ctx, req := e.tp.Tracer("test").Start(t.Context(), "http request")
	if _, err := e.cl.Enqueue(ctx, "mail.send", nil, framework.WithID("m1")); err != nil {
		t.Fatal(err)
	}
	// A delayed task keeps the trace context through its schedule.
	if _, err := e.cl.Enqueue(ctx, "mail.send", nil, framework.WithID("m2"), framework.In(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	req.End()
	enq := e.spans(t, "jetflow enqueue mail.send", 2)
	proc := e.spans(t, "jetflow process mail.send", 2)
	inner := e.spans(t, "smtp", 2)
	byID := map[string]tracetest.SpanStub{}
	for _, s := range enq {
		if s.Parent.SpanID() != req.SpanContext().SpanID() || s.SpanKind != trace.SpanKindProducer {
			t.Errorf("enqueue span %s: parent %v kind %v", s.Name, s.Parent.SpanID(), s.SpanKind)
		}
		byID[attr(s, jetflowotel.AttrTaskID).AsString()] = s
	}
	for _, p := range proc {
		id := attr(p, jetflowotel.AttrTaskID).AsString()
		parent, ok := byID[id]
		if !ok {
			t.Fatalf("process span of unknown task %q", id)
		}
		if p.Parent.SpanID() != parent.SpanContext.SpanID() || p.SpanContext.TraceID() != req.SpanContext().TraceID() {
			t.Errorf("task %s: process span is not the child of its enqueue span", id)
		}
		if p.SpanKind != trace.SpanKindConsumer || attr(p, jetflowotel.AttrOutcome).AsString() != "ack" || p.Status.Code == codes.Error {
			t.Errorf("task %s: kind %v outcome %q status %v", id, p.SpanKind, attr(p, jetflowotel.AttrOutcome).AsString(), p.Status)
		}
	}
	procIDs := map[trace.SpanID]bool{proc[0].SpanContext.SpanID(): true, proc[1].SpanContext.SpanID(): true}
	for _, s := range inner {
		if !procIDs[s.Parent.SpanID()] {
			t.Errorf("handler span not a child of the attempt span")
		}
	}
}

func TestOutcomesRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int32
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("flaky", func(ctx context.Context, task *framework.Task) error {
			if calls.Add(1) == 1 {
				return errors.New("timeout talking to bank")
			}
			return nil
		}, framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
		w.HandleFunc("broken", func(ctx context.Context, task *framework.Task) error {
			return framework.Permanent(errors.New("bad card"))
		})
	})
	ctx := t.Context()
	if _, err := e.cl.Enqueue(ctx, "flaky", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Enqueue(ctx, "broken", nil); err != nil {
		t.Fatal(err)
	}
	flaky := e.spans(t, "jetflow process flaky", 2)
	var retried, acked int
	for _, s := range flaky {
		switch attr(s, jetflowotel.AttrOutcome).AsString() {
		case "retry":
			retried++
			if s.Status.Code != codes.Error || len(s.Events) == 0 || s.Events[0].Name != "exception" || attr(s, jetflowotel.AttrRetryDelayMS).AsInt64() <= 0 {
				t.Errorf("retried attempt: status %v events %v", s.Status, s.Events)
			}
			if attr(s, jetflowotel.AttrAttempt).AsInt64() != 1 {
				t.Errorf("retried attempt number %v", attr(s, jetflowotel.AttrAttempt))
			}
		case "ack":
			acked++
		}
	}
	if retried != 1 || acked != 1 || flaky[0].SpanContext.TraceID() != flaky[1].SpanContext.TraceID() {
		t.Errorf("flaky: %d retried, %d acked, same trace %v", retried, acked, flaky[0].SpanContext.TraceID() == flaky[1].SpanContext.TraceID())
	}
	broken := e.spans(t, "jetflow process broken", 1)[0]
	if attr(broken, jetflowotel.AttrOutcome).AsString() != "fail" || !attr(broken, jetflowotel.AttrDeadLettered).AsBool() ||
		broken.Status.Code != codes.Error || broken.Status.Description != "permanent: bad card" {
		t.Errorf("broken: outcome %q dead %v status %v", attr(broken, jetflowotel.AttrOutcome).AsString(), attr(broken, jetflowotel.AttrDeadLettered).AsBool(), broken.Status)
	}
}

func TestEnqueueErrorRecorded(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := jetflowotel.New(jetflowotel.Options{TracerProvider: tp})
	srv := testutil.RunServer(t) // no topology
	cl, err := framework.NewClient(testutil.Connect(t, srv), tr.ClientOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := cl.Enqueue(ctx, "x.y", nil); err == nil {
		t.Fatal("enqueue without topology succeeded")
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error || len(spans[0].Events) != 1 {
		t.Fatalf("spans %+v", spans)
	}
}

func TestWorkflowStepsLinkedToRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := workflow.New("checkout")
	workflow.Step(d, "reserve", func(ctx context.Context, n int) (int, error) { return n, nil })
	workflow.Step(d, "pay", func(ctx context.Context, n int) (int, error) { return n, nil }, workflow.After("reserve"))
	e.worker(t, func(w *framework.Worker) { workflow.Register(w, d) })
	wc, err := workflow.NewClient(e.cl, d)
	if err != nil {
		t.Fatal(err)
	}
	id, err := wc.Start(t.Context(), "checkout", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Wait(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	want := jetflowotel.RunSpanContext(id)
	if !want.Equal(jetflowotel.RunSpanContext(id)) || want.TraceID() == jetflowotel.RunSpanContext(id+"x").TraceID() || !want.IsValid() {
		t.Fatal("run span context is not a function of the run ID")
	}
	for _, step := range []string{"reserve", "pay"} {
		s := e.spans(t, "jetflow process "+workflow.StepTaskType("checkout", step), 1)[0]
		if attr(s, jetflowotel.AttrWorkflowRunID).AsString() != id {
			t.Errorf("step %s: run attribute %q", step, attr(s, jetflowotel.AttrWorkflowRunID).AsString())
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID() != want.TraceID() || s.Links[0].SpanContext.SpanID() != want.SpanID() {
			t.Errorf("step %s: links %+v", step, s.Links)
		}
	}
}

// TestHostileRunHeaderIgnored publishes tasks whose Jetflow-Run header was
// not written by a workflow client (too long, bytes a run ID cannot hold):
// their attempt spans carry neither the run attribute nor a link.
func TestHostileRunHeaderIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("plain.job", func(ctx context.Context, task *framework.Task) error { return nil })
	})
	runs := []string{strings.Repeat("r", 32<<10), "run\xff\xfe", "two words"}
	js := e.cl.JetStream()
	for i, run := range runs {
		m := nats.NewMsg(e.cl.Names().TaskSubject(framework.PriorityNormal, "plain.job"))
		m.Header[workflow.HeaderRun] = []string{run}
		m.Header.Set(framework.HeaderTaskID, fmt.Sprintf("hostile-%d", i))
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("hostile-%d", i)) // a task no schedule fired claims its message ID
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range e.spans(t, "jetflow process plain.job", len(runs)) {
		if v := attr(s, jetflowotel.AttrWorkflowRunID); v.Type() != attribute.EMPTY || len(s.Links) != 0 {
			t.Errorf("task %s: run attribute of %d bytes, %d links", attr(s, jetflowotel.AttrTaskID).AsString(), len(v.AsString()), len(s.Links))
		}
	}
}
