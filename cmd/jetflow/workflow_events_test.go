package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestWorkflowsSignal: get and ls show what a waiting and a sleeping run
// wait for, and signal resumes the waiting run, by run or by key; bad input
// fails with a clear message.
func TestWorkflowsSignal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	def := workflow.New("pay")
	workflow.WaitEvent(def, "paid", func(ctx context.Context, id string) (string, error) { return "payment.confirmed." + id, nil },
		workflow.Timeout(time.Hour, workflow.TimeoutContinue))
	workflow.Step(def, "ship", func(ctx context.Context, id string) (string, error) {
		return workflow.Output[string](ctx, "paid")
	}, workflow.After("paid"))
	nap := workflow.New("nap")
	workflow.Sleep(nap, "sleep", time.Hour)
	e.worker(t, func(w *framework.Worker) { workflow.Register(w, def, nap) })
	wc, err := workflow.NewClient(e.cl, def, nap)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"o-1", "o-2"} {
		if _, err := wc.Start(t.Context(), "pay", id, workflow.WithRunID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := wc.Start(t.Context(), "nap", nil, workflow.WithRunID("nap-1")); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "runs waiting and sleeping", func() bool {
		n := 0
		for _, id := range []string{"o-1", "o-2", "nap-1"} {
			if r, err := wc.Status(t.Context(), id); err == nil && (r.Steps[0].State == workflow.StepWaiting || r.Steps[0].State == workflow.StepSleeping) {
				n++
			}
		}
		return n == 3
	})
	// A waiting run's document says so before its wait entry is stored;
	// signal lists the runs from the entries.
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	names := e.cl.Names()
	testutil.Wait(t, waitLong, "wait entries stored", func() bool {
		st, err := js.Stream(t.Context(), names.WaitStream())
		if err != nil {
			return false
		}
		for _, id := range []string{"o-1", "o-2"} {
			if _, err := st.GetLastMsgForSubject(t.Context(), names.WaitSubject("payment.confirmed."+id, id)); err != nil {
				return false
			}
		}
		return true
	})
	out := e.ok(t, nil, "workflows", "get", "o-1").stdout
	if !regexp.MustCompile(`(?m)^paid\s+-\s+waiting\s+1\s+event payment\.confirmed\.o-1 until 20`).MatchString(out) {
		t.Errorf("waiting run:\n%s", out)
	}
	out = e.ok(t, nil, "workflows", "get", "nap-1").stdout
	if !regexp.MustCompile(`(?m)^sleep\s+-\s+sleeping\s+1\s+wake 20\S+ \S+ \(in `).MatchString(out) {
		t.Errorf("sleeping run:\n%s", out)
	}
	out = e.ok(t, nil, "workflows", "ls").stdout
	if !regexp.MustCompile(`(?m)^o-2\s+pay\s+running\s+0/2\s+event payment\.confirmed\.o-2`).MatchString(out) {
		t.Errorf("ls:\n%s", out)
	}

	var info struct {
		Key     string
		Seq     uint64
		Waiting []string
	}
	e.ok(t, &info, "workflows", "signal", "--run", "o-1", `"by run"`, "--json")
	if info.Key != "payment.confirmed.o-1" || len(info.Waiting) != 1 || info.Waiting[0] != "o-1" {
		t.Fatalf("signal --run: %+v", info)
	}
	out = e.ok(t, nil, "workflows", "signal", "payment.confirmed.o-2", `"by key"`).stdout
	if !regexp.MustCompile(`resuming 1 waiting run\(s\): o-2`).MatchString(out) {
		t.Errorf("signal by key: %s", out)
	}
	for id, want := range map[string]string{"o-1": `"by run"`, "o-2": `"by key"`} {
		ctx, cancel := context.WithTimeout(t.Context(), waitLong)
		r, err := wc.Wait(ctx, id)
		cancel()
		if err != nil || r.Status != workflow.RunCompleted || string(r.Step("ship").Output) != want {
			t.Fatalf("run %s: %v %+v", id, err, r)
		}
	}
	out = e.ok(t, nil, "workflows", "signal", "payment.confirmed.o-3").stdout
	if !regexp.MustCompile(`no run waits for it now: it is kept`).MatchString(out) {
		t.Errorf("early signal: %s", out)
	}
	e.fails(t, exitFailed, `invalid event`, "workflows", "signal", "bad key")
	e.fails(t, exitFailed, `invalid event`, "workflows", "signal", "k", "not json")
	e.fails(t, exitFailed, `run not found`, "workflows", "signal", "--run", "nope")
	e.fails(t, exitFailed, `waits for no event`, "workflows", "signal", "--run", "o-1")
	e.fails(t, exitUsage, `workflows signal takes`, "workflows", "signal")
}
