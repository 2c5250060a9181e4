// Package jetflowotel traces jetflow tasks with OpenTelemetry: a span per
// enqueue, a child span per attempt, and the W3C trace context carried in the
// task's headers across the queue, through delays and retries.
//
// It is a module of its own (github.com/jetflow-io/jetflow/contrib/otel), so
// that programs using only the framework never download OpenTelemetry.
//
// # Use
//
//	tr := jetflowotel.New(jetflowotel.Options{TracerProvider: tp})
//	cl, err := framework.NewClient(nc, tr.ClientOption())
//	w, err := framework.NewWorker(nc)
//	tr.Instrument(w) // before w.Start: the whole of a worker's tracing
//
// [Tracing.ClientOption] starts a producer span "jetflow enqueue <type>" as a
// child of the enqueue call's context and injects its context into the task
// headers (traceparent, tracestate). [Tracing.Instrument] does both halves
// of a worker's tracing: it starts a consumer span "jetflow process <type>"
// per attempt, child of the carried context, outside every middleware, and
// puts it in the handler's context, so spans the handler starts are its
// children; and it ends that span once the worker settled the attempt, with
// the outcome: attribute jetflow.outcome (ack, retry or fail),
// jetflow.retry_delay_ms, jetflow.dead_lettered, the recorded error and an
// error status for retried and failed attempts.
//
// [Tracing.Middleware] starts the same span from a place of your choosing
// in the middleware chain. With Instrument on the worker it is the span
// Instrument started (one span per attempt, not two); without it, the
// middleware ends the span itself when the handler returns, without the
// settled outcome, and the worker's logger says once that Instrument is
// missing.
//
// # Workflows
//
// Workflow steps and compensations carry their run ID (header Jetflow-Run):
// their attempt spans get the attribute jetflow.workflow.run_id and a link to
// [RunSpanContext] of the run, a span context derived from the run ID, so a
// tracing backend groups every step of a run. Link the code that starts a
// run to the same context with [RunLink].
package jetflowotel

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// ScopeName is the instrumentation scope of the tracer.
const ScopeName = "github.com/jetflow-io/jetflow/contrib/otel"

// Attribute keys set on spans, beside the messaging.* ones.
const (
	AttrTaskID         = attribute.Key("jetflow.task.id")
	AttrTaskType       = attribute.Key("jetflow.task.type")
	AttrTaskPriority   = attribute.Key("jetflow.task.priority")
	AttrAttempt        = attribute.Key("jetflow.task.attempt")
	AttrMaxAttempts    = attribute.Key("jetflow.task.max_attempts")
	AttrScheduledFor   = attribute.Key("jetflow.task.scheduled_for")
	AttrDuplicate      = attribute.Key("jetflow.task.duplicate")
	AttrOutcome        = attribute.Key("jetflow.outcome")
	AttrRetryDelayMS   = attribute.Key("jetflow.retry_delay_ms")
	AttrDeadLettered   = attribute.Key("jetflow.dead_lettered")
	AttrPanicked       = attribute.Key("jetflow.panicked")
	AttrWorkflowRunID  = attribute.Key("jetflow.workflow.run_id")
	AttrSettlementFail = attribute.Key("jetflow.settlement_failed")
)

// Options configure [New]. The zero value uses the global providers.
type Options struct {
	// TracerProvider creates the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator carries the trace context in task headers. Default
	// propagation.TraceContext (W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
}

// Tracing creates the spans. It is safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// attempts holds the span of each running attempt, from the middleware
	// to the hook that ends it.
	attempts sync.Map // *framework.Task → trace.Span
	// warned holds the workers told that Instrument is missing.
	warned sync.Map // *framework.Worker → struct{}
}

// New returns a Tracing.
func New(opts Options) *Tracing {
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := opts.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracing{tracer: tp.Tracer(ScopeName), prop: prop}
}

// enqueueCarrier adapts a task message's headers for injection.
type enqueueCarrier struct{ h framework.EnqueueHeader }

func (c enqueueCarrier) Get(key string) string { return c.h.Get(key) }
func (c enqueueCarrier) Set(key, value string) { _ = c.h.Set(key, value) }
func (c enqueueCarrier) Keys() []string        { return c.h.Keys() }

// taskCarrier adapts a received task's headers for extraction.
type taskCarrier struct{ t *framework.Task }

