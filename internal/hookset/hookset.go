package hookset

import (
	"context"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

// Hooks are one set of recovered callbacks for a worker's events, with the
// fields of framework's Hooks that a worker calls. Any field may be nil.
type Hooks[T, O any] struct {
	// Started runs before each attempt's handler, with its ctx.
	Started func(ctx context.Context, t T)
	// Finished runs once an attempt's outcome was settled.
	Finished func(ctx context.Context, t T, o O)
	// AckFailed runs when an Ack, Nak, InProgress or Term was not sent.
	AckFailed func(ctx context.Context, t T, op string, err error)
	// Event receives the events plugins publish.
	Event func(ctx context.Context, ev any)
	// PullLost runs when a pull request of (taskType, p) was given up.
	PullLost func(ctx context.Context, taskType string, p streams.Priority)
}

// Plugin is one plugin's callbacks on a task's path, which are not
// recovered: a plugin is part of the engine. Any field may be nil.
type Plugin[T, O any] struct {
	// Started runs before each attempt's handler, before the hooks.
	Started func(ctx context.Context, t T)
	// Finished runs once an attempt's outcome was settled, before the
	// hooks.
	Finished func(ctx context.Context, t T, o O)
	// Hold may ask for a failed attempt to be rerun in process after the
	// returned delay.
	Hold func(t T, err error) (time.Duration, bool)
}

// Set is a worker's plugins and hook sets. Fill it before the worker
// starts (Use, Add, Insert are not safe for concurrent use); its other
// methods are then safe for concurrent use and run the callbacks on the
// calling goroutine. Set Log before a hook can panic.
type Set[T, O any] struct {
	// Log receives the panics of hooks; Panics, when not nil, counts them.
	Log    *slog.Logger
	Panics *atomic.Uint64

	plugins []Plugin[T, O]
	// hooks are the inserted sets (the first inserted of them), then the
	// added ones, each group in the order given.
	hooks    []Hooks[T, O]
	inserted int
}

// Use adds p after the plugins added before it.
func (s *Set[T, O]) Use(p Plugin[T, O]) { s.plugins = append(s.plugins, p) }

// Add adds h after every hook set given before it.
func (s *Set[T, O]) Add(h Hooks[T, O]) { s.hooks = append(s.hooks, h) }

// Insert adds h after the sets inserted before it and before every set
// given with [Set.Add], whenever those were added: packages built on a
// worker observe its tasks before the user's own hooks do.
func (s *Set[T, O]) Insert(h Hooks[T, O]) {
	s.hooks = slices.Insert(s.hooks, s.inserted, h)
	s.inserted++
}

// Started tells the plugins, then the hooks, that an attempt of t starts,
// with the handler's ctx.
func (s *Set[T, O]) Started(ctx context.Context, t T) {
	for i := range s.plugins {
		if f := s.plugins[i].Started; f != nil {
			f(ctx, t)
		}
	}
	for i := range s.hooks {
		if h := s.hooks[i].Started; h != nil {
			s.started(h, ctx, t)
		}
	}
}

// Finished tells the plugins, then the hooks, the outcome o of an attempt
// of t.
func (s *Set[T, O]) Finished(ctx context.Context, t T, o O) {
	for i := range s.plugins {
		if f := s.plugins[i].Finished; f != nil {
			f(ctx, t, o)
		}
	}
	for i := range s.hooks {
		if h := s.hooks[i].Finished; h != nil {
			s.finished(h, ctx, t, o)
		}
	}
}

// AckFailed tells the hooks that the operation op on t was not sent.
func (s *Set[T, O]) AckFailed(ctx context.Context, t T, op string, err error) {
	for i := range s.hooks {
		if h := s.hooks[i].AckFailed; h != nil {
			s.ackFailed(h, ctx, t, op, err)
		}
	}
}

// Event hands a plugin's event ev to the hooks, with the plugin's ctx.
func (s *Set[T, O]) Event(ctx context.Context, ev any) {
	for i := range s.hooks {
		if h := s.hooks[i].Event; h != nil {
			s.event(h, ctx, ev)
		}
	}
}

// PullLost tells the hooks that a pull request of the consumer of
// (taskType, p) was given up. Their ctx is a background context: no call
// waits on them.
func (s *Set[T, O]) PullLost(taskType string, p streams.Priority) {
	for i := range s.hooks {
		if h := s.hooks[i].PullLost; h != nil {
			s.pullLost(h, taskType, p)
		}
	}
}

// Hold asks the plugins, in order, whether the failed attempt of t with
// err is rerun in process, and after how long: the first plugin that holds
// wins.
func (s *Set[T, O]) Hold(t T, err error) (time.Duration, bool) {
	for i := range s.plugins {
		if f := s.plugins[i].Hold; f != nil {
			if d, ok := f(t, err); ok {
				return d, true
			}
		}
	}
	return 0, false
}

// started, finished, ackFailed, event and pullLost call one hook, its
// panic recovered, without a closure: Started and Finished run for every
// task.
func (s *Set[T, O]) started(h func(context.Context, T), ctx context.Context, t T) {
	defer Recover(s.Log, s.Panics, "Started")
	h(ctx, t)
}

func (s *Set[T, O]) finished(h func(context.Context, T, O), ctx context.Context, t T, o O) {
	defer Recover(s.Log, s.Panics, "Finished")
	h(ctx, t, o)
}

func (s *Set[T, O]) ackFailed(h func(context.Context, T, string, error), ctx context.Context, t T, op string, err error) {
	defer Recover(s.Log, s.Panics, "AckFailed")
	h(ctx, t, op, err)
}

func (s *Set[T, O]) event(h func(context.Context, any), ctx context.Context, ev any) {
	defer Recover(s.Log, s.Panics, "Event")
	h(ctx, ev)
}

func (s *Set[T, O]) pullLost(h func(context.Context, string, streams.Priority), taskType string, p streams.Priority) {
	defer Recover(s.Log, s.Panics, "PullLost")
	h(context.Background(), taskType, p)
}

// Recover, deferred around a callback, recovers its panic: the panic is
// logged at Error with its stack, under the callback's name, and counted
// in panics when it is not nil, instead of crashing the process. It must
// be the deferred call itself (recover works only there).
func Recover(log *slog.Logger, panics *atomic.Uint64, name string) {
	if r := recover(); r != nil {
		if panics != nil {
			panics.Add(1)
		}
		log.Error("jetflow hook panicked; ignored", slog.String("hook", name), slog.Any("panic", r),
			slog.String("stack", string(debug.Stack())))
	}
}

// Call runs fn, recovering its panic ([Recover]).
func Call(log *slog.Logger, panics *atomic.Uint64, name string, fn func()) {
	defer Recover(log, panics, name)
	fn()
}
