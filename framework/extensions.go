package framework

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// extension is an internal plug-in point of the worker, used by the features
// of this package that sit beside the core loop (dead letters, circuit
// breakers, task state, workflows). Any field may be nil.
type extension struct {
	name string
	// hooks are called before the user's hooks, with the same arguments.
	hooks Hooks
	// prepare runs at Start before pulling begins (ensure buckets, streams).
	prepare func(ctx context.Context, w *Worker) error
	// service runs in its own goroutine from Start until shutdown begins; it
	// must return when ctx ends.
	service func(ctx context.Context, w *Worker)
	// deadLetter runs before a task is terminated: permanent error,
	// undecodable payload, or failed last attempt. If it returns an error
	// the task is not terminated but retried later, so nothing is lost.
	deadLetter func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error
	// hold may ask for a failed attempt to be rerun in process after the
	// returned delay, without spending a delivery (for example while a
	// circuit breaker is open). The task keeps sending heartbeats meanwhile.
	hold func(t *Task, err error) (time.Duration, bool)
}

// addExtension installs e. It must be called before Start.
func (w *Worker) addExtension(e extension) {
	if w.state.Load() != workerNew {
		panic("framework: extension " + e.name + " added after the worker started")
	}
	w.ext = append(w.ext, e)
}

func (w *Worker) hookStarted(t *Task) {
	for i := range w.ext {
		if h := w.ext[i].hooks.Started; h != nil {
			h(t)
		}
	}
	if h := w.opts.hooks.Started; h != nil {
		h(t)
	}
}

func (w *Worker) hookSucceeded(t *Task, took time.Duration) {
	for i := range w.ext {
		if h := w.ext[i].hooks.Succeeded; h != nil {
			h(t, took)
		}
	}
	if h := w.opts.hooks.Succeeded; h != nil {
		h(t, took)
	}
}

func (w *Worker) hookRetried(t *Task, err error, delay time.Duration) {
	for i := range w.ext {
		if h := w.ext[i].hooks.Retried; h != nil {
			h(t, err, delay)
		}
	}
	if h := w.opts.hooks.Retried; h != nil {
		h(t, err, delay)
	}
}

func (w *Worker) hookFailed(t *Task, err error) {
	for i := range w.ext {
		if h := w.ext[i].hooks.Failed; h != nil {
			h(t, err)
		}
	}
	if h := w.opts.hooks.Failed; h != nil {
		h(t, err)
	}
}

func (w *Worker) hookAckFailed(t *Task, op string, err error) {
	for i := range w.ext {
		if h := w.ext[i].hooks.AckFailed; h != nil {
			h(t, op, err)
		}
	}
	if h := w.opts.hooks.AckFailed; h != nil {
		h(t, op, err)
	}
}

// deadLetterFunc returns the installed dead-letter function, or nil.
func (w *Worker) deadLetterFunc() func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error {
	for i := range w.ext {
		if f := w.ext[i].deadLetter; f != nil {
			return f
		}
	}
	return nil
}

// holdFor asks the extensions whether a failed attempt should be rerun in
// process.
func (w *Worker) holdFor(t *Task, err error) (time.Duration, bool) {
	for i := range w.ext {
		if f := w.ext[i].hold; f != nil {
			if d, ok := f(t, err); ok {
				return d, true
			}
		}
	}
	return 0, false
}

// WorkerFromContext returns the worker running the task of a handler's ctx,
// or nil outside a handler.
func WorkerFromContext(ctx context.Context) *Worker {
	if t := TaskFromContext(ctx); t != nil {
		return t.worker
	}
	return nil
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
	w.addExtension(extension{name: "hooks", hooks: h})
}
