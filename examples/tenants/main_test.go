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

var resultRE = regexp.MustCompile(`(?m)^RESULT key_concurrency keys=(\d+) limit=(\d+) workers=3 max_observed=(\d+) tasks_per_s=\d+ unlimited_per_s=\d+ ratio=[0-9.]+$`)

var fairRE = regexp.MustCompile(`(?m)^RESULT fairness workers=3 noisy_backlog=300 quiet_tasks=15 quiet_last_start=(\d+) noisy_done_before=(\d+)$`)

// TestTenants runs the three drains on a few tenants: every task runs, no
// tenant ever has more tasks running than its limit, and with fair shares
// the quiet tenants' tasks start before the noisy tenant's backlog (run
// would fail after half of it; the test asks for far less).
func TestTenants(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-keys", "20", "-tasks", "600", "-limit", "2", "-work", "2ms", "-noisy", "300"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line in:\n%s", &stdout)
	}
	if most, _ := strconv.Atoi(m[3]); most < 1 || most > 2 {
		t.Errorf("max_observed=%d, want 1 or 2 (limit 2)\n%s", most, &stdout)
	}
	f := fairRE.FindStringSubmatch(stdout.String())
	if f == nil {
		t.Fatalf("no RESULT fairness line in:\n%s", &stdout)
	}
	// Each worker's mover fills at most its depth (64 by default) before
	// the quiet tenants' turns come; without fair shares the last quiet
	// task would start as task 315.
	if last, _ := strconv.Atoi(f[1]); last > 150 {
		t.Errorf("quiet_last_start=%d, want the quiet tasks among the first 150 of 315\n%s", last, &stdout)
	}
}
