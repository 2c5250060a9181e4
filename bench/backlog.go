package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Task types of the backlog figure.
const (
	typeBacklog    = "bench.backlog"    // the 1,000,000-task backlog
	typeBacklogRef = "bench.backlogref" // the 100,000-task reference drain
)

// figureBacklog (-big) measures the cost of a large backlog on the
// standalone server over TCP: a separate process enqueues cfg.bigN tasks in
// one EnqueueSeq call (its peak RSS is reported), then a worker drains them;
// the drain rate is compared with the drain of cfg.bigRefN tasks measured in
// the same round.
//
//	RESULT backlog_1m tasks=1000000 enqueue_per_s=… enqueue_peak_rss_mb=… drain_per_s=… drain_ratio_to_100k=…
func (e *env) figureBacklog(ctx context.Context, out io.Writer) error {
	t, err := e.tcpEnv(ctx)
	if err != nil {
		return err
	}
	var enq, rss, drain, ref, ratios []float64
	for r := 1; r <= e.cfg.runs; r++ {
		if err := t.enqueueJobs(ctx, typeBacklogRef, e.cfg.bigRefN, t.payload); err != nil {
			return err
		}
		refRes, err := t.drainJetflowTimed(ctx, typeBacklogRef, e.cfg.bigRefN)
		if err != nil {
			return fmt.Errorf("reference drain run %d: %w", r, err)
		}
		rate, peak, err := t.enqueueInChild(ctx, typeBacklog, e.cfg.bigN)
		if err != nil {
			return fmt.Errorf("enqueue run %d: %w", r, err)
		}
		bigRes, err := t.drainJetflowTimed(ctx, typeBacklog, e.cfg.bigN)
		if err != nil {
			return fmt.Errorf("drain run %d: %w", r, err)
		}
		mb := float64(peak) / (1 << 20)
		e.progress("%s run %d/%d: enqueue %8.0f/s, peak RSS %.0f MB; drain %8.0f/s, %d-task drain %8.0f/s, ratio %.3f",
			figBacklog, r, e.cfg.runs, rate, mb, bigRes.rate, e.cfg.bigRefN, refRes.rate, bigRes.rate/refRes.rate)
		enq, rss, drain, ref = append(enq, rate), append(rss, mb), append(drain, bigRes.rate), append(ref, refRes.rate)
		ratios = append(ratios, bigRes.rate/refRes.rate)
	}
	printResult(out, figBacklog, fint("tasks", e.cfg.bigN), frate("enqueue_per_s", median(enq)),
		frate("enqueue_peak_rss_mb", median(rss)), frate("drain_per_s", median(drain)),
		fratio("drain_ratio_to_100k", median(ratios)), frate("ref_drain_per_s", median(ref)),
		fint("ref_tasks", e.cfg.bigRefN), fint("runs", e.cfg.runs))
	return nil
}

// enqueueInChild runs this program again as a child that enqueues n tasks
// of taskType to e.url with one EnqueueSeq call, and returns the child's
// enqueue rate and peak RSS in bytes.
func (e *env) enqueueInChild(ctx context.Context, taskType string, n int) (float64, int64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: own executable: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, "-enqueue-child", e.url, "-child-type", taskType,
		"-n", strconv.Itoa(n), "-window", strconv.Itoa(e.cfg.window))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, e.stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("bench: enqueue child: %w", err)
	}
	peak, ok := peakRSS(cmd.ProcessState)
	if !ok {
		return 0, 0, fmt.Errorf("bench: peak RSS of a child is not measured on this platform")
	}
	var rate float64
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), "ENQUEUED_PER_S "); found {
			rate, err = strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("bench: enqueue child printed %q", sc.Text())
			}
		}
	}
	if rate == 0 {
		return 0, 0, fmt.Errorf("bench: enqueue child printed no rate: %q", stdout.String())
	}
	return rate, peak, nil
}

// runEnqueueChild is the child side of enqueueInChild: enqueue n jobs in one
// EnqueueSeq call with jetflow's defaults (and -window), print the rate.
// Nothing else runs in this process, so its peak RSS is the enqueue's.
func runEnqueueChild(ctx context.Context, cfg config, stdout io.Writer) error {
	e := &env{cfg: cfg, url: cfg.enqueueChild}
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithMaxPending(cfg.window))
	if err != nil {
		return err
	}
	pad := max(cfg.payloadSize-len(`{"pad":""}`), 0)
	var payload any = json.RawMessage(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	// EnqueueSeq, the API for batches too large to hold: jobs are made as
	// they are published and results reported as they are settled, so the
	// process holds a window of them, not n.
	jobs := func(yield func(framework.TaskSpec) bool) {
		for range cfg.n {
			if !yield(framework.TaskSpec{Type: cfg.childType, Payload: payload}) {
				return
			}
		}
	}
	start := time.Now()
	var first error
	failed := cl.EnqueueSeq(ctx, jobs, func(_ int, _ framework.TaskInfo, err error) {
		if err != nil && first == nil {
			first = err
		}
	})
	if failed > 0 {
		return fmt.Errorf("bench: %d of %d enqueues failed, first: %w", failed, cfg.n, first)
	}
	fmt.Fprintf(stdout, "ENQUEUED_PER_S %.0f\n", float64(cfg.n)/time.Since(start).Seconds())
	return nil
}
