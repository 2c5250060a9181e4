package exec

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An idle executor takes a task; with every executor busy the task still
// runs, on a goroutine of its own, without waiting for one.
func TestPoolRunsOnIdleExecutorsThenOwnGoroutines(t *testing.T) {
	release := make(chan struct{})
	started := make(chan int, 3)
	var mu sync.Mutex
	ids := map[int]bool{}
	p := NewPool(func(x int) {
		mu.Lock()
		ids[x] = true
		mu.Unlock()
		started <- x
		<-release
	})
	p.Start(1)
	// The single executor may not be receiving yet: hand it a task until
	// one reaches it (a task that finds it not ready runs on its own
	// goroutine, which is fine here: both block on release).
	p.Run(1)
	p.Run(2)
	p.Run(3)
	for range 3 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("a task was not started while the executor was busy")
		}
	}
	close(release)
	p.Stop(true)
	if len(ids) != 3 {
		t.Fatalf("ran %v, want 1, 2 and 3", ids)
	}
}

// Stop(true) waits for an executor that is running a task; Stop(false)
// does not, and the executor exits once its task returns.
func TestPoolStopWaitsForRunningExecutors(t *testing.T) {
	release := make(chan struct{})
	running := make(chan struct{})
	p := NewPool(func(struct{}) {
		close(running)
		<-release
	})
	p.Start(1)
	// Hand the task over only to the executor: retry until it takes it.
	for handed := false; !handed; {
		select {
		case p.ch <- struct{}{}:
			handed = true
		case <-time.After(time.Millisecond):
		}
	}
	<-running
	p.Stop(false) // returns although the executor runs
	stopped := make(chan struct{})
	go func() { p.Stop(true); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop(true) returned while an executor ran a task")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop(true) did not return once the task did")
	}
}

// A parked task's due call runs once its time is up, and leaves the
// parking.
func TestParkingCallsDue(t *testing.T) {
	var k Parking[int]
	due := make(chan int, 1)
	if !k.Park(7, time.Millisecond, func(x int) { due <- x }) {
		t.Fatal("Park refused before Stop")
	}
	select {
	case x := <-due:
		if x != 7 {
			t.Fatalf("due(%d), want due(7)", x)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("due was not called")
	}
	if n := k.Len(); n != 0 {
		t.Fatalf("%d parked after the due call, want 0", n)
	}
}

// Stop reports every parked task, with its timer stopped, so that the
// caller resumes it; its due call never runs, and nothing is parked after
// Stop.
func TestParkingStopReportsParkedTasks(t *testing.T) {
	var k Parking[int]
	fired := make(chan int, 2)
	for _, x := range []int{1, 2} {
		if !k.Park(x, time.Hour, func(x int) { fired <- x }) {
			t.Fatal("Park refused before Stop")
		}
	}
	got := map[int]bool{}
	k.Stop(func(x int, stopped bool) {
		if !stopped {
			t.Errorf("task %d: timer not stopped", x)
		}
		got[x] = true
	})
	if !got[1] || !got[2] || len(got) != 2 {
		t.Fatalf("Stop reported %v, want 1 and 2", got)
	}
	if k.Park(3, time.Millisecond, func(x int) { fired <- x }) {
		t.Fatal("Park accepted a task after Stop")
	}
	if k.Len() != 0 {
		t.Fatalf("%d parked after Stop, want 0", k.Len())
	}
	select {
	case x := <-fired:
		t.Fatalf("due(%d) ran after Stop", x)
	default:
	}
}
