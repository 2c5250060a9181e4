package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// orderedEvent is the payload of the ordered fault tests, the same JSON as
// the test worker's OrderedEvent.
type orderedEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// orderedRecord is a start or end record of the test worker (its Record),
// or a "dead" marker the test adds once a worker process is gone.
type orderedRecord struct {
	Ev      string `json:"ev"`
	Key     string `json:"key"`
	N       int    `json:"n"`
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid"`
	ID      string `json:"id"`
}

// run is one execution of an ordered task.
type run struct {
	n, attempt, pid int
}

// orderLog checks the executions of ordered tasks as they start and end:
// no task of a key starts while another run of the key is open, a task
// starts only once every earlier task of its key succeeded, and a rerun
// (at-least-once) is only of the key's last succeeded task, before the next
// starts. Runs of a worker that died are closed by [orderLog.dead].
type orderLog struct {
	mu         sync.Mutex
	events     int              // tasks per key
	next       map[string]int   // next task expected to succeed, per key
	open       map[string][]run // runs in progress, per key
	starts     map[string][]run // every start, per key, in order
	violations []string
	reruns     int
	complete   int             // keys whose every task succeeded in order
	succeeded  map[string]bool // "key/n" of every task that succeeded, in order or not
	keys       int
	done       chan struct{} // closed once every task succeeded, in order or not
}

func newOrderLog(keys, events int) *orderLog {
	return &orderLog{events: events, keys: keys, next: map[string]int{}, open: map[string][]run{},
		starts: map[string][]run{}, succeeded: map[string]bool{}, done: make(chan struct{})}
}

func (o *orderLog) violate(format string, args ...any) {
	o.violations = append(o.violations, fmt.Sprintf(format, args...))
}

func (o *orderLog) start(key string, r run) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.starts[key] = append(o.starts[key], r)
	if len(o.open[key]) > 0 {
		o.violate("%s/%d (attempt %d, pid %d) started while %s/%d (pid %d) ran", key, r.n, r.attempt, r.pid, key, o.open[key][0].n, o.open[key][0].pid)
	}
	switch next := o.next[key]; {
	case r.n > next:
		o.violate("%s/%d started before %s/%d succeeded", key, r.n, key, next)
	case r.n < next-1:
		o.violate("%s/%d ran again after %s/%d succeeded", key, r.n, key, next-1)
	case r.n == next-1:
		o.reruns++
	}
	o.open[key] = append(o.open[key], r)
}

// end closes the run of key/n by pid; ok means the handler succeeded.
func (o *orderLog) end(key string, n, pid int, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	runs := o.open[key]
	for i, r := range runs {
		if r.n == n && r.pid == pid {
			o.open[key] = append(runs[:i:i], runs[i+1:]...)
			break
		}
	}
	if !ok {
		return
	}
	if id := fmt.Sprintf("%s/%d", key, n); !o.succeeded[id] {
		o.succeeded[id] = true
		if len(o.succeeded) == o.keys*o.events {
			close(o.done)
		}
	}
	if n != o.next[key] {
		return
	}
	o.next[key]++
	if o.next[key] == o.events {
		o.complete++
	}
}

// dead closes every open run of a worker that is gone.
func (o *orderLog) dead(pid int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, runs := range o.open {
		kept := runs[:0:0]
		for _, r := range runs {
			if r.pid != pid {
				kept = append(kept, r)
			}
		}
		o.open[key] = kept
	}
}

// startsOf returns every start of key so far, in order.
func (o *orderLog) startsOf(key string) []run {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]run(nil), o.starts[key]...)
}

func (o *orderLog) summary() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var behind []string
	for key, n := range o.next {
		if n < o.events && len(behind) < 5 {
			behind = append(behind, fmt.Sprintf("%s at %d", key, n))
		}
	}
	return fmt.Sprintf("tasks succeeded %d of %d, keys complete in order %d of %d (first behind: %v), reruns %d, violations %d",
		len(o.succeeded), o.keys*o.events, o.complete, o.keys, behind, o.reruns, len(o.violations))
}

// check waits for every task to succeed, then fails on violations.
func (o *orderLog) check(t *testing.T, timeout time.Duration, diags ...func() string) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-o.done:
	case <-timer.C:
		var d []string
		for _, f := range diags {
			d = append(d, f())
		}
		o.mu.Lock()
		v := o.violations[:min(5, len(o.violations))]
		o.mu.Unlock()
		t.Fatalf("ordered tasks not all done within %v: %s; first violations: %v\n%s", timeout, o.summary(), v, strings.Join(d, "\n"))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.violations) > 0 {
		t.Fatalf("%d ordering violations, first: %s", len(o.violations), strings.Join(o.violations[:min(5, len(o.violations))], "; "))
	}
	if o.complete != o.keys {
		t.Fatalf("%d of %d keys ran every task in order", o.complete, o.keys)
	}
}

