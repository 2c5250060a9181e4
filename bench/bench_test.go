package main

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requiredKeys lists the keys every figure's RESULT line must carry.
var requiredKeys = map[string][]string{
	figDrain:      {"raw_per_s", "jetflow_per_s", "ratio"},
	figEnqueue:    {"raw_per_s", "jetflow_per_s", "ratio"},
	figLatency:    {"rate_per_s", "p50_ms", "p99_ms"},
	figDelay:      {"tasks", "early", "p50_ms", "p99_ms", "max_ms"},
	figPriority:   {"backlog", "critical_p99_ms"},
	figEnqueueOne: {"raw_per_s", "jetflow_per_s", "ratio"},
	figLatency10k: {"rate_per_s", "p50_ms", "p99_ms"},
	figLatency20k: {"rate_per_s", "p50_ms", "p99_ms"},
	figWorkflow:   {"step_ratio", "raw_chain_step_ratio", "raw_doc_chain_step_ratio", "raw_async_chain_step_ratio"},
	figDrainTypes: {"types", "raw_per_s", "jetflow_per_s", "ratio", "one_priority_per_s", "one_priority_ratio"},
	figFairness:   {"noisy_backlog", "quiet_rate_per_s", "quiet_p99_wait_ms", "unfair_p99_wait_ms", "drain_ratio"},
}

// TestQuick runs the whole bench in -quick mode on its own embedded server
// and checks that it prints one well-formed RESULT line per figure. It is a
// smoke test: timings are not asserted.
func TestQuick(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick"}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parse -quick: %v", err)
	}
	required := maps.Clone(requiredKeys)
	if _, err := findNATSServer(); err != nil {
		// The TCP figures need a nats-server binary; CI has none.
		t.Logf("drain_tcp, latency_10k_tcp and latency_20k_tcp left out: %v", err)
		delete(cfg.only, figDrainTCP)
		delete(cfg.only, figLatency10kTCP)
		delete(cfg.only, figLatency20kTCP)
	} else {
		required[figLatency10kTCP] = []string{"rate_per_s", "p50_ms", "p99_ms", "raw_p99_ms"}
		required[figLatency20kTCP] = []string{"rate_per_s", "p50_ms", "p99_ms", "raw_p99_ms"}
	}
	// A guard against a hang only: on a loaded 2-core machine the quick run
	// took more than 3 minutes (every wait inside is bounded by -quick's
	// one-minute timeout anyway).
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	seen := make(map[string]bool)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "RESULT ") {
			t.Errorf("stdout line is not a RESULT line: %q", line)
			continue
		}
		fig, vals, err := parseResult(line)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		keys, known := required[fig]
		if !known {
			continue // a figure this test does not know about
		}
		if seen[fig] {
			t.Errorf("figure %s printed twice", fig)
		}
		seen[fig] = true
		for _, k := range keys {
			v, ok := vals[k]
			if !ok {
				t.Errorf("%s: key %s missing in %q", fig, k, line)
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("%s: %s=%v is not a finite non-negative number", fig, k, v)
			}
		}
	}
	for fig := range required {
		if !seen[fig] {
			t.Errorf("no RESULT line for figure %s\nstdout:\n%s\nstderr:\n%s", fig, out, stderr.String())
		}
	}
	if t.Failed() {
		return
	}
	// Results that cannot be right whatever the machine's speed.
	if !strings.Contains(out, "RESULT delay tasks=200 ") {
		t.Errorf("delay line does not report the -quick task count:\n%s", out)
	}
}

func TestParseResultRoundTrip(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printResult(&b, "drain", frate("raw_per_s", 41234.4), frate("jetflow_per_s", 38000), fratio("ratio", 0.9216), fms("p99_ms", 1.234))
	line := strings.TrimSuffix(b.String(), "\n")
	if want := "RESULT drain raw_per_s=41234 jetflow_per_s=38000 ratio=0.922 p99_ms=1.23"; line != want {
		t.Fatalf("printed %q, want %q", line, want)
	}
	fig, vals, err := parseResult(line)
	if err != nil {
		t.Fatal(err)
	}
	if _, vals, err := parseResult("RESULT drain raw=consume ratio=0.5"); err != nil || vals["ratio"] != 0.5 || len(vals) != 1 {
		t.Errorf("a word for raw: %v %v", vals, err)
	}
	if fig != "drain" || vals["raw_per_s"] != 41234 || vals["ratio"] != 0.922 || len(vals) != 4 {
		t.Fatalf("parsed %s %v", fig, vals)
	}
	for _, bad := range []string{
		"RESULT drain",
		"RESULT drain ratio",
		"RESULT drain ratio=x",
		"RESULT drain ratio=1 ratio=2",
		"drain ratio=1",
		"RESULT drain raw= ratio=1",
	} {
		if _, _, err := parseResult(bad); err == nil {
			t.Errorf("parseResult(%q) accepted a malformed line", bad)
		}
	}
}

func TestMedianAndPercentile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range tests {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median %s = %v, want %v", tc.name, got, tc.want)
		}
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // reversed: percentile sorts
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 1: time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-only", "drain,latency"}, true},
		{[]string{"-only", "drain,bogus"}, false},
		{[]string{"-runs", "0"}, false},
		{[]string{"-side", "raw"}, true},
		{[]string{"-side", "both"}, false},
		{[]string{"-raw-header", "msgid"}, true},
		{[]string{"-raw-header", "x"}, false},
		{[]string{"-state", "off"}, true},
		{[]string{"-state", "maybe"}, false},
		{[]string{"-prefetch", "300"}, false},
		{[]string{"extra"}, false},
		{[]string{"-one-n", "0"}, false},
		{[]string{"-big"}, true},
		{[]string{"-only", "backlog_1m"}, true},
		{[]string{"-soak", "10m"}, true},
		{[]string{"-soak", "10m", "-soak-rate", "0"}, false},
		{[]string{"-soak", "1m", "-soak-outage", "1m"}, false},
		{[]string{"-soak", "1m", "-soak-max-delay", "1s"}, false},
		{[]string{"-soak", "1m", "-soak-warmup", "2m"}, false},
		{[]string{"-soak", "-1s"}, false},
		{[]string{"-max-task-bytes", "1073741824"}, true},
	}
	for _, tc := range tests {
		cfg, err := parseFlags(tc.args, &bytes.Buffer{})
		if (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q): err = %v, want ok=%v", tc.args, err, tc.ok)
			continue
		}
		if err == nil && len(tc.args) == 0 && (len(cfg.only) != len(allFigures) || cfg.n != 50000 || cfg.runs != 3) {
			t.Errorf("defaults: %+v", cfg)
		}
		if err == nil && len(tc.args) == 0 && cfg.only[figBacklog] {
			t.Errorf("backlog_1m selected without -big")
		}
		if err == nil && len(tc.args) == 1 && tc.args[0] == "-big" && !cfg.only[figBacklog] {
			t.Errorf("backlog_1m not selected with -big")
		}
	}
}
