package handlers_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/testutil"
)

// records is a slog.Handler that keeps every record, with the attributes
// added by With flattened into it.
type records struct {
	mu    *sync.Mutex
	all   *[]record
	attrs []slog.Attr
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func newRecords() *records {
	return &records{mu: new(sync.Mutex), all: new([]record)}
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	m := make(map[string]slog.Value)
	for _, a := range r.attrs {
		m[a.Key] = a.Value
	}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
	r.mu.Lock()
	*r.all = append(*r.all, record{level: rec.Level, msg: rec.Message, attrs: m})
	r.mu.Unlock()
	return nil
}

func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(append([]slog.Attr(nil), r.attrs...), as...)
	return &c
}

func (r *records) WithGroup(string) slog.Handler { return r }

func (r *records) snapshot() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), *r.all...)
}

// find returns the records with message msg.
func (r *records) find(msg string) []record {
	var out []record
	for _, rec := range r.snapshot() {
		if rec.msg == msg {
			out = append(out, rec)
		}
	}
	return out
}

// env is one embedded server with the topology ensured and a client
// (internal/testenv).
type env struct{ *testenv.Env }

func newEnv(t *testing.T) *env { t.Helper(); return &env{testenv.New(t)} }

func start(t *testing.T, w *framework.Worker) {
	t.Helper()
	testutil.StartWorker(t, w, func(err error) {
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}

// outcome is what the worker's hooks report for one task.
type outcome struct {
	event   string // "succeeded", "retried" or "failed"
	attempt int
	err     error
}

// outcomes returns hooks that send every outcome to the returned channel.
func outcomes() (framework.Hooks, <-chan outcome) {
	ch := make(chan outcome, 64)
	return framework.Hooks{
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			name := map[framework.Action]string{framework.ActionAck: "succeeded", framework.ActionRetry: "retried",
				framework.ActionFail: "failed"}[o.Action]
			ch <- outcome{name, t.Attempt, o.Err}
		},
	}, ch
}

// fastRetries keeps retry delays short in tests.
func fastRetries() framework.HandlerOption {
	return framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond})
}
