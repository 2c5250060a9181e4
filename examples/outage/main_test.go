package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var resultRE = regexp.MustCompile(`(?m)^RESULT outage tasks=(\d+) completed=(\d+) dead=(\d+) calls_during_outage=(\d+)$`)

// runOutage runs the example in process and returns its RESULT numbers.
func runOutage(t *testing.T, args ...string) (tasks, completed, dead, calls int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
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
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n[0], n[1], n[2], n[3]
}

// TestOutage smoke-tests the example: with the breaker, every charge
// completes, none is dead, and the gateway sees few calls while it is down;
// without it, the same outage takes many more calls.
func TestOutage(t *testing.T) {
	const tasks = "400"
	var withBreaker, without int
	t.Run("group", func(t *testing.T) {
		t.Run("breaker", func(t *testing.T) {
			t.Parallel()
			n, done, dead, calls := runOutage(t, "-tasks", tasks, "-outage", "2s")
			if n != 400 || done != 400 || dead != 0 {
				t.Fatalf("tasks=%d completed=%d dead=%d", n, done, dead)
			}
			withBreaker = calls
		})
		t.Run("no-breaker", func(t *testing.T) {
			t.Parallel()
			n, done, dead, calls := runOutage(t, "-tasks", tasks, "-outage", "2s", "-no-breaker")
			if n != 400 || done != 400 || dead != 0 {
				t.Fatalf("tasks=%d completed=%d dead=%d", n, done, dead)
			}
			without = calls
		})
	})
	t.Logf("calls during a 2s outage: %d with the breaker, %d without", withBreaker, without)
	if withBreaker == 0 || withBreaker >= without {
		t.Fatalf("calls during the outage: %d with the breaker, %d without", withBreaker, without)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-tasks", "1"}, {"-outage", "0s"}, {"extra"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// TestURL runs the example against an existing server.
func TestURL(t *testing.T) {
	srv := testutil.RunServer(t, testutil.WithListen())
	n, done, dead, _ := runOutage(t, "-tasks", "100", "-outage", "1s", "-url", srv.ClientURL())
	if n != 100 || done != 100 || dead != 0 {
		t.Fatalf("tasks=%d completed=%d dead=%d", n, done, dead)
	}
}
