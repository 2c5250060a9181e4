package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// figLanes is the raw JetStream probe of decision 049's lanes: what
// ordered consumers cost the server, with jetflow left out.
const figLanes = "lanes_probe"

// A lanes probe mode: how ordered tasks reach their consumers.
type laneMode struct {
	name      string
	consumers int  // 0: one consumer of every subject (unordered)
	single    bool // one filter per consumer: the slot's bits are subject tokens
	pending   int  // MaxAckPending of each consumer
	fifo      bool // a pinned owner per consumer runs each key in order in memory
}

var laneModes = []laneMode{
	{"unordered", 0, false, 1000, false},
	{"serial16_multi", 16, false, 1, false},
	{"serial16_single", 16, true, 1, false},
	{"lanes16_multi", 16, false, 256, true},
	{"lanes16_single", 16, true, 256, true},
}

const (
	laneSlots = 256                  // ordered slots, as streamdefs.OrderedSlots
	laneTasks = 20000                // tasks per drain
	laneKeys  = 1000                 // keys, round robin
	lanePool  = 64                   // handlers running at once
	laneWork  = time.Millisecond     // each handler's wait
	laneTTL   = 10 * time.Second     // PinnedTTL of the lane consumers
	laneMax   = 5 * time.Minute      // bound on one drain
	laneBits  = 8                    // tokens of a slot in the single-filter subjects
	laneRoot  = "probe.lanes"        // subjects of the probe's stream
	laneName  = "JETFLOW_PROBE_LANE" // the probe's stream, deleted after each drain
)

// runLanes drains 20,000 tasks over 1,000 keys with 1 ms handlers (64 at
// once) through raw JetStream consumers, in each laneModes mode, -runs
// times, and prints the medians and each mode's ratio to the unordered
// drain of the same rounds:
//
//	RESULT lanes_probe unordered_per_s=… serial16_multi_per_s=… … lanes16_single_ratio=… runs=…
//
// serial modes are today's ordered partitions (one task of a partition at
// a time); lanes modes keep 256 tasks pending per consumer and run each
// key's tasks in order in process. "multi" consumers filter one subject
// per slot (today's subjects); "single" ones one wildcard, with the slot's
// bits as subject tokens, least significant first, so that lane l of 2^k
// filters the subjects whose first k bits are l.
func (e *env) runLanes(ctx context.Context, out io.Writer) error {
	rates := make(map[string][]float64)
	for r := 1; r <= e.cfg.runs; r++ {
		for _, m := range laneModes {
			rate, err := e.drainLanes(ctx, m)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			rates[m.name] = append(rates[m.name], rate)
			e.progress("lanes_probe run %d/%d: %-16s %8.0f/s", r, e.cfg.runs, m.name, rate)
		}
	}
	var pairs []kv
	for _, m := range laneModes {
		pairs = append(pairs, frate(m.name+"_per_s", median(rates[m.name])))
	}
	for _, m := range laneModes[1:] {
		ratios := make([]float64, e.cfg.runs)
		for i := range ratios {
			ratios[i] = rates[m.name][i] / rates["unordered"][i]
		}
		pairs = append(pairs, fratio(m.name+"_ratio", median(ratios)))
	}
	printResult(out, figLanes, append(pairs, fint("runs", e.cfg.runs))...)
	return nil
}

// laneSubject is the subject of a task of key k.
func laneSubject(m laneMode, k int) string {
	h := fnv.New32a()
	h.Write([]byte(strconv.Itoa(k)))
	slot := int(h.Sum32() % laneSlots)
	if m.single {
		return laneRoot + "." + slotBits(slot, laneBits) + "." + strconv.Itoa(k)
	}
	return laneRoot + "." + strconv.Itoa(slot) + "." + strconv.Itoa(k)
}

// slotBits returns the n low bits of slot as subject tokens, least
// significant first.
func slotBits(slot, n int) string {
	b := make([]string, n)
	for i := range b {
		b[i] = strconv.Itoa(slot >> i & 1)
	}
	return strings.Join(b, ".")
}

