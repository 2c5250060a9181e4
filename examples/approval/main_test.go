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

var resultRE = regexp.MustCompile(`(?m)^RESULT approval orders=(\d+) approved=(\d+) timed_out_compensated=(\d+)$`)

// runApproval runs the example in process and returns its RESULT numbers.
func runApproval(t *testing.T, args ...string) (orders, approved, compensated int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, &stdout, &stderr)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line in:\n%s", &stdout)
	}
	n := make([]int, 3)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n[0], n[1], n[2]
}

// TestApproval approves two orders of three: they sleep until their due
// time and ship; the third times out and its reservation is released.
func TestApproval(t *testing.T) {
	t.Parallel()
	orders, approved, compensated := runApproval(t, "-orders", "3", "-approve-after", "200ms", "-timeout", "1s", "-due", "500ms")
	if orders != 3 || approved != 2 || compensated != 1 {
		t.Errorf("orders=%d approved=%d timed_out_compensated=%d, want 3, 2, 1", orders, approved, compensated)
	}
}

// TestApprovalNone approves nothing: every order times out and compensates.
func TestApprovalNone(t *testing.T) {
	t.Parallel()
	orders, approved, compensated := runApproval(t, "-orders", "2", "-no-approve", "-approve-after", "0s", "-timeout", "1s", "-due", "0s")
	if orders != 2 || approved != 0 || compensated != 2 {
		t.Errorf("orders=%d approved=%d timed_out_compensated=%d, want 2, 0, 2", orders, approved, compensated)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-timeout", "500ms"},
		{"-approve-after", "5s", "-timeout", "3s"},
		{"-orders", "0"},
		{"-orders", "2", "-unapproved", "3"},
		{"-due", "-1s"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