func (c taskCarrier) Get(key string) string { return c.t.Header(key) }
func (c taskCarrier) Set(string, string)    {}
func (c taskCarrier) Keys() []string {
	keys := make([]string, 0, len(c.t.Headers))
	for k := range c.t.Headers {
		keys = append(keys, k)
	}
	return keys
}

// ClientOption returns the client option (a [framework.Hooks] with
// Enqueuing) that traces each enqueued task and carries the trace context
// in its headers.
func (tr *Tracing) ClientOption() framework.ClientOption {
	return framework.WithHooks(framework.Hooks{Enqueuing: tr.traceEnqueue})
}

func (tr *Tracing) traceEnqueue(ctx context.Context, info framework.TaskInfo, h framework.EnqueueHeader) func(framework.TaskInfo, error) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", info.Subject),
		AttrTaskType.String(info.Type),
		AttrTaskPriority.String(info.Priority.String()),
	}
	if info.ID != "" {
		attrs = append(attrs, AttrTaskID.String(info.ID), attribute.String("messaging.message.id", info.ID))
	}
	if !info.ScheduledFor.IsZero() {
		attrs = append(attrs, AttrScheduledFor.String(info.ScheduledFor.UTC().Format("2006-01-02T15:04:05.000Z07:00")))
	}
	ctx, span := tr.tracer.Start(ctx, "jetflow enqueue "+info.Type,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	tr.prop.Inject(ctx, enqueueCarrier{h})
	return func(out framework.TaskInfo, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(AttrTaskID.String(out.ID), AttrDuplicate.Bool(out.Duplicate),
				attribute.Int64("messaging.nats.stream_sequence", int64(out.Sequence)))
		}
		span.End()
	}
}

// PluginName is the name under which [Tracing.Instrument] installs its
// plugin on a worker ([framework.Worker.Plugin] returns the Tracing).
const PluginName = "jetflowotel"

// attemptKey marks a handler's context as inside the attempt span that
// tracing started for a task, so that a second start point (Instrument's
// wrapper and Middleware on one worker) does not start a second span.
type attemptKey struct{ tr *Tracing }

// Middleware returns worker middleware ([framework.WithMiddleware]) that
// starts the span of each attempt and puts it in the handler's context.
// [Tracing.Instrument] alone does this too, outside every middleware; use
// Middleware to start the span at another place of the chain. With
// Instrument on the worker, the first of the two to run starts the span
// and the other passes through. Without Instrument, the span ends when the
// handler returns, without the settled outcome (the hooks that know it are
// missing), and the worker's logger warns once.
func (tr *Tracing) Middleware() framework.Middleware {
	return func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			return tr.handle(ctx, t, next)
		})
	}
}

