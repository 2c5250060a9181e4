package framework_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/testutil"
)

// A handler's progress is in the task's record while it runs, with or
// without state tracking, and the final record keeps the last value.
func TestProgressWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []framework.WorkerOption
	}{
		{"untracked", nil},
		{"tracked", []framework.WorkerOption{framework.WithStateTracking(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			kv := stateHistory(t, e)
			step, reported := make(chan struct{}), make(chan error)
			w := e.worker(t, tc.opts...)
			w.HandleFunc("progress.copy", func(ctx context.Context, task *framework.Task) error {
				for i, msg := range []string{"copying rows", "indexing", "done"} {
					<-step
					reported <- framework.ReportProgress(ctx, int64(i+1), 3, msg)
				}
				return nil
			})
			startWorker(t, w)
			e.enqueue(t, "progress.copy", nil, framework.WithID("copy1"))

			step <- struct{}{}
			if err := testutil.Recv(t, reported, waitLong, "first report"); err != nil {
				t.Fatal(err)
			}
			// The first report is written at once.
			var rec *framework.TaskRecord
			testutil.Wait(t, waitLong, "progress 1/3 in the record", func() bool {
				var err error
				rec, err = e.cl.Inspector().GetTask(t.Context(), "copy1")
				return err == nil && rec.Progress.Done == 1
			})
			if rec.State != framework.StateRunning || rec.Progress != (framework.Progress{Done: 1, Total: 3, Message: "copying rows"}) ||
				rec.Type != "progress.copy" || rec.Attempt != 1 {
				t.Fatalf("record while running: %+v", rec)
			}
			if s := rec.Progress.String(); s != "1/3 (33%) copying rows" {
				t.Fatalf("Progress.String() = %q", s)
			}
			for range 2 {
				step <- struct{}{}
				if err := testutil.Recv(t, reported, waitLong, "report"); err != nil {
					t.Fatal(err)
				}
			}
			final, err := e.cl.Wait(waitCtx(t), "copy1")
			if err != nil || final.Progress != (framework.Progress{Done: 3, Total: 3, Message: "done"}) {
				t.Fatalf("final record %+v, %v", final, err)
			}
			// Reports closer than the interval are coalesced: at most one
			// progress record per interval besides the first.
			h := states(t, kv, "copy1")
			if n := len(h); n < 2 || n > 4 {
				t.Fatalf("%d records: %s", n, stateNames(h))
			}
		})
	}
}

// Bad progress is refused with a clear error; the handler goes on.
func TestReportProgressErrors(t *testing.T) {
	t.Parallel()
	if err := framework.ReportProgress(context.Background(), 1, 2, "x"); !errors.Is(err, framework.ErrNoTask) {
		t.Fatalf("outside a handler: %v", err)
	}
	e := newEnv(t)
	got := make(chan []error, 1)
	w := e.worker(t)
	w.HandleFunc("progress.bad", func(ctx context.Context, task *framework.Task) error {
		got <- []error{
			framework.ReportProgress(ctx, 1, 2, strings.Repeat("x", framework.MaxProgressMessage+1)),
			framework.ReportProgress(ctx, -1, 0, ""),
			framework.ReportProgress(ctx, 3, 2, ""),
			framework.ReportProgress(ctx, 1, 2, "two\nlines"),
			framework.ReportProgress(ctx, 1, 2, "fine"),
		}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "progress.bad", nil)
	errs := testutil.Recv(t, got, waitLong, "handler")
	for i, want := range []string{"the limit is 256", "negative", "more than the total", "control character"} {
		if !errors.Is(errs[i], framework.ErrInvalidProgress) || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("report %d: %v, want ErrInvalidProgress saying %q", i, errs[i], want)
		}
	}
	if errs[4] != nil {
		t.Errorf("valid report: %v", errs[4])
	}
}

// A progress read back from the bucket is untrusted: one that breaks the
// rules reads as none, and the rest of the record stays readable.
func TestProgressReadBackValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	for id, progress := range map[string]string{
		"neg":   `{"done":-5,"total":10}`,
		"over":  `{"done":11,"total":10}`,
		"ctl":   `{"done":1,"message":"\u001b[2Jgone"}`,
		"long":  `{"done":1,"message":"` + strings.Repeat("x", 300) + `"}`,
		"type":  `"half"`,
		"float": `{"done":1.5}`,
	} {
		rec := `{"id":"` + id + `","priority":"normal","state":"running","updated_at":"2026-01-02T03:04:05Z","progress":` + progress + `}`
		if _, err := kv.Put(t.Context(), staterec.Key(id), []byte(rec)); err != nil {
			t.Fatal(err)
		}
		got, err := e.cl.Inspector().GetTask(t.Context(), id)
		if err != nil || got.State != framework.StateRunning || !got.Progress.IsZero() {
			t.Errorf("%s: GetTask = %+v, %v; want the record without progress", id, got, err)
		}
	}
}

// Wait refuses a record that is not one of the task's.
func TestWaitBadRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	for id, rec := range map[string]string{
		"other": `{"id":"someone-else","priority":"normal","state":"succeeded","updated_at":"2026-01-02T03:04:05Z"}`,
		"state": `{"id":"state","priority":"normal","state":"exploded","updated_at":"2026-01-02T03:04:05Z"}`,
		"junk":  `not json`,
	} {
		if _, err := kv.Put(t.Context(), staterec.Key(id), []byte(rec)); err != nil {
			t.Fatal(err)
		}
		if got, err := e.cl.Wait(waitCtx(t), id); err == nil || !strings.Contains(err.Error(), "bad record") || got != nil {
			t.Errorf("%s: Wait = %+v, %v", id, got, err)
		}
	}
}