// workerProc is a test worker process.
type workerProc struct {
	cmd    *exec.Cmd
	exited chan error
	stderr *syncBuffer
}

// TestOrderedKilledHeadRunsAgainFirst runs ordered tasks (several keys per
// partition, interleaved) in three worker processes, kills with SIGKILL the
// process holding a key's head task (its handler blocks in it), and checks
// that no two tasks of a key ever run at once, every key's tasks run in
// enqueue order, every task succeeds, and the killed head runs again, on
// another process after its ack wait, before the key's next task.
func TestOrderedKilledHeadRunsAgainFirst(t *testing.T) {
	t.Parallel()
	killOrderedHead(t, "-partitions", "fault.ordered", "jetflow.test.ordered")
}

// TestLaneKilledHeadRunsAgainFirst is TestOrderedKilledHeadRunsAgainFirst
// with lanes: the killed process owned the lane of the head, which moves
// to another process; that one runs nothing of the lane's keys before the
// head's ack wait brought the killed head back to it.
func TestLaneKilledHeadRunsAgainFirst(t *testing.T) {
	t.Parallel()
	killOrderedHead(t, "-lanes", "fault.laned", "jetflow.test.laned")
}

// killOrderedHead runs the ordered kill -9 test with 4 partitions or lanes
// (mode: the worker process's flag).
func killOrderedHead(t *testing.T, mode, typ, record string) {
	const (
		partitions = 4
		procs      = 3
		ackWait    = 2 * time.Second
	)
	keys, events := 12, 8
	if heavy() {
		keys, events = 100, 20
	}
	blockKey, blockN := "key-3", 2
	bin := buildTestWorker(t)
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ensure(t, js, 1)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}

	log := newOrderLog(keys, events)
	blocked := make(chan int, 1) // pid holding the block task
	var recMu sync.Mutex
	var badRecords []string
	sub, err := nc.Subscribe(record, func(m *nats.Msg) {
		var r orderedRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			recMu.Lock()
			badRecords = append(badRecords, string(m.Data))
			recMu.Unlock()
			return
		}
		switch r.Ev {
		case "start":
			log.start(r.Key, run{n: r.N, attempt: r.Attempt, pid: r.PID})
			if r.Key == blockKey && r.N == blockN && r.Attempt == 1 {
				select {
				case blocked <- r.PID:
				default:
				}
			}
		case "end":
			log.end(r.Key, r.N, r.PID, true)
		case "dead":
			log.dead(r.PID)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Interleaved: task n of every key, then n+1; every key's tasks queue
	// behind the block task's partition or another.
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			if _, err := cl.Enqueue(ctx, typ, orderedEvent{Key: key, N: n}, framework.Ordered(key),
				framework.WithID(fmt.Sprintf("%s-%d", key, n))); err != nil {
				t.Fatalf("enqueue %s/%d: %v", key, n, err)
			}
		}
	}

	workers := map[int]*workerProc{}
	for range procs {
		p := &workerProc{exited: make(chan error, 1), stderr: new(syncBuffer)}
		p.cmd = exec.Command(bin, "-url", srv.ClientURL(), "-type", typ, "-ack-wait", ackWait.String(),
			"-concurrency", "4", mode, fmt.Sprint(partitions), "-record", record,
			"-block", fmt.Sprintf("%s/%d", blockKey, blockN), "-hold", "1ms",
			"-registry-interval", "1s") // a dead worker's lanes move once its record expired
		p.cmd.Stderr = p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start worker process: %v", err)
		}
		go func() { p.exited <- p.cmd.Wait() }()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		})
		workers[p.cmd.Process.Pid] = p
	}
	stderrs := func() string {
		var b strings.Builder
		for pid, p := range workers {
			fmt.Fprintf(&b, "worker %d stderr:\n%s\n", pid, p.stderr.String())
		}
		return b.String()
	}

	var pid int
	select {
	case pid = <-blocked:
	case <-time.After(time.Minute):
		t.Fatalf("the block task %s/%d never started: %s\n%s", blockKey, blockN, log.summary(), stderrs())
	}
	victim, ok := workers[pid]
	if !ok {
		t.Fatalf("block task started by unknown pid %d", pid)
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	if err := testutil.Recv(t, victim.exited, 30*time.Second, "killed worker process exit"); err == nil {
		t.Fatal("worker process exited cleanly after SIGKILL")
	}
	victim.exited <- nil // for the cleanup
	startsBefore := len(log.startsOf(blockKey))
	// The dead process flushed its records before it died, so the server
	// routed them to the subscription before this marker.
	dead, _ := json.Marshal(orderedRecord{Ev: "dead", PID: pid})
	if err := nc.Publish(record, dead); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	states := partitionStates(js, typ, partitions)
	if mode == "-lanes" {
		states = laneStates(js, typ, partitions)
	}
	log.check(t, 2*time.Minute, stderrs, states)
	testutil.Wait(t, 30*time.Second, "task stream empty", func() bool { return taskStreamMsgs(t, js) == 0 })

	recMu.Lock()
	if len(badRecords) > 0 {
		t.Errorf("undecodable records: %q", badRecords)
	}
	recMu.Unlock()
	after := log.startsOf(blockKey)[startsBefore:]
	if len(after) == 0 {
		t.Fatalf("no task of %s started after the kill", blockKey)
	}
	if first := after[0]; first.n != blockN || first.pid == pid || first.attempt < 2 {
		t.Errorf("first task of %s after the kill: %d attempt %d on pid %d; want the killed head %d again, attempt ≥ 2, on another process than %d",
			blockKey, first.n, first.attempt, first.pid, blockN, pid)
	}
	t.Logf("ordered kill -9 (%s): keys=%d events=%d partitions=%d processes=%d: %s; killed head %s/%d reran as attempt %d",
		mode, keys, events, partitions, procs, log.summary(), blockKey, blockN, after[0].attempt)
}

