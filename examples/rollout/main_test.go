package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var resultRE = regexp.MustCompile(`(?m)^RESULT rollout tasks=(\d+) lost=(\d+) dead=(\d+) wasted_attempts=(\d+) max_wait_ms=(\d+) handed_back=(\d+) shutdown_handbacks=(\d+) duplicates=(\d+) rate=(\d+)$`)

type result struct{ tasks, lost, dead, wasted, maxWait, handedBack, shutdown, dups int }

// runRollout runs the example in process and returns its RESULT numbers.
func runRollout(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	if t.Failed() || err != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line in:\n%s", &stdout)
	}
	n := make([]int, 8)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return result{n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]}
}

// TestRollout replaces three v1 workers by v2 workers one at a time under
// load while the producers switch to v2: no task is lost, dead or charged
// an attempt, and the v1 workers handed v2 tasks back. The same deploy
// without payload versions dead-letters the v2 tasks that reach v1 workers.
func TestRollout(t *testing.T) {
	r := runRollout(t, "-rate", "1000", "-phase", "1500ms")
	if r.tasks < 3000 || r.lost != 0 || r.dead != 0 || r.wasted != 0 || r.dups != 0 {
		t.Errorf("with versions: %+v, want ≥ 3000 tasks, none lost, dead, wasted or run twice", r)
	}
	if r.handedBack == 0 {
		t.Errorf("with versions: %+v, want v2 tasks handed back by v1 workers", r)
	}
	b := runRollout(t, "-rate", "1000", "-phase", "1500ms", "-no-versions")
	if b.dead == 0 || b.wasted == 0 {
		t.Errorf("without versions: %+v, want v2 tasks dead-lettered by the v1 workers' decoder", b)
	}
}
