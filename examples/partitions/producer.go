package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Job is the payload of the plain type, immediate or delayed.
type Job struct {
	Run string `json:"run"`
	N   int    `json:"n"`
	Due int64  `json:"due,omitempty"` // a delayed task's due time, Unix nanoseconds
}

// Step is the payload of the ordered type: the seq-th task of its key.
type Step struct {
	Run string `json:"run"`
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// Tick is the payload of the schedule's task.
type Tick struct {
	Run string `json:"run"`
}

const (
	jobType     = "partitions.job"
	stepType    = "partitions.step"
	tickType    = "partitions.tick"
	minDelay    = 200 * time.Millisecond
	maxDelay    = 2 * time.Second
	maxBatch    = 500
	enqueueWait = 10 * time.Second // bound of one batch; a failed task is sent again with its ID
)

// item is one task of the plan.
type item struct {
	id    string
	kind  kind
	key   string
	n     int
	delay time.Duration // of a delayed task: its due time is set when it is sent
	spec  framework.TaskSpec
}

// specAt returns the item's task spec when sent at now.
func (it item) specAt(run string, now time.Time) framework.TaskSpec {
	if it.kind != delayed {
		return it.spec
	}
	due := now.Add(it.delay)
	return framework.TaskSpec{Type: jobType, Payload: Job{Run: run, N: it.n, Due: due.UnixNano()},
		Options: []framework.EnqueueOption{framework.WithID(it.id), framework.At(due)}}
}

// plan returns the run's tasks in enqueue order, shuffled: three tenths
// ordered, a fifth delayed by 200 ms to 2 s, the rest immediate. Ordered
// tasks go to the keys in turn, so each key's sequence numbers rise in
// plan order.
func plan(cfg config, run string) []item {
	rng := rand.New(rand.NewPCG(uint64(cfg.tasks), 33))
	nOrdered, nDelayed := cfg.tasks*3/10, cfg.tasks/5
	kinds := make([]kind, cfg.tasks)
	for i := range kinds {
		switch {
		case i < nOrdered:
			kinds[i] = ordered
		case i < nOrdered+nDelayed:
			kinds[i] = delayed
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	items := make([]item, cfg.tasks)
	o := 0
	for i, k := range kinds {
		it := item{kind: k}
		switch k {
		case ordered:
			it.key = fmt.Sprintf("%s-key-%03d", run, o%cfg.keys)
			seq := o / cfg.keys
			o++
			it.id = fmt.Sprintf("%s-o-%s-%d", run, it.key, seq)
			it.spec = framework.TaskSpec{Type: stepType, Payload: Step{Run: run, Key: it.key, Seq: seq},
				Options: []framework.EnqueueOption{framework.WithID(it.id), framework.Ordered(it.key)}}
		case delayed:
			it.id, it.n = fmt.Sprintf("%s-d-%d", run, i), i
			it.delay = minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay)))
		default:
			it.id = fmt.Sprintf("%s-i-%d", run, i)
			it.spec = framework.TaskSpec{Type: jobType, Payload: Job{Run: run, N: i},
				Options: []framework.EnqueueOption{framework.WithID(it.id)}}
		}
		items[i] = it
	}
	return items
}

// producer enqueues the plan at a rate, holding back the tasks after
// gateAt until gate is closed (the server was stopped), so that tasks are
// still being enqueued after the fault.
type producer struct {
	client *framework.Client
	run    string
	l      *ledger
	items  []item
	rate   int
	gateAt int
	gate   <-chan struct{}

	sent    atomic.Int64
	retried atomic.Int64 // tasks sent again after a failed enqueue
}

// loop runs until every task was stored or ctx ends.
func (p *producer) loop(ctx context.Context) error {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var backlog []item
	pos := 0
	for pos < len(p.items) || len(backlog) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		due := min(len(p.items), int(time.Since(start).Seconds()*float64(p.rate)))
		select {
		case <-p.gate:
		default:
			due = min(due, p.gateAt)
		}
		backlog = append(backlog, p.items[pos:max(pos, due)]...)
		pos = max(pos, due)
		var err error
		if backlog, err = p.send(ctx, backlog); err != nil {
			return err
		}
	}
	return nil
}

// send enqueues a batch from the backlog and returns what is left. A key
// has at most one task in a batch, and none after a task of it that is
// left: its tasks are stored one after another, in sequence.
func (p *producer) send(ctx context.Context, backlog []item) ([]item, error) {
	var batch []item
	var specs []framework.TaskSpec
	now := time.Now()
	inBatch := map[string]bool{}
	held := map[string]bool{}
	left := backlog[:0:0]
	for _, it := range backlog {
		if len(batch) == maxBatch || (it.key != "" && (inBatch[it.key] || held[it.key])) {
			if it.key != "" {
				held[it.key] = true
			}
			left = append(left, it)
			continue
		}
		if it.key != "" {
			inBatch[it.key] = true
		}
		batch = append(batch, it)
		specs = append(specs, it.specAt(p.run, now))
	}
	if len(batch) == 0 {
		return left, nil
	}
	bctx, cancel := context.WithTimeout(ctx, enqueueWait)
	infos, err := p.client.EnqueueMany(bctx, specs)
	cancel()
	var be *framework.BatchError
	if err != nil && !errors.As(err, &be) {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var failed []item
	for i, it := range batch {
		if be != nil && be.Errors[i] != nil {
			failed = append(failed, it)
			continue
		}
		p.l.enqueued(it.id, it.kind, infos[i].Stream)
		p.sent.Add(1)
	}
	if len(failed) == 0 {
		return left, nil
	}
	// A failed task goes first again, with its ID: if it was stored after
	// all, the stream drops the copy.
	p.retried.Add(int64(len(failed)))
	return append(failed, left...), nil
}
