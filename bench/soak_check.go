package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
)

// memPoint is what the end of the run needs of a sample.
type memPoint struct {
	at         time.Duration
	load       bool
	rssMB      float64
	serversMB  float64 // the nats-server processes' RSS, 0 when in process or unknown
	liveMB     float64
	goroutines int
}

// memWindows returns the median of val over the load samples in the minute
// after the warm-up and over those in the load's last minute (each window
// at most half of what follows the warm-up, and at least one sample).
func memWindows(samples []memPoint, warmup, loadEnd time.Duration, val func(memPoint) float64) (start, end float64) {
	window := min(time.Minute, (loadEnd-warmup)/2)
	var a, b []float64
	for _, smp := range samples {
		if !smp.load {
			continue
		}
		if smp.at >= warmup && smp.at < warmup+window {
			a = append(a, val(smp))
		}
		if smp.at > loadEnd-window {
			b = append(b, val(smp))
		}
	}
	if len(a) == 0 || len(b) == 0 {
		// Too short for windows: the first and last load samples.
		var load []float64
		for _, smp := range samples {
			if smp.load {
				load = append(load, val(smp))
			}
		}
		if len(load) == 0 {
			return 0, 0
		}
		return load[0], load[len(load)-1]
	}
	return median(a), median(b)
}

// soakVerdict is the end-of-run accounting.
type soakVerdict struct {
	lost           int      // confirmed non-poison tasks that never succeeded, plus poison ones never dead-lettered
	missing        []string // the first few lost tasks, for the report
	dead           int      // dead letters of the soak's types
	deadUnexpected int      // dead letters of tasks that were not poison
	poison         int      // poison tasks sent and confirmed
	pending        int      // tasks not yet ended
}

func (v soakVerdict) complete() bool { return v.pending == 0 && v.dead-v.deadUnexpected >= v.poison }

// check counts, over the first sent tasks, those that have not ended and
// the dead letters, read back from the dead-letter stream.
func (s *soakRun) check(ctx context.Context, sent uint64) (soakVerdict, error) {
	var v soakVerdict
	for i := range sent {
		if !s.confirmed.has(i) {
			continue // never stored (the enqueue gave up): not a task of the run
		}
		k := drawTask(i, s.cfg.soakMaxDelay).kind
		if k == kindPoison {
			v.poison++
		}
		if !s.done.has(i) {
			v.pending++
			if len(v.missing) < 10 {
				v.missing = append(v.missing, fmt.Sprintf("%s-%d (%s)", s.runID, i, k))
			}
		}
	}
	if v.pending > 0 {
		// Not finished yet: the dead letters are read once every task ended.
		v.lost = v.pending
		return v, nil
	}
	dead, unexpected, err := s.deadLetters(ctx)
	if err != nil {
		return v, err
	}
	v.dead, v.deadUnexpected = dead, unexpected
	v.lost = v.pending + max(v.poison-(dead-unexpected), 0)
	return v, nil
}

// deadLetters reads the dead-letter records of the soak's types, one by
// one with "next message on subject" gets (no consumer to set up), and
// returns their number and how many are not poison tasks of this run.
func (s *soakRun) deadLetters(ctx context.Context) (total, unexpected int, err error) {
	dlq, err := s.e.js.Stream(ctx, s.names.DLQStream())
	if err != nil {
		return 0, 0, fmt.Errorf("bench: dead-letter stream: %w", err)
	}
	prefix := s.runID + "-"
	for _, subject := range []string{s.names.DLQSubject(soakTypeTask), s.names.DLQSubject(soakTypeDep)} {
		for seq := uint64(1); ; {
			msg, err := dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return 0, 0, fmt.Errorf("bench: read dead letters: %w", err)
			}
			total++
			id := msg.Header.Get(framework.HeaderTaskID)
			idx, err := strconv.ParseUint(strings.TrimPrefix(id, prefix), 10, 64)
			if !strings.HasPrefix(id, prefix) || err != nil || idx >= s.capacity || drawTask(idx, s.cfg.soakMaxDelay).kind != kindPoison {
				unexpected++
			}
			seq = msg.Sequence + 1
		}
	}
	return total, unexpected, nil
}

// writeHeapProfile writes the in-use heap, after a garbage collection, to
// path (go tool pprof -sample_index=inuse_space).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	return nil
}
