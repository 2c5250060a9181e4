package framework_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// recordingTracer sets a header on every task and records the results.
type recordingTracer struct {
	mu      sync.Mutex
	started []string
	done    map[string]error
	setErrs []error
}

func (r *recordingTracer) trace(ctx context.Context, info framework.TaskInfo, h framework.EnqueueHeader) func(framework.TaskInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, info.Type)
	if err := h.Set("Trace-Id", "trace-of-"+info.Type); err != nil {
		r.setErrs = append(r.setErrs, err)
	}
	r.setErrs = append(r.setErrs, h.Set("Jetflow-Mine", "x"), h.Set("bad key", "x"), h.Set("Ok", "line\nbreak"))
	return func(out framework.TaskInfo, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.done == nil {
			r.done = map[string]error{}
		}
		r.done[out.Type+"/"+out.ID] = err
	}
}

func TestEnqueueTracerCarriesHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	rec := &recordingTracer{}
	cl, err := framework.NewClient(e.nc, framework.WithHooks(framework.Hooks{Enqueuing: rec.trace}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	w := e.worker(t)
	for _, typ := range []string{"tr.now", "tr.later", "tr.many"} {
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			got <- task.Type + "=" + task.Header("Trace-Id")
			return nil
		})
	}
	startWorker(t, w)
	now, err := cl.Enqueue(ctx, "tr.now", nil)
	if err != nil {
		t.Fatal(err)
	}
	later, err := cl.Enqueue(ctx, "tr.later", nil, framework.In(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	many, err := cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: "tr.many"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 3 {
		seen[testutil.Recv(t, got, waitLong, "traced task")] = true
	}
	for _, want := range []string{"tr.now=trace-of-tr.now", "tr.later=trace-of-tr.later", "tr.many=trace-of-tr.many"} {
		if !seen[want] {
			t.Errorf("handler did not see %s: %v", want, seen)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, k := range []string{"tr.now/" + now.ID, "tr.later/" + later.ID, "tr.many/" + many[0].ID} {
		if err, ok := rec.done[k]; !ok || err != nil {
			t.Errorf("done %s: called %v, err %v", k, ok, err)
		}
	}
	if len(rec.started) != 3 {
		t.Errorf("tracer called for %v", rec.started)
	}
	var invalid int
	for _, err := range rec.setErrs {
		if errors.Is(err, framework.ErrInvalidOption) {
			invalid++
		} else if err != nil {
			t.Errorf("unexpected set error %v", err)
		}
	}
	if invalid != 9 { // three refused headers per task
		t.Errorf("%d refused headers, want 9 (%v)", invalid, rec.setErrs)
	}
}

func TestEnqueueTracerSeesErrors(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc := testutil.Connect(t, srv)
	rec := &recordingTracer{}
	cl, err := framework.NewClient(nc, framework.WithHooks(framework.Hooks{Enqueuing: rec.trace}))
	if err != nil {
		t.Fatal(err)
	}
	// No topology: the publish fails, and the tracer hears of it.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, enqErr := cl.Enqueue(ctx, "tr.fail", nil, framework.WithID("f1"))
	if enqErr == nil {
		t.Fatal("enqueue without topology succeeded")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err := rec.done["tr.fail/f1"]; err == nil || err.Error() != enqErr.Error() {
		t.Errorf("done got %v, want %v", err, enqErr)
	}
}
