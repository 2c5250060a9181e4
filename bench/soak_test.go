package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// TestSoakSmoke runs a short soak at a low rate on its own embedded
// cluster: every task must end, the dead letters must be the poison tasks,
// the dependency's outage must open its breaker, and the CSV must hold one
// well-formed row per sample. Timings are not asserted.
func TestSoakSmoke(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseFlags([]string{"-soak", "14s", "-soak-rate", "300", "-soak-interval", "2s", "-soak-outage", "6s",
		"-soak-open", "2s", "-soak-max-delay", "3s", "-soak-warmup", "4s", "-soak-workers", "1", "-soak-drain", "1m",
		"-soak-dir", dir, "-soak-servers", soakServersEmbedded}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := runSoak(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("soak: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	fig, vals, err := parseResult(strings.TrimSpace(stdout.String()))
	if err != nil || fig != figSoak {
		t.Fatalf("stdout is not one soak RESULT line (%v):\n%s", err, stdout.String())
	}
	for _, k := range []string{"minutes", "rate_per_s", "lost", "dead", "poison", "p99_ms", "rss_start_mb", "rss_end_mb", "rss_growth_pct"} {
		if _, ok := vals[k]; !ok {
			t.Errorf("key %s missing", k)
		}
	}
	// The first 4,200 indexes hold 6 poison tasks; a slow machine sends a
	// few hundred fewer.
	if vals["lost"] != 0 || vals["dead"] != vals["poison"] || vals["poison"] < 4 || vals["early"] != 0 || vals["dead_unexpected"] != 0 {
		t.Errorf("accounting: %s", stdout.String())
	}
	if vals["breaker_opens"] < 1 {
		t.Errorf("the outage did not open the breaker: %s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	f, err := os.Open(filepath.Join(dir, soakCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 5 || !slices.Equal(rows[0], soakHeader) {
		t.Fatalf("csv: %d rows, header %q", len(rows), rows[0])
	}
	sawOutage, sawDrain := false, false
	for _, r := range rows[1:] {
		sawOutage = sawOutage || r[2] == "1"
		sawDrain = sawDrain || r[1] == "0"
	}
	if !sawOutage || !sawDrain {
		t.Errorf("csv has no outage sample (%v) or no drain sample (%v)", sawOutage, sawDrain)
	}
}

// TestSoakCheckCountsLost checks the end-of-run accounting without a
// server: a confirmed task that never ended is lost and named; one whose
// enqueue was never confirmed is not a task of the run.
func TestSoakCheckCountsLost(t *testing.T) {
	t.Parallel()
	s := &soakRun{cfg: defaultConfig(), runID: "r", capacity: 128, confirmed: newBitset(128), done: newBitset(128)}
	s.cfg.soakMaxDelay = time.Minute
	for i := range uint64(100) {
		if i != 40 {
			s.confirmed.set(i)
		}
		if i != 7 && i != 40 {
			s.done.set(i)
		}
	}
	v, err := s.check(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if v.pending != 1 || v.lost != 1 || len(v.missing) != 1 || !strings.HasPrefix(v.missing[0], "r-7 ") || v.complete() {
		t.Fatalf("verdict %+v, want task 7 lost", v)
	}
}

func TestSoakDrawShares(t *testing.T) {
	t.Parallel()
	const n = 1_000_000
	var kinds [5]int
	var prios [4]int
	for i := range uint64(n) {
		d := drawTask(i, time.Minute)
		kinds[d.kind]++
		prios[priorityIndex(d.priority)]++
		if d.kind == kindDelayed && (d.delay < time.Second || d.delay >= time.Minute) {
			t.Fatalf("task %d: delay %v outside [1s, 1m)", i, d.delay)
		}
		if d.kind != kindDelayed && d.delay != 0 {
			t.Fatalf("task %d (%v) has a delay", i, d.kind)
		}
	}
	want := [5]float64{1 - 0.001 - 0.02 - 0.01 - 0.1, 0.1, 0.02, 0.001, 0.01}
	for k, c := range kinds {
		if got := float64(c) / n; got < want[k]*0.9 || got > want[k]*1.1 {
			t.Errorf("%v: share %.4f, want %.4f", soakKind(k), got, want[k])
		}
	}
	for p, c := range prios {
		if got := float64(c) / n; got < 0.24 || got > 0.26 {
			t.Errorf("priority %v: share %.4f, want 0.25", soakPriorities[p], got)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var h histogram
	if _, ok := h.quantile(99); ok {
		t.Fatal("quantile of an empty histogram")
	}
	ds := make([]time.Duration, 0, 10000)
	for i := 1; i <= 10000; i++ {
		d := time.Duration(i) * 37 * time.Microsecond
		ds = append(ds, d)
		h.add(d)
	}
	for _, p := range []float64{1, 50, 99, 100} {
		got, _ := h.quantile(p)
		exact := percentile(ds, p)
		if got < exact || float64(got) > float64(exact)*histGrowth {
			t.Errorf("p%v = %v, want within 2 %% above %v", p, got, exact)
		}
	}
	var m histogram
	m.merge(&h)
	m.merge(&h)
	if got, _ := m.quantile(50); m.n != 20000 || got != mustQ(&h, 50) {
		t.Errorf("merged: n=%d p50=%v", m.n, got)
	}
}

func mustQ(h *histogram, p float64) time.Duration { d, _ := h.quantile(p); return d }

func TestSoakPayload(t *testing.T) {
	t.Parallel()
	p := soakPayload{idx: 42, sent: 1500 * time.Millisecond, due: time.Date(2026, 12, 3, 15, 0, 0, 1, time.UTC).UnixNano()}
	got, err := parseSoakPayload(p.encode(), 100)
	if err != nil || got != p {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "1,2", "a,2,3", "1,2,3,4", "100,0,0", "-1,0,0"} {
		if _, err := parseSoakPayload([]byte(bad), 100); err == nil {
			t.Errorf("parseSoakPayload(%q) accepted it", bad)
		}
	}
}

func TestMemWindows(t *testing.T) {
	t.Parallel()
	var samples []memPoint
	for i := 1; i <= 60; i++ { // 10 minutes at 10 s
		samples = append(samples, memPoint{at: time.Duration(i) * 10 * time.Second, load: true, rssMB: float64(100 + i)})
	}
	samples = append(samples, memPoint{at: 610 * time.Second, rssMB: 1000}) // drain: ignored
	start, end := memWindows(samples, 3*time.Minute, 10*time.Minute, func(p memPoint) float64 { return p.rssMB })
	// Start: samples at 180–230 s (118–123, median 120.5); end: 550–600 s (155–160, median 157.5).
	if start != 120.5 || end != 157.5 {
		t.Errorf("windows %v, %v; want 120.5, 157.5", start, end)
	}
	if rss() == 0 {
		t.Error("rss() = 0")
	}
}

// TestStartCluster starts the soak's default cluster, three nats-server
// processes, and checks that they form a JetStream cluster that takes an
// R3 stream and that their RSS can be read. It needs a nats-server binary
// (go install github.com/nats-io/nats-server/v2@v2.15.2); without one the
// soak's default refuses to start, saying so.
func TestStartCluster(t *testing.T) {
	bin, err := findNATSServer()
	if err != nil {
		t.Skipf("no nats-server binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	servers, err := startCluster(ctx, bin, 3, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer stopAll(servers)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.url
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The meta leader is elected a moment after the servers accept
	// connections; a request before that gets no answer.
	testutil.Wait(t, time.Minute, "an R3 stream on the three servers", func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage})
		if err != nil {
			t.Logf("create the stream (retrying): %v", err)
		}
		return err == nil
	})
	if _, err := js.Publish(ctx, "r3.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := rssOf(servers); n < 1<<20 {
		t.Fatalf("the servers' RSS reads %d bytes", n)
	}
}

// TestStartServerOnTakenPort: a nats-server whose port another nats-server
// holds exits, and startServer says so (errExitedAtStart) instead of taking
// the other server for its own; withFreshPorts then starts again.
func TestStartServerOnTakenPort(t *testing.T) {
	bin, err := findNATSServer()
	if err != nil {
		t.Skipf("no nats-server binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	holder, err := startServer(ctx, bin, "holder", port)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.stop()
	taken := port
	s, err := startServer(ctx, bin, "taken", taken)
	if err == nil {
		s.stop()
		t.Fatal("started on a taken port")
	}
	if !errors.Is(err, errExitedAtStart) {
		t.Fatalf("error %v, want errExitedAtStart", err)
	}

	calls := 0
	s, err = withFreshPorts(func() (*standalone, error) {
		calls++
		port := taken
		if calls > 1 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		return startServer(ctx, bin, "fresh", port)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if calls != 2 {
		t.Errorf("%d starts, want 2", calls)
	}
}
