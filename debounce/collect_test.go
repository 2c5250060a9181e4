package debounce_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/testutil"
)

// collected records the runs of a collecting type.
type collected struct {
	mu   sync.Mutex
	runs map[string][][]string // task key → each run's payloads
}

func (c *collected) worker(t *testing.T, e *testenv.Env, taskType string) {
	t.Helper()
	w := e.Worker(t)
	if err := debounce.Install(w); err != nil {
		t.Fatal(err)
	}
	framework.Handle(w, taskType, func(_ context.Context, task *framework.Task, edits []string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.runs[task.Key()] = append(c.runs[task.Key()], edits)
		return nil
	})
	testutil.StartWorker(t, w)
}

func (c *collected) of(key string) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.runs[key])
}

// TestDebounceCollects: a collecting burst runs once with every payload in
// enqueue order; a burst that reaches MaxCollectedBytes runs at once,
// before its window; mixing Collect within a burst and an oversized
// payload are refused.
func TestDebounceCollects(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	c := &collected{runs: map[string][][]string{}}
	c.worker(t, e, "doc.edits")
	o := debounce.Options{Key: "doc-1", Window: 300 * time.Millisecond, MaxWait: time.Minute, Collect: true}
	var want []string
	for i := range 20 {
		edit := "edit " + strings.Repeat("x", i)
		want = append(want, edit)
		if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.edits", edit, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Wait(t, waitLong, "the burst's run", func() bool { return len(c.of("doc-1")) > 0 })
	if got := c.of("doc-1"); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("runs %q, want one run with the 20 edits in order", got)
	}

	// Mixing: the burst under way collects.
	if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.edits", "a", o); err != nil {
		t.Fatal(err)
	}
	last := o
	last.Collect = false
	if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.edits", "b", last); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("a last-payload enqueue into a collecting burst: %v, want ErrInvalidOption", err)
	}
	huge := strings.Repeat("h", debounce.MaxCollectedBytes+1)
	if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.edits", huge, o); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("an oversized collected payload: %v, want ErrInvalidOption", err)
	}

	// Full: three payloads of 100 KiB reach MaxCollectedBytes and run
	// before the window of an hour.
	full := debounce.Options{Key: "big", Window: time.Hour, MaxWait: 2 * time.Hour, Collect: true}
	big := strings.Repeat("b", 100<<10)
	for range 3 {
		if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.edits", big, full); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Wait(t, waitLong, "the full burst's run", func() bool { return len(c.of("big")) > 0 })
	if got := c.of("big"); len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("full burst ran %d times, want once with 3 payloads", len(got))
	}
}