// partitionStates describes the partition consumers of an ordered type for
// failure messages.
func partitionStates(js jetstream.JetStream, typ string, partitions int) func() string {
	return func() string {
		var s []string
		for p := range partitions {
			s = append(s, consumerState(js, streams.MustNames("").OrderedConsumerName(typ, partitions, p)))
		}
		return strings.Join(s, "\n")
	}
}

// laneStates describes the lane consumers of an ordered type for failure
// messages.
func laneStates(js jetstream.JetStream, typ string, lanes int) func() string {
	return func() string {
		var s []string
		for l := range lanes {
			s = append(s, consumerState(js, streams.MustNames("").LaneConsumerName(typ, lanes, l)))
		}
		return strings.Join(s, "\n")
	}
}

// TestOrderedServerRestartKeepsOrder restarts the server (same store) in
// the middle of ordered processing: half of every key's tasks are enqueued
// before, half after, and one key's head task is running in a worker
// across the restart (its acknowledgement goes to the restarted server, or
// is lost and the task runs again). Three workers on separate connections.
// Every key's tasks run one at a time in enqueue order and every task
// succeeds; the task stream ends empty.
func TestOrderedServerRestartKeepsOrder(t *testing.T) {
	t.Parallel()
	faultOrdered(t, "fault.ordered_restart", framework.Ordering{Partitions: 4}, orderedRestart(t))
}

// TestLanesServerRestartKeepsOrder is TestOrderedServerRestartKeepsOrder
// with 4 lanes: the lanes' pins and the owners' queues do not survive the
// restart, the order does.
func TestLanesServerRestartKeepsOrder(t *testing.T) {
	t.Parallel()
	faultOrdered(t, "fault.laned_restart", framework.Ordering{Lanes: 4}, orderedRestart(t))
}

