package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The demo stops a node while streams are placed. A file store
		// opened on a node during its shutdown is never closed by
		// nats-server, which leaves its flush loop and the shared access-time
		// ticker running (as in testutil's cluster tests): the server's
		// goroutines, not ours; everything of jetflow's is still checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

var resultRE = regexp.MustCompile(`(?m)^RESULT partitions tasks=(\d+) partitions=(\d+) per_partition=([\d/]+) delayed=(\d+) ordered=(\d+) cron_ticks=(\d+) killed=(\S+) lost=(\d+) order_violations=(\d+) duplicates=\d+ misplaced=(\d+) retries=\d+ enqueue_retries=\d+ delayed_max_late_ms=\d+ elapsed_ms=\d+$`)

// runDemo runs the example in process and returns its RESULT fields.
func runDemo(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
		}
	}()
	if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line")
	}
	return m
}

// checkResult checks a RESULT line of a run of 600 tasks over 20 keys.
func checkResult(t *testing.T, m []string, killed *regexp.Regexp) {
	t.Helper()
	if m[1] != "600" || m[2] != "3" || m[4] != "120" || m[5] != "180" {
		t.Errorf("tasks=%s partitions=%s delayed=%s ordered=%s, want 600, 3, 120, 180", m[1], m[2], m[4], m[5])
	}
	if m[8] != "0" || m[9] != "0" || m[10] != "0" {
		t.Errorf("lost=%s order_violations=%s misplaced=%s", m[8], m[9], m[10])
	}
	if !killed.MatchString(m[7]) {
		t.Errorf("killed=%s, want %s", m[7], killed)
	}
	if n, _ := strconv.Atoi(m[6]); n < 1 {
		t.Errorf("cron_ticks=%s", m[6])
	}
	sum := 0
	for _, p := range strings.Split(m[3], "/") {
		n, _ := strconv.Atoi(p)
		if n == 0 {
			t.Errorf("per_partition=%s: a partition ran nothing", m[3])
		}
		sum += n
	}
	if sum != 600 {
		t.Errorf("per_partition=%s adds up to %d, want 600", m[3], sum)
	}
}

// TestPartitions runs the example at a small size: a partition leader
// stops after a third of the tasks ran, and every task still runs, in its
// partition, each key in order.
func TestPartitions(t *testing.T) {
	t.Parallel()
	m := runDemo(t, "-tasks", "600", "-keys", "20", "-rate", "600", "-timeout", "100s")
	checkResult(t, m, regexp.MustCompile(`^jetflow-n\d$`))
}

// TestURL runs the example against an existing server: three partitions of
// one replica, and no server stopped.
func TestURL(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	m := runDemo(t, "-url", srv.ClientURL(), "-replicas", "1", "-tasks", "600", "-keys", "20", "-rate", "600", "-timeout", "100s")
	checkResult(t, m, regexp.MustCompile(`^none$`))
}

// TestLedger checks the verdict without a server: a task never run is
// lost, a key's task started before its predecessor completed or run after
// a later one completed is a violation, a second run is a duplicate.
func TestLedger(t *testing.T) {
	t.Parallel()
	l := newLedger()
	l.enqueued("i-1", immediate, "S0")
	l.enqueued("i-2", immediate, "S1")
	for _, id := range []string{"o-0", "o-1", "o-2"} {
		l.enqueued(id, ordered, "S2")
	}
	l.done("i-1", "S0", "", 0)
	l.done("i-1", "S0", "", 0) // redelivered
	l.start("o-1", "k", 1)     // before o-0 completed
	l.done("o-1", "S2", "k", 1)
	l.start("o-0", "k", 0) // after o-1 completed
	l.done("o-0", "S2", "k", 0)
	l.start("o-2", "k", 2)
	l.done("o-2", "S1", "k", 2) // not where it was stored
	s := l.summarize(func(_ string, _ kind, stored string) string { return stored })
	if s.lost != 1 || s.lostIDs[0] != "i-2" {
		t.Errorf("lost %d %v, want i-2", s.lost, s.lostIDs)
	}
	if len(s.violations) != 2 {
		t.Errorf("violations %q, want 2", s.violations)
	}
	if s.duplicates != 1 || s.misplaced != 1 {
		t.Errorf("duplicates=%d misplaced=%d, want 1 and 1", s.duplicates, s.misplaced)
	}
	if s.perStream["S2"] != 2 || s.perStream["S1"] != 1 || s.perStream["S0"] != 1 {
		t.Errorf("per stream %v", s.perStream)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{
		{"-tasks", "10"}, {"-keys", "0"}, {"-tasks", "100", "-keys", "31"}, {"-partitions", "0"},
		{"-partitions", "65"}, {"-replicas", "4"}, {"-rate", "0"}, {"-timeout", "0s"}, {"extra"},
	} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	if _, err := parseFlags([]string{"-url", "nats://x:4222", "-replicas", "5"}, &stderr); err != nil {
		t.Errorf("-replicas 5 with -url: %v", err)
	}
}
