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

// TestTenants runs both drains on a few tenants: every task runs, and no
// tenant ever has more tasks running than its limit.
func TestTenants(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-keys", "20", "-tasks", "600", "-limit", "2", "-work", "2ms"}, &stdout, &stderr)
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
}