// TestLanesLeaderChangesKeepOrder is the same test on a three-node cluster
// with an R3 topology, the workers on different nodes: while a key's head
// runs, every lane consumer's leader and then the task stream's leader
// step down to another node (as an operator's step-down or a rolling
// restart moves them). A new consumer leader may give a lane's pin to
// another worker, whose gate then waits for the former owner's tasks.
func TestLanesLeaderChangesKeepOrder(t *testing.T) {
	t.Parallel()
	const typ, lanes = "fault.laned_leaders", 4
	c := testutil.RunCluster(t, 3)
	names := streams.MustNames("")
	faultOrdered(t, typ, framework.Ordering{Lanes: lanes}, orderedFault{
		replicas: 3,
		connect: func(t *testing.T, i int) *nats.Conn {
			if i < 0 {
				return c.Connect(t)
			}
			return testutil.Connect(t, c.Server(i%c.Size()))
		},
		fault: func(t *testing.T) *nats.Conn {
			for l := range lanes {
				cons := names.LaneConsumerName(typ, lanes, l)
				old := c.ConsumerLeader(t, names.TaskStream(), cons)
				if err := c.Server(old).JetStreamStepdownConsumer(testutil.GlobalAccount, names.TaskStream(), cons); err != nil {
					t.Fatalf("step down the leader of %s: %v", cons, err)
				}
				t.Logf("%s: leader %d stepped down, now %d", cons, old, c.ConsumerLeader(t, names.TaskStream(), cons))
			}
			t.Logf("task stream leader now %d", c.StepDownStream(t, names.TaskStream()))
			return c.Connect(t)
		},
	})
}

// orderedFault is where faultOrdered runs and what it breaks.
type orderedFault struct {
	replicas int
	// connect returns worker i's connection, or with i = -1 the first
	// producer's.
	connect func(t *testing.T, i int) *nats.Conn
	// fault breaks the server or cluster while a key's head runs and
	// returns the connection the enqueues after it use.
	fault func(t *testing.T) *nats.Conn
}

// orderedRestart is the fault of one server restarted on its store.
func orderedRestart(t *testing.T) orderedFault {
	srv := testutil.RunServer(t, testutil.WithListen())
	return orderedFault{
		replicas: 1,
		connect:  func(t *testing.T, _ int) *nats.Conn { return testutil.Connect(t, srv) },
		fault: func(t *testing.T) *nats.Conn {
			began := time.Now()
			srv2 := testutil.RestartServer(t, srv)
			t.Logf("server restarted in %v", time.Since(began).Round(time.Millisecond))
			// A new connection, so that the enqueues after the restart
			// do not wait for the first one to reconnect.
			return testutil.Connect(t, srv2)
		},
	}
}

// faultOrdered runs the ordered fault test with ordering o and fault f.
func faultOrdered(t *testing.T, typ string, o framework.Ordering, f orderedFault) {
	partitions := max(o.Partitions, o.Lanes)
	keys, events := 20, 10
	if heavy() {
		keys, events = 200, 20
	}
	holdKey, holdN := "key-5", events/2-1
	nc := f.connect(t, -1)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, js, f.replicas)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	log := newOrderLog(keys, events)
	logs := newLogCounter()
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	for i := range 3 {
		w := newWorker(t, f.connect(t, i), framework.WithConcurrency(4), framework.WithLogger(slog.New(logs)))
		framework.Handle(w, typ, func(ctx context.Context, task *framework.Task, e orderedEvent) error {
			log.start(e.Key, run{n: e.N, attempt: task.Attempt, pid: i})
			if e.Key == holdKey && e.N == holdN && task.Attempt == 1 {
				once.Do(func() { close(held) })
				select {
				case <-release:
				case <-ctx.Done():
					log.end(e.Key, e.N, i, false)
					return ctx.Err()
				}
			}
			log.end(e.Key, e.N, i, true)
			return nil
		}, framework.WithOrdering(o), framework.WithAckWait(2*time.Second))
		start(t, w)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	enqueue := func(cl *framework.Client, from, to int) {
		t.Helper()
		for n := from; n < to; n++ {
			for k := range keys {
				key := fmt.Sprintf("key-%d", k)
				if _, err := cl.Enqueue(ctx, typ, orderedEvent{Key: key, N: n}, framework.Ordered(key),
					framework.WithID(fmt.Sprintf("%s-%d", key, n))); err != nil {
					t.Fatalf("enqueue %s/%d: %v", key, n, err)
				}
			}
		}
	}
	enqueue(cl, 0, events/2)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatalf("the held task %s/%d never started: %s", holdKey, holdN, log.summary())
	}
	nc2 := f.fault(t)
	close(release)
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	cl2, err := framework.NewClient(nc2)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(cl2, events/2, events)

	states := partitionStates(js2, typ, partitions)
	if o.Lanes > 0 {
		states = laneStates(js2, typ, partitions)
	}
	log.check(t, 2*time.Minute, states, logs.summary)
	testutil.Wait(t, 30*time.Second, "task stream empty", func() bool { return taskStreamMsgs(t, js2) == 0 })
	t.Logf("ordered fault (%+v): keys=%d events=%d workers=3: %s; worker logs: %s",
		o, keys, events, log.summary(), logs.summary())
}
