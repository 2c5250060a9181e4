package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestCron runs the example in process: three ticks, each run once, by
// either replica, within the deadline.
func TestCron(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"-fires", "3"}, &stdout, &stderr)
	took := time.Since(start)
	out := stdout.String()
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out, &stderr)
	}
	for _, re := range []string{
		`(?m)^replica-a registered schedule "coupons" \(@every 1s\): created$`,
		`(?m)^replica-b registered schedule "coupons" \(@every 1s\): unchanged$`,
		`(?m)^schedule coupons on jetflow\.cron\.coupons fires @every 1s into jetflow\.task\.normal\.coupons\.issue; next tick at \d\d:\d\d:\d\d$`,
		`(?m)^summary: 3 ticks, 3 runs \(replica-a \d, replica-b \d\), 0 duplicates; schedule removed$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("stdout does not match %s\n%s", re, out)
		}
	}
	keys := regexp.MustCompile(`key (cron-coupons-\d{8}T\d{6}Z)`).FindAllStringSubmatch(out, -1)
	if len(keys) != 3 {
		t.Fatalf("%d tick lines, want 3:\n%s", len(keys), out)
	}
	if strings.Count(out, "\ntick ") != 3 {
		t.Errorf("tick lines:\n%s", out)
	}
	if took > 15*time.Second {
		t.Errorf("took %v, want < 15s", took)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-fires", "0"}, {"-timeout", "0s"}, {"extra"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// TestURL runs the example against an existing server, which keeps the
// topology afterwards, and checks that it says how to inspect it.
func TestURL(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-fires", "2", "-url", srv.ClientURL()}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), "go run ./cmd/jetflow -s "+srv.ClientURL()+" cron ls") {
		t.Errorf("no inspection hint:\n%s", &stdout)
	}
	_, js := testutil.JetStream(t, srv)
	if _, err := js.Stream(ctx, "JETFLOW_TASKS"); err != nil {
		t.Fatalf("task stream on the existing server: %v", err)
	}
}
