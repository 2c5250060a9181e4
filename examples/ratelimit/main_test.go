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

var resultRE = regexp.MustCompile(`(?m)^RESULT ratelimit limit_per_s=(\d+) observed_per_s=([0-9.]+) workers=3 over_limit_windows=(\d+) calls=(\d+) windows=(\d+)$`)

// TestRateLimit smoke-tests the example at a small size: every charge
// completes, each reaches the gateway once, and the RESULT line is well
// formed. The observed rate is reported, not asserted (timing belongs to
// measurements, not tests).
func TestRateLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-tasks", "120", "-limit", "50"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line in:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	if calls, _ := strconv.Atoi(m[4]); calls != 120 {
		t.Fatalf("calls=%d, want 120", calls)
	}
	t.Logf("%s", m[0])
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-tasks", "0"}, {"-limit", "0"}, {"-burst", "200"}, {"extra"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
