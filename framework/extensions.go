package framework

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/hookset"
	"github.com/jetflow-io/jetflow/streams"
)

// Plugin is a feature installed on a worker with [Worker.Use], beside the
// core loop: package breaker installs circuit breakers this way. Its events
// are the engine's own path, apart from the public [Hooks]: they run before
// the hooks, in the order the plugins were installed, and are not recovered.
// Any field but Name may be nil.
type Plugin struct {
	// Name names the plugin in errors ("prepare: <Name>: …") and in
	// [Worker.Plugin].
	Name string
	// Value is what [Worker.Plugin] returns for Name, for example the
	// feature's registry, so that code holding the worker (or a handler's
	// ctx, through [Task.Worker]) finds it.
	Value any
	// Keys are the [WithHandlerValue] keys the plugin reads. Start fails
	// when a registered type carries a value under a key that no installed
	// plugin lists, so that a handler option of a feature whose plugin was
	// never installed (breaker.WithDependencies without breaker.Install) is
	// an error instead of having no effect. A key's String method, when it
	// has one, names the option and its plugin in that error.
	Keys []any
	// Wrap, when set, wraps the handler of each registered task type at
	// Start, before any Prepare, for a plugin that gates tasks before their
	// handler (package ratelimit): the wrapper runs outside the worker's and
	// the type's middleware, inside the engine's own gates (ordered keys).
	// It returns h for a type it leaves alone.
	Wrap func(w *Worker, taskType string, h Handler) Handler
	// Prepare runs at Start, after the worker's own set-up and before
	// pulling begins (ensure buckets, read [Worker.HandlerValues]). An
	// error fails Start. Its ctx has a deadline of [startAttempt]: an
	// attempt that runs out of it, or fails while the server is
	// unreachable, is run again until Start's ctx ends.
	Prepare func(ctx context.Context, w *Worker) error
	// Service runs in its own goroutine from Start until shutdown begins;
	// it must return when ctx ends.
	Service func(ctx context.Context, w *Worker)
	// Started runs before each attempt's handler, with the handler's ctx.
	Started func(ctx context.Context, t *Task)
	// Finished runs once an attempt's outcome was settled, where the
	// Finished hook runs.
	Finished func(ctx context.Context, t *Task, o Outcome)
	// Hold may ask for a failed attempt to be rerun in process after the
	// returned delay, without spending a delivery (for example while a
	// circuit breaker is open). The task is parked meanwhile: its slot
	// serves other tasks, heartbeats keep it alive, no goroutine waits for
	// it, and Shutdown hands it back at once. The first plugin that holds
	// wins.
	Hold func(t *Task, err error) (time.Duration, bool)
}

// Use installs p on w. It panics when called after the worker started, or
// when a plugin of the same name is installed.
func (w *Worker) Use(p Plugin) {
	if _, dup := w.Plugin(p.Name); dup || p.Name == "" {
		panic(fmt.Sprintf("framework: plugin %q installed twice or unnamed", p.Name))
	}
	w.addExtension(extension{Plugin: p})
}

// Plugin returns the Value of the plugin installed under name, and whether
// there is one.
func (w *Worker) Plugin(name string) (any, bool) {
	for i := range w.ext {
		if w.ext[i].Name == name {
			return w.ext[i].Value, true
		}
	}
	return nil, false
}

// extension is a [Plugin] with the events only this package's features use:
// further consumers (ordered partitions) and the dead-letter writer.
type extension struct {
	Plugin
	// consumers runs at Start after prepare and returns further consumers
	// to pull (ordered partitions) in the task partitions of parts; again
	// for partitions added while the worker runs (intake.go).
	consumers func(ctx context.Context, w *Worker, parts []streams.Names) ([]consumerSub, error)
	// grown, when set, is told of task partitions added while the worker
	// runs, before their consumers are pulled.
	grown func(ctx context.Context, w *Worker, parts []streams.Names) error
	// deadLetter runs before a task is terminated: permanent error,
	// undecodable payload, or failed last attempt. If it returns an error
	// the task is not terminated but retried later, so nothing is lost.
	deadLetter func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error
}

// addExtension installs e. It must be called before Start.
func (w *Worker) addExtension(e extension) {
	if w.state.Load() != workerNew {
		panic("framework: extension " + e.Name + " added after the worker started")
	}
	w.ext = append(w.ext, e)
	w.events.Use(hookset.Plugin[*Task, Outcome]{Started: e.Started, Finished: e.Finished, Hold: e.Hold})
	if e.deadLetter != nil && w.deadLetter == nil {
		w.deadLetter = e.deadLetter
	}
}

// Emit publishes a plugin's event ev to the Event field of each of the
// worker's hook sets (the [Worker.AddHooks] ones, then the [WithHooks]
// ones), on the calling goroutine with ctx. A plugin defines ev's type in
// its own package (package breaker emits a breaker.StateChange); the core
// names no plugin. A panic in an Event hook is recovered, logged and
// counted in [Stats].HookPanics.
func (w *Worker) Emit(ctx context.Context, ev any) { w.events.Event(ctx, ev) }

// HasMiddleware reports whether the worker wraps every handler in
// middleware of its own ([WithMiddleware]): package workflow runs chained
// steps on the task of the step before them, outside that middleware, so it
// chains only when asked to on such a worker.
func (w *Worker) HasMiddleware() bool { return len(w.opts.middleware) > 0 }

// Logger returns the worker's logger ([WithLogger]).
func (w *Worker) Logger() *slog.Logger { return w.log }

// Worker returns the worker running t, or nil for a nil task or one built
// outside a worker (package jetflowtest). In a handler or middleware,
// framework.TaskFromContext(ctx).Worker() is the worker, or nil outside
// one.
func (t *Task) Worker() *Worker {
	if t == nil {
		return nil
	}
	return t.worker
}

// JetStream returns the worker's JetStream context.
func (w *Worker) JetStream() jetstream.JetStream { return w.js }

// Names returns the names of the worker's topology (see [WithPrefix]).
func (w *Worker) Names() streams.Names { return w.names }

// AddHooks installs h in addition to the hooks given with [WithHooks], so
// that packages built on the worker (workflows, metrics adapters) can observe
// tasks without taking the user's hooks slot. Hooks added this way run before
// the [WithHooks] ones, in the order they were added. It panics when called
// after the worker started.
func (w *Worker) AddHooks(h Hooks) {
	if w.state.Load() != workerNew {
		panic("framework: AddHooks called after the worker started")
	}
	w.events.Insert(workerHooks(h))
}
