package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestLanesCommand holds a key's head running in a lane, with two of its
// tasks queued behind it, and lists the lanes: the lane shows the worker
// holding it and its figures, in JSON and in the table.
func TestLanesCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	release := make(chan struct{})
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("lane.cli", func(ctx context.Context, task *framework.Task) error {
			if task.Header(framework.HeaderOrderingKey) == "acct-7" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 4}))
	}, framework.WithWorkerID("lane-worker"), framework.WithTimings(framework.Timings{RegistryInterval: framework.MinRegistryInterval}))
	t.Cleanup(func() { close(release) })
	for i := range 3 {
		if _, err := e.cl.Enqueue(ctx, "lane.cli", []byte(fmt.Sprint(i)), framework.Ordered("acct-7")); err != nil {
			t.Fatal(err)
		}
	}
	type laneJSON struct {
		Type, Owner           string
		Lane, Lanes           int
		Running, Queued, Keys int
		Delivered             int
		Open                  bool
	}
	var lanes []laneJSON
	var held *laneJSON
	testutil.Wait(t, waitLong, "the lane of acct-7 listed with its owner, one running and two queued", func() bool {
		e.ok(t, &lanes, "lanes", "ls", "--type", "lane.cli", "--json")
		for i := range lanes {
			if l := &lanes[i]; l.Owner == "lane-worker" && l.Running == 1 && l.Queued == 2 && l.Keys == 1 && l.Delivered == 3 && l.Open {
				held = l
				return len(lanes) == 4
			}
		}
		return false
	})
	if held.Type != "lane.cli" || held.Lanes != 4 {
		t.Errorf("lane %+v", *held)
	}
	table := e.ok(t, nil, "lanes", "ls").stdout
	for _, want := range []string{"OWNER", "lane.cli", "lane-worker", fmt.Sprintf("%d/4", held.Lane)} {
		if !strings.Contains(table, want) {
			t.Errorf("lanes ls table lacks %q:\n%s", want, table)
		}
	}
	e.fails(t, exitUsage, `--type`, "lanes", "ls", "--type", "bad type")
	e.fails(t, exitUsage, `no arguments`, "lanes", "ls", "extra")
	if out := e.ok(t, nil, "lanes", "ls", "--type", "other.type").stdout; !strings.Contains(out, "no lanes") {
		t.Errorf("lanes ls of a type without lanes:\n%s", out)
	}
}
