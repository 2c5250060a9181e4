package exec

import "sync"

// Pool hands tasks to long-lived executor goroutines, so that a task does
// not pay for a new goroutine and its stack growth. A task is handed over
// on an unbuffered channel, so only to an executor that is idle; when none
// is, the task gets a goroutine of its own. Start and Stop are called once
// each; Run is safe for concurrent use at any time (before Start every
// task gets a goroutine of its own).
type Pool[P any] struct {
	ch   chan P
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	run  func(P)
}

// NewPool returns a pool whose executors call run for each task.
func NewPool[P any](run func(P)) *Pool[P] {
	return &Pool[P]{ch: make(chan P), stop: make(chan struct{}), run: run}
}

// Start starts n executors.
func (p *Pool[P]) Start(n int) {
	for range n {
		p.wg.Add(1)
		go p.executor()
	}
}

func (p *Pool[P]) executor() {
	defer p.wg.Done()
	for {
		select {
		case x := <-p.ch:
			p.run(x)
		case <-p.stop:
			return
		}
	}
}

// Run runs x on an idle executor, or on a goroutine of its own when every
// executor is busy.
func (p *Pool[P]) Run(x P) {
	select {
	case p.ch <- x:
	default:
		go p.run(x)
	}
}

// Stop stops the executors once they finish their current task and, when
// wait is true, waits for them. Without wait an executor still running a
// task exits when the task returns. Safe to call more than once.
func (p *Pool[P]) Stop(wait bool) {
	p.once.Do(func() { close(p.stop) })
	if wait {
		p.wg.Wait()
	}
}
