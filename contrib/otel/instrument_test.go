package jetflowotel_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	jetflowotel "github.com/jetflow-io/jetflow/contrib/otel"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startWorker starts a worker on e's server with opts, its handler
// registered by register, and instrument called on it before Start.
func (e *env) startWorker(t *testing.T, opts []framework.WorkerOption, register func(w *framework.Worker), instrument bool) {
	t.Helper()
	w, err := framework.NewWorker(testutil.Connect(t, e.srv), opts...)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	if instrument {
		e.tr.Instrument(w)
	}
	testutil.StartWorker(t, w)
}

// TestInstrumentIsTheWholeOfTracing: Instrument alone (no Middleware) gives
// each attempt its span, child of the enqueue span, parent of the handler's
// spans, ended with the settled outcome; with Middleware as well, an attempt
// still has one span (issue 37: without the middleware, Instrument traced
// nothing and said nothing).
func TestInstrumentIsTheWholeOfTracing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts func(tr *jetflowotel.Tracing) []framework.WorkerOption
	}{
		{"instrument only", func(*jetflowotel.Tracing) []framework.WorkerOption { return nil }},
		{"instrument and middleware", func(tr *jetflowotel.Tracing) []framework.WorkerOption {
			return []framework.WorkerOption{framework.WithMiddleware(tr.Middleware())}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startWorker(t, tc.opts(e.tr), func(w *framework.Worker) {
				w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
					_, span := e.tp.Tracer("handler").Start(ctx, "smtp")
					span.End()
					return nil
				})
			}, true)
			if _, err := e.cl.Enqueue(t.Context(), "mail.send", nil); err != nil {
				t.Fatal(err)
			}
			enq := e.spans(t, "jetflow enqueue mail.send", 1)[0]
			inner := e.spans(t, "smtp", 1)[0]
			// A second span of the attempt would have ended before the
			// handler ran (the inner start point ends the outer one), so
			// once the settled one ended, every span of it is here.
			var proc tracetest.SpanStubs
			testutil.Wait(t, waitLong, "the settled attempt span", func() bool {
				proc = e.spans(t, "jetflow process mail.send", 1)
				for _, p := range proc {
					if attr(p, jetflowotel.AttrOutcome).AsString() == "ack" {
						return true
					}
				}
				return false
			})
			if len(proc) != 1 {
				t.Fatalf("%d attempt spans for one attempt, want 1", len(proc))
			}
			p := proc[0]
			if p.Parent.SpanID() != enq.SpanContext.SpanID() || p.SpanKind != trace.SpanKindConsumer {
				t.Errorf("attempt span: parent %v kind %v, want the enqueue span %v", p.Parent.SpanID(), p.SpanKind, enq.SpanContext.SpanID())
			}
			if got := attr(p, jetflowotel.AttrOutcome).AsString(); got != "ack" {
				t.Errorf("attempt span outcome %q, want ack", got)
			}
			if inner.Parent.SpanID() != p.SpanContext.SpanID() {
				t.Error("the handler's span is not a child of the attempt span")
			}
		})
	}
}

// TestMiddlewareWithoutInstrument: the middleware alone ends each attempt's
// span when the handler returns, with its error, and the worker's log says
// once that Instrument is missing (issue 37: the spans were never ended, so
// never exported, and nothing said why).
func TestMiddlewareWithoutInstrument(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &lockedBuffer{}
	opts := []framework.WorkerOption{
		framework.WithMiddleware(e.tr.Middleware()),
		framework.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}
	e.startWorker(t, opts, func(w *framework.Worker) {
		w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
			return framework.Permanent(errors.New("bad address"))
		})
	}, false)
	for range 2 {
		if _, err := e.cl.Enqueue(t.Context(), "mail.send", nil); err != nil {
			t.Fatal(err)
		}
	}
	proc := e.spans(t, "jetflow process mail.send", 2)
	for _, p := range proc {
		if p.Status.Code != codes.Error || attr(p, jetflowotel.AttrOutcome).AsString() != "unsettled" {
			t.Errorf("attempt span: status %v outcome %q, want an error and unsettled", p.Status, attr(p, jetflowotel.AttrOutcome).AsString())
		}
	}
	if n := strings.Count(logs.String(), "without Instrument"); n != 1 {
		t.Errorf("the log warns %d times that Instrument is missing, want once:\n%s", n, logs.String())
	}
}
