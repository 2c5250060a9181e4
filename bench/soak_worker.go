package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
)

// startWorkers starts -soak-workers workers, each on its own connection
// (spread over the nodes), serving both soak types at every priority.
func (s *soakRun) startWorkers(ctx context.Context) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for _, st := range stops {
			errs = append(errs, st())
		}
		return errors.Join(errs...)
	}
	hooks := framework.Hooks{
		Event: func(_ context.Context, ev any) {
			if c, ok := ev.(breaker.StateChange); ok && c.To == breaker.StateOpen {
				s.opens.Add(1)
			}
		},
	}
	for i := range s.cfg.soakWorkers {
		nc, err := s.connectNode(i + 1)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		w, err := framework.NewWorker(nc, framework.WithConcurrency(s.cfg.concurrency), framework.WithHooks(hooks))
		if err == nil {
			_, err = breaker.Install(w, breaker.WithSettings(soakDep, breaker.Settings{OpenTimeout: s.cfg.soakOpen}))
		}
		if err != nil {
			nc.Close()
			return nil, errors.Join(err, stop())
		}
		w.HandleFunc(soakTypeTask, s.handleTask)
		w.HandleFunc(soakTypeDep, s.handleDep, breaker.WithDependencies(soakDep))
		stops = append(stops, func() error {
			defer nc.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := w.Shutdown(sctx); err != nil && !errors.Is(err, framework.ErrWorkerClosed) {
				return fmt.Errorf("bench: worker shutdown: %w", err)
			}
			return nil
		})
		if err := w.Start(ctx); err != nil {
			return nil, errors.Join(err, stop())
		}
	}
	return stop, nil
}

// soakPayload is what a soak task carries, as "idx,sent,due": its index;
// when it was sent, an offset from the start of the load in nanoseconds
// (the monotonic clock: latencies of immediate tasks); and when it is due,
// in Unix nanoseconds, 0 for immediate tasks. The due time is on the wall
// clock, as the server's schedules and the worker's hold are: a wall clock
// that the system slews against the monotonic one (this machine's ran 5 ms
// per second ahead) would otherwise make a 60 s delay look 300 ms early.
type soakPayload struct {
	idx  uint64
	sent time.Duration
	due  int64
}

func (p soakPayload) encode() []byte {
	b := strconv.AppendUint(nil, p.idx, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(p.sent), 10)
	b = append(b, ',')
	return strconv.AppendInt(b, p.due, 10)
}

func parseSoakPayload(b []byte, capacity uint64) (soakPayload, error) {
	f := strings.Split(string(b), ",")
	if len(f) != 3 {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: want idx,sent,due", b)
	}
	idx, err1 := strconv.ParseUint(f[0], 10, 64)
	sent, err2 := strconv.ParseInt(f[1], 10, 64)
	due, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: %w", b, err)
	}
	if idx >= capacity {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: index out of range", b)
	}
	return soakPayload{idx: idx, sent: time.Duration(sent), due: due}, nil
}

var (
	errFailOnce = errors.New("bench: soak task fails its first attempt")
	errPoison   = errors.New("bench: soak poison task")
	errDepDown  = errors.New("bench: soak dependency down")
)

// handleTask runs every kind but the dependency calls.
func (s *soakRun) handleTask(_ context.Context, t *framework.Task) error {
	now := time.Since(s.t0)
	p, err := parseSoakPayload(t.Payload, s.capacity)
	if err != nil {
		s.badTasks.Add(1)
		return framework.Permanent(err)
	}
	d := drawTask(p.idx, s.cfg.soakMaxDelay)
	if t.Attempt == 1 {
		s.mu.Lock()
		if p.due > 0 {
			late := time.Duration(time.Now().UnixNano() - p.due)
			if late < 0 {
				s.early.Add(1)
			}
			s.cur.delay.add(late)
		} else {
			s.cur.start[priorityIndex(t.Priority)].add(now - p.sent)
			s.cur.all.add(now - p.sent)
		}
		s.mu.Unlock()
	}
	switch d.kind {
	case kindPoison:
		s.finish(p.idx, true)
		return framework.Permanent(errPoison)
	case kindFailOnce:
		if t.Attempt == 1 {
			return errFailOnce
		}
	}
	s.finish(p.idx, false)
	return nil
}

// handleDep calls the dependency through its breaker: while it is down the
// calls fail, the breaker opens, and the tasks are held until it closes.
func (s *soakRun) handleDep(ctx context.Context, t *framework.Task) error {
	p, err := parseSoakPayload(t.Payload, s.capacity)
	if err != nil {
		s.badTasks.Add(1)
		return framework.Permanent(err)
	}
	if err := breaker.Call(ctx, soakDep, func(context.Context) error {
		if s.depDown.Load() {
			return errDepDown
		}
		return nil
	}); err != nil {
		return err
	}
	now := time.Since(s.t0)
	s.mu.Lock()
	s.cur.dep.add(now - p.sent)
	s.mu.Unlock()
	s.finish(p.idx, false)
	return nil
}

// finish records that task idx ended: succeeded, or (poison) failed for
// good.
func (s *soakRun) finish(idx uint64, poison bool) {
	if s.done.set(idx) {
		s.dups.Add(1)
		return
	}
	if poison {
		s.poisonRan.Add(1)
	} else {
		s.succeeded.Add(1)
	}
}
