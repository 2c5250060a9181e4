package heartbeat

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// task is a held task whose heartbeats are counted.
type task struct {
	every   time.Duration
	last    atomic.Int64
	settled atomic.Bool
	fail    bool
	beats   atomic.Int32
	sent    chan struct{} // one value per heartbeat sent, if not full
}

func (t *task) Clock() (time.Duration, int64, bool) { return t.every, t.last.Load(), t.settled.Load() }
func (t *task) Beaten(stamp int64)                  { t.last.Store(stamp) }
func (t *task) InProgress() error {
	t.beats.Add(1)
	select {
	case t.sent <- struct{}{}:
	default:
	}
	if t.fail {
		return errors.New("no connection")
	}
	return nil
}

func TestTick(t *testing.T) {
	for _, c := range []struct {
		hbs  []time.Duration
		want time.Duration
	}{
		{nil, time.Second},
		{[]time.Duration{time.Minute, 8 * time.Second}, time.Second},
		{[]time.Duration{time.Millisecond}, 5 * time.Millisecond},
		{[]time.Duration{400 * time.Millisecond, time.Second}, 100 * time.Millisecond},
	} {
		if got := Tick(c.hbs...); got != c.want {
			t.Errorf("Tick(%v) = %v, want %v", c.hbs, got, c.want)
		}
	}
}

// A held task gets heartbeats while it is due and unsettled; a settled one
// none; a failed heartbeat is reported and not stamped.
func TestSweeperBeatsHeldTasks(t *testing.T) {
	now := time.Now().UnixNano()
	due := &task{every: 20 * time.Millisecond, sent: make(chan struct{}, 8)}
	due.last.Store(now)
	settled := &task{every: 20 * time.Millisecond}
	settled.settled.Store(true)
	failing := &task{every: 20 * time.Millisecond, fail: true, sent: make(chan struct{}, 8)}
	failing.last.Store(now)
	held := []*task{due, settled, failing}

	var mu sync.Mutex
	var failed []*task
	var s Sweeper[*task]
	s.Start(5*time.Millisecond, func(fn func(*task)) {
		for _, p := range held {
			fn(p)
		}
	}, func(p *task, err error) {
		mu.Lock()
		failed = append(failed, p)
		mu.Unlock()
	})
	for _, w := range []struct {
		p *task
		n int
	}{{due, 3}, {failing, 2}} {
		for range w.n {
			select {
			case <-w.p.sent:
			case <-time.After(10 * time.Second):
				t.Fatalf("beats: due %d, failing %d", due.beats.Load(), failing.beats.Load())
			}
		}
	}
	s.Stop()
	s.Stop() // twice is fine
	if settled.beats.Load() != 0 {
		t.Errorf("a settled task got %d heartbeats", settled.beats.Load())
	}
	if failing.last.Load() != now {
		t.Error("a failed heartbeat was stamped")
	}
	if due.last.Load() == now {
		t.Error("a sent heartbeat was not stamped")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) < 1 || failed[0] != failing {
		t.Errorf("failed reports: %v", failed)
	}
}

func TestStopWithoutStart(t *testing.T) {
	var s Sweeper[*task]
	s.Stop()
}
