package framework_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const strandedMsg = "jetflow tasks of a type this worker serves wait on a subject no consumer reads; they will never run"

// TestStrandedReportedAtStart enqueues ordered tasks of a type whose worker
// has no WithOrdering, and a task at a priority it does not serve: once
// Start returns, the worker reports both subjects, with what to change, in
// Stranded and in its log; the subjects it reads and the types it does not
// serve are not reported (issue 37: the enqueue returned nil and the tasks
// never ran, and only `jetflow status` told).
func TestStrandedReportedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := streams.MustNames("")
	e.enqueue(t, "mail.send", nil, framework.Ordered("customer-1"))
	e.enqueue(t, "mail.send", nil, framework.Ordered("customer-1"))
	e.enqueue(t, "mail.send", nil, framework.WithPriority(framework.PriorityLow))
	e.enqueue(t, "other.type", nil, framework.Ordered("customer-1"))
	logs := newLogCapture()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	w := e.worker(t, framework.WithLogger(slog.New(logs)))
	w.HandleFunc("mail.send", func(ctx context.Context, _ *framework.Task) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	}, framework.WithServedPriorities(framework.PriorityNormal, framework.PriorityHigh))
	startWorker(t, w)

	got := w.Stranded()
	slices.SortFunc(got, func(a, b framework.StrandedSubject) int { return strings.Compare(a.Subject, b.Subject) })
	ordered := framework.StrandedSubject{}
	for _, s := range got {
		if strings.Contains(s.Subject, ".ord.") {
			ordered = s
		}
	}
	if len(got) != 2 {
		t.Fatalf("stranded %+v, want the ordered subject and the low-priority one of mail.send", got)
	}
	if ordered.Type != "mail.send" || ordered.Tasks != 2 || ordered.Oldest.IsZero() ||
		!strings.HasPrefix(ordered.Subject, names.Prefix()+".ord.mail.send.") || !strings.Contains(ordered.Why, "framework.WithOrdering") {
		t.Errorf("ordered subject reported as %+v", ordered)
	}
	low := got[slices.IndexFunc(got, func(s framework.StrandedSubject) bool { return s != ordered })]
	if low.Type != "mail.send" || low.Subject != names.TaskSubject(framework.PriorityLow, "mail.send") || low.Tasks != 1 ||
		!strings.Contains(low.Why, "framework.WithServedPriorities") {
		t.Errorf("low-priority subject reported as %+v", low)
	}
	recs := logs.find(strandedMsg)
	var logged []string
	for _, r := range recs {
		logged = append(logged, r["subject"])
	}
	slices.Sort(logged)
	if want := []string{got[0].Subject, got[1].Subject}; !slices.Equal(logged, want) {
		t.Errorf("logged stranded subjects %v, want %v", logged, want)
	}
}

// TestStrandedFoundWhileRunning: ordered tasks enqueued after the worker
// started are reported by a later check, and a worker of the type with
// WithOrdering clears the report once it reads them.
func TestStrandedFoundWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noop := func(context.Context, *framework.Task) error { return nil }
	w := e.worker(t, framework.WithTimings(framework.Timings{StrandedCheck: time.Second}))
	w.HandleFunc("mail.send", noop)
	startWorker(t, w)
	if got := w.Stranded(); len(got) != 0 {
		t.Fatalf("stranded before any ordered task: %+v", got)
	}
	e.enqueue(t, "mail.send", nil, framework.Ordered("customer-1"))
	testutil.Wait(t, waitLong, "the ordered subject reported", func() bool { return len(w.Stranded()) == 1 })
	if got := w.Stranded(); len(got) != 1 || got[0].Type != "mail.send" {
		t.Fatalf("stranded %+v, want the ordered subject of mail.send", got)
	}
	ordered := e.worker(t)
	ordered.HandleFunc("mail.send", noop, framework.WithOrdering(framework.Ordering{Partitions: 1}))
	startWorker(t, ordered)
	testutil.Wait(t, waitLong, "the report cleared once a worker reads the ordered tasks", func() bool { return len(w.Stranded()) == 0 })
}

func TestWithStrandedCheckValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := framework.NewWorker(e.nc, framework.WithTimings(framework.Timings{StrandedCheck: time.Millisecond})); err == nil {
		t.Error("a stranded check every millisecond accepted")
	}
	if _, err := framework.NewWorker(e.nc, framework.WithTimings(framework.Timings{StrandedCheck: -1})); err != nil {
		t.Errorf("the check turned off: %v", err)
	}
}