// laneFilters are the filters of consumer l of m.
func laneFilters(m laneMode, l int) []string {
	if m.single {
		k := 0
		for 1<<k < m.consumers {
			k++
		}
		return []string{laneRoot + "." + slotBits(l, k) + ".>"}
	}
	var f []string
	for s := l; s < laneSlots; s += m.consumers {
		f = append(f, laneRoot+"."+strconv.Itoa(s)+".>")
	}
	return f
}

// drainLanes times the drain of laneTasks tasks stored beforehand in m.
func (e *env) drainLanes(ctx context.Context, m laneMode) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, laneMax)
	defer cancel()
	nc, err := e.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: laneName, Subjects: []string{laneRoot + ".>"},
		Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), laneName) }()
	for i := range laneTasks {
		if _, err := js.PublishAsync(laneSubject(m, i%laneKeys), nil); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var cfgs []jetstream.ConsumerConfig
	if m.consumers == 0 {
		cfgs = append(cfgs, jetstream.ConsumerConfig{Durable: "all", FilterSubject: laneRoot + ".>"})
	}
	for l := range m.consumers {
		c := jetstream.ConsumerConfig{Durable: "lane" + strconv.Itoa(l), FilterSubjects: laneFilters(m, l)}
		if m.fifo {
			c.PriorityPolicy, c.PriorityGroups, c.PinnedTTL = jetstream.PriorityPolicyPinned, []string{"lane"}, laneTTL
		}
		cfgs = append(cfgs, c)
	}
	var opts []jetstream.PullConsumeOpt
	if m.fifo {
		opts = append(opts, jetstream.PullPriorityGroup("lane"))
	}
	d := newLaneDrain(laneTasks)
	tm := startTimer()
	for _, c := range cfgs {
		c.AckPolicy, c.MaxAckPending = jetstream.AckExplicitPolicy, m.pending
		cons, err := st.CreateConsumer(ctx, c)
		if err != nil {
			return 0, err
		}
		handle := d.start
		if m.fifo {
			handle = d.inOrder
		}
		cc, err := cons.Consume(handle, opts...)
		if err != nil {
			return 0, err
		}
		defer cc.Stop()
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("drain of %s: %w", m.name, ctx.Err())
	}
	return tm.result(laneTasks).rate, nil
}

// laneDrain runs the probe's handlers: at most lanePool at once, and with
// inOrder one task of a key at a time, the key's next task queued in
// memory until the one before it is acknowledged.
type laneDrain struct {
	slots   chan struct{}
	mu      sync.Mutex
	left    int
	done    chan struct{}
	running map[string][]jetstream.Msg // a running key's queued tasks
}

func newLaneDrain(n int) *laneDrain {
	return &laneDrain{slots: make(chan struct{}, lanePool), left: n, done: make(chan struct{}),
		running: make(map[string][]jetstream.Msg)}
}

// start runs m's handler in a slot.
func (d *laneDrain) start(m jetstream.Msg) { d.run("", m) }

// inOrder runs m now when no task of its key runs, else after them.
func (d *laneDrain) inOrder(m jetstream.Msg) {
	k := m.Subject()
	d.mu.Lock()
	if q, busy := d.running[k]; busy {
		d.running[k] = append(q, m)
		d.mu.Unlock()
		return
	}
	d.running[k] = nil
	d.mu.Unlock()
	d.run(k, m)
}

// run takes a slot and runs m's handler, then the next queued task of key
// k ("" for none).
func (d *laneDrain) run(k string, m jetstream.Msg) {
	d.slots <- struct{}{}
	go func() {
		time.Sleep(laneWork)
		_ = m.Ack()
		<-d.slots
		d.mu.Lock()
		if d.left--; d.left == 0 {
			close(d.done)
		}
		var next jetstream.Msg
		if k != "" {
			if q := d.running[k]; len(q) > 0 {
				next, d.running[k] = q[0], q[1:]
			} else {
				delete(d.running, k)
			}
		}
		d.mu.Unlock()
		if next != nil {
			d.run(k, next)
		}
	}()
}
