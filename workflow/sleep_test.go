package workflow_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// stamps records when steps ran, by run and step.
type stamps struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newStamps() *stamps { return &stamps{m: make(map[string]time.Time)} }

func (s *stamps) set(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[stepKey(ctx)] = time.Now()
}

func (s *stamps) get(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

// napDef is a → nap (a durable sleep of d) → b; b records when it ran and
// reads the wake time.
func napDef(d time.Duration, at *stamps) *workflow.Definition {
	def := workflow.New("nap")
	workflow.Step(def, "a", func(ctx context.Context, _ struct{}) (int, error) {
		at.set(ctx)
		return 1, nil
	})
	workflow.Sleep(def, "nap", d, workflow.After("a"))
	workflow.Step(def, "b", func(ctx context.Context, _ struct{}) (time.Time, error) {
		at.set(ctx)
		return workflow.Output[time.Time](ctx, "nap")
	}, workflow.After("nap"))
	return def
}

// TestSleepNeverEarly: a sleeping run is recorded as such with its wake
// time, holds no running task, and the step after the sleep starts at the
// wake time or later, never before.
func TestSleepNeverEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := newStamps()
	def := napDef(1500*time.Millisecond, at)
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w)
	c := e.client(t, def)

	id := start(t, c, "nap", nil)
	r := waitStatus(t, c, id, "nap sleeping", func(r *workflow.Run) bool { return r.Step("nap").State == workflow.StepSleeping })
	nap := r.Step("nap")
	if r.Status != workflow.RunRunning || nap.WakeAt.IsZero() {
		t.Fatalf("sleeping run: status %s, wake at %v", r.Status, nap.WakeAt)
	}
	if a := at.get(id + "/a"); nap.WakeAt.Before(a.Add(1500 * time.Millisecond)) {
		t.Fatalf("wake time %v is less than 1.5 s after a ran at %v", nap.WakeAt, a)
	}
	testutil.Wait(t, waitLong, "no task running", func() bool { return w.Stats().Running == 0 })
	if r, err := c.Status(t.Context(), id); err != nil || r.Step("nap").State != workflow.StepSleeping {
		t.Fatalf("no task runs, and the run is not sleeping (%v)", err)
	}
	r = wait(t, c, id)
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	b := at.get(id + "/b")
	if b.Before(nap.WakeAt) {
		t.Fatalf("b ran at %v, %v before the wake time %v", b, nap.WakeAt.Sub(b), nap.WakeAt)
	}
	var out time.Time
	if err := json.Unmarshal(r.Step("b").Output, &out); err != nil || !out.Equal(nap.WakeAt) {
		t.Fatalf("b read the wake time %v (%v), want %v", out, err, nap.WakeAt)
	}
	if st := r.Step("nap"); st.State != workflow.StepDone || !st.WakeAt.Equal(nap.WakeAt) || st.EndedAt.Before(nap.WakeAt) {
		t.Fatalf("nap after waking: %+v", st)
	}
}

// TestSleepUntilPast: a wake time in the past completes the step at once,
// and SleepUntil's function reads the run's input and its ancestors'
// outputs.
func TestSleepUntilPast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	def := workflow.New("until")
	workflow.Step(def, "when", func(ctx context.Context, in time.Time) (time.Time, error) { return in, nil })
	workflow.SleepUntil(def, "nap", func(ctx context.Context, _ time.Time) (time.Time, error) {
		return workflow.Output[time.Time](ctx, "when")
	}, workflow.After("when"))
	workflow.Step(def, "b", func(ctx context.Context, _ time.Time) (bool, error) { return true, nil }, workflow.After("nap"))
	c := e.run(t, def)
	past := time.Now().Add(-time.Hour).UTC()
	r := wait(t, c, start(t, c, "until", past))
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	var wake time.Time
	if err := json.Unmarshal(r.Step("nap").Output, &wake); err != nil || !wake.Equal(past) {
		t.Fatalf("nap output %s (%v), want %v", r.Step("nap").Output, err, past)
	}
}

// TestSleepSurvivesRestart: a run sleeps through the loss of its worker and
// a restart of the server (the wake-up is a schedule stored in the
// server), and wakes on a new worker, not before its wake time.
func TestSleepSurvivesRestart(t *testing.T) {
	t.Parallel()
	te := testutil.NewEnv(t, streams.Config{}, testutil.WithListen())
	fc, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: te.Server, nc: te.Conn, js: te.JS, fc: fc}
	at := newStamps()
	def := napDef(3*time.Second, at)
	w, _ := e.worker(t, []*workflow.Definition{def})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.client(t, def)
	id := start(t, c, "nap", nil)
	r := waitStatus(t, c, id, "nap sleeping", func(r *workflow.Run) bool { return r.Step("nap").State == workflow.StepSleeping })
	wake := r.Step("nap").WakeAt
	// The schedule must be stored before the restart for the test to mean
	// anything: wait until the mover moved the wake task.
	testutil.Wait(t, waitLong, "wake-up schedule stored", func() bool {
		return w.Stats().DelaysMoved > 0
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	srv := testutil.RestartServer(t, e.srv)
	e.srv = srv
	testutil.Wait(t, waitLong, "server back", func() bool { return srv.JetStreamEnabled() && e.nc.IsConnected() })
	w2, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w2)
	var done *workflow.Run
	testutil.Wait(t, waitLong, "run final after the restart", func() bool {
		// Errors while the client's connection comes back are expected.
		r, err := c.Status(t.Context(), id)
		done = r
		return err == nil && r.Status.Final()
	})
	if done.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", done.Status, done.Error)
	}
	if b := at.get(id + "/b"); b.Before(wake) {
		t.Fatalf("b ran %v before the wake time", wake.Sub(b))
	}
}
