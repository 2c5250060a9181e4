package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestOrdering smoke-tests the example at a small size: every event
// completes, none out of order, and the RESULT line is well formed.
func TestOrdering(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-orders", "100", "-partitions", "8", "-fail-every", "5"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	re := regexp.MustCompile(`(?m)^RESULT ordering keys=100 tasks=300 violations=0 per_s=\d+ partitions=8 lanes=0 retries=20$`)
	if !re.MatchString(stdout.String()) {
		t.Fatalf("no matching RESULT line in:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
}

// TestOrderingLanes is TestOrdering with 4 lanes.
func TestOrderingLanes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-orders", "100", "-lanes", "4", "-fail-every", "5"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	re := regexp.MustCompile(`(?m)^RESULT ordering keys=100 tasks=300 violations=0 per_s=\d+ partitions=0 lanes=4 retries=20$`)
	if !re.MatchString(stdout.String()) {
		t.Fatalf("no matching RESULT line in:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-orders", "0"}, {"-partitions", "3"}, {"-lanes", "3"}, {"-lanes", "-2"}, {"-fail-every", "-1"}, {"extra"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