// handle runs one attempt of t inside its span.
func (tr *Tracing) handle(ctx context.Context, t *framework.Task, next framework.Handler) error {
	if ctx.Value(attemptKey{tr}) == t {
		return next.Handle(ctx, t)
	}
	parent := tr.prop.Extract(ctx, taskCarrier{t})
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", t.ID),
		AttrTaskID.String(t.ID), AttrTaskType.String(t.Type), AttrTaskPriority.String(t.Priority.String()),
		AttrAttempt.Int(t.Attempt), AttrMaxAttempts.Int(t.MaxAttempts),
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if run := t.Header(workflow.HeaderRun); validRunID(run) {
		attrs = append(attrs, AttrWorkflowRunID.String(run))
		opts = append(opts, trace.WithLinks(RunLink(run)))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := tr.tracer.Start(parent, "jetflow process "+t.Type, opts...)
	ctx = context.WithValue(ctx, attemptKey{tr}, t)
	if !tr.instrumented(ctx) {
		// Nobody will end the span at settlement: end it here.
		err := next.Handle(ctx, t)
		span.SetAttributes(AttrOutcome.String("unsettled"))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		return err
	}
	if prev, loaded := tr.attempts.Swap(t, span); loaded {
		// A rerun in process (held by an open breaker): the earlier
		// run ended without a settlement.
		s := prev.(trace.Span)
		s.SetAttributes(AttrOutcome.String("held"))
		s.End()
	}
	err := next.Handle(ctx, t)
	if err != nil {
		span.RecordError(err)
	}
	return err
}

// instrumented reports whether the worker running the task of ctx has this
// tracing's hooks ([Tracing.Instrument]), which end attempt spans at
// settlement. It warns once per worker when it has not.
func (tr *Tracing) instrumented(ctx context.Context) bool {
	w := framework.TaskFromContext(ctx).Worker()
	if w == nil {
		return false // a handler run outside a worker (jetflowtest)
	}
	if v, ok := w.Plugin(PluginName); ok && v == tr {
		return true
	}
	if _, warned := tr.warned.LoadOrStore(w, struct{}{}); !warned {
		w.Logger().Warn("jetflowotel: Middleware on a worker without Instrument: attempt spans end when the handler returns, without the settled outcome; call Tracing.Instrument(w) before w.Start")
	}
	return false
}

// validRunID reports whether a Jetflow-Run header holds a run ID a workflow
// client could have written ([workflow.WithRunID]: 1 to
// [workflow.MaxRunIDLen] bytes of A-Z a-z 0-9 _ - =). Any publisher can set
// the header: a value of tens of kilobytes would be copied into every
// attempt span and its link, and bytes that are not UTF-8 cannot be
// exported as OTLP (protobuf) strings.
func validRunID(id string) bool {
	return len(id) <= workflow.MaxRunIDLen && !strings.Contains(id, ":") && streams.ValidateID(id) == nil
}

// Instrument wires the whole of w's tracing: it wraps every handler of w,
// outside the worker's and the types' middleware, so that each attempt runs
// in its span (see [Tracing.Middleware]), and adds the hooks that end the
// span with the attempt's settled outcome ([framework.Worker.AddHooks],
// beside the worker's own). It installs a plugin named [PluginName]. Call
// it once per worker, before w.Start; it panics afterwards, or when called
// twice on one worker.
func (tr *Tracing) Instrument(w *framework.Worker) {
	w.Use(framework.Plugin{
		Name:  PluginName,
		Value: tr,
		Wrap: func(_ *framework.Worker, _ string, h framework.Handler) framework.Handler {
			return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
				return tr.handle(ctx, t, h)
			})
		},
	})
	w.AddHooks(tr.Hooks())
}

// Hooks returns the hooks [Tracing.Instrument] adds: they end the attempt
// spans that Instrument or [Tracing.Middleware] started. Instrument is the
// way to install them; these are for a test or a wrapper of your own.
func (tr *Tracing) Hooks() framework.Hooks {
	return framework.Hooks{
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			v, ok := tr.attempts.LoadAndDelete(t)
			if !ok {
				return
			}
			span := v.(trace.Span)
			span.SetAttributes(AttrOutcome.String(o.Action.String()), AttrPanicked.Bool(o.Panicked))
			switch o.Action {
			case framework.ActionRetry:
				span.SetAttributes(AttrRetryDelayMS.Int64(o.Delay.Milliseconds()))
				span.SetStatus(codes.Error, "attempt failed; retried")
			case framework.ActionFail:
				span.SetAttributes(AttrDeadLettered.Bool(o.DeadLettered))
				msg := "failed for good"
				if o.Err != nil {
					msg = o.Err.Error()
				}
				span.SetStatus(codes.Error, msg)
			}
			span.End()
		},
		AckFailed: func(_ context.Context, t *framework.Task, op string, err error) {
			if op == "in_progress" {
				return // a heartbeat: the attempt goes on
			}
			v, ok := tr.attempts.LoadAndDelete(t)
			if !ok {
				return
			}
			span := v.(trace.Span)
			span.SetAttributes(AttrSettlementFail.String(op))
			span.RecordError(err)
			span.SetStatus(codes.Error, "settlement not sent ("+op+"); the task will be redelivered")
			span.End()
		},
	}
}

// RunSpanContext returns the span context that stands for workflow run
// runID: its trace and span IDs are derived from the run ID (SHA-256), so
// every process computes the same one. It is remote and sampled.
func RunSpanContext(runID string) trace.SpanContext {
	sum := sha256.Sum256([]byte("jetflow.workflow.run:" + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// RunLink returns a link to [RunSpanContext] of runID, for the span of the
// code that starts or waits for the run:
//
//	ctx, span := tracer.Start(ctx, "checkout", trace.WithLinks(jetflowotel.RunLink(id)))
func RunLink(runID string) trace.Link {
	return trace.Link{SpanContext: RunSpanContext(runID), Attributes: []attribute.KeyValue{AttrWorkflowRunID.String(runID)}}
}
