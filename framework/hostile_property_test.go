package framework_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// hostileHeader is one header a careless or hostile producer may set, with
// a generator of values.
type hostileHeader struct {
	key string
	val func(r *rand.Rand) string
}

func pick(vs ...string) func(*rand.Rand) string {
	return func(r *rand.Rand) string { return vs[r.IntN(len(vs))] }
}

func randToken(r *rand.Rand, n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-=:"

// hostileHeaders are the headers the property test draws from: every header
// nats.go or jetflow interprets on a stored task, and the server's
// publish-time "Nats-" headers, Nats-Rollup and the Nats-Schedule ones
// included (the task stream refuses rollups and has no schedules: decision
// 012). Left out, on purpose: a valid Nats-TTL (a producer may let its own
// task expire) and Nats-Batch-* (atomic batches need a commit protocol; a
// stray header is refused or ignored).
var hostileHeaders = []hostileHeader{
	{"Status", pick("100", "404", "408", "409", "503", "200", "xyz")},
	{"Description", pick("Consumer Deleted", "Leadership Change", "Idle Heartbeat", "No Messages",
		"Request Timeout", "Server Shutdown", "Batch Completed", "Message Size Exceeds MaxBytes")},
	{"Jetflow-Id", func(r *rand.Rand) string {
		switch r.IntN(4) {
		case 0:
			return strings.Repeat("i", 129+r.IntN(5000))
		case 1:
			return randToken(r, 1+r.IntN(20), "a b.*>\t")
		default:
			return randToken(r, 1+r.IntN(40), idAlphabet)
		}
	}},
	{"Nats-Msg-Id", func(r *rand.Rand) string {
		if r.IntN(3) == 0 {
			return strings.Repeat("m", 129+r.IntN(4000))
		}
		return "hostile-" + randToken(r, 16, idAlphabet)
	}},
	{"Jetflow-Encoding", pick("raw", "json", "gob", "", strings.Repeat("e", 3000))},
	{"Jetflow-Scheduled-For", func(r *rand.Rand) string {
		switch r.IntN(4) {
		case 0:
			return "next tuesday"
		case 1:
			return time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		case 2:
			return time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
		default:
			return time.Now().Add(time.Duration(r.IntN(500)) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		}
	}},
	{"Jetflow-Enqueued-At", pick("yesterday", "2026-01-01T00:00:00Z")},
	{"Jetflow-Schedule", func(r *rand.Rand) string { return randToken(r, 1+r.IntN(200), idAlphabet+". ") }},
	{"Nats-Rollup", pick("sub", "all", "bogus")},
	{"Nats-Schedule", pick("@at 2020-01-01T00:00:00Z", "@every 1s", "junk")},
	{"Nats-Schedule-Target", pick("jetflow.wf.x", "jetflow.task.normal.prop.plain", "jetflow.fired.normal.prop.plain")},
	{"Nats-Scheduler", pick("jetflow.cron.x", "junk")},
	{"Nats-Schedule-Next", pick("2026-01-01T00:00:00Z", "never")},
	{"Jetflow-Schedule-Spec", pick("@every 1s", "* * *", "")},
	{"Nats-Expected-Stream", pick("OTHER_STREAM")},
	{"Nats-Expected-Last-Sequence", func(r *rand.Rand) string { return strconv.Itoa(1 + r.IntN(1<<30)) }},
	{"Nats-Expected-Last-Subject-Sequence", func(r *rand.Rand) string { return strconv.Itoa(1 + r.IntN(1<<30)) }},
	{"Nats-Expected-Last-Msg-Id", pick("nope")},
	{"Nats-TTL", pick("abc", "-5s")},
	{"Nats-Stream", pick("JETFLOW_TASKS", "X")},
	{"Nats-Sequence", pick("1", "x", "99999999")},
	{"Nats-Subject", pick("jetflow.task.normal.x", "")},
	{"Nats-Time-Stamp", pick("yesterday")},
	{"Nats-Num-Pending", pick("-1")},
	{"Nats-Pending-Messages", pick("5")},
	{"Jetflow-Reason", pick("permanent")},
	{"Jetflow-Dead-Count", pick("-3", "x")},
	{"X-Big", func(r *rand.Rand) string { return strings.Repeat("b", 1000+r.IntN(62000)) }},
}

// The hostile-producer property: messages with random headers, bodies and
// subjects published straight to the task and delay subjects, interleaved with good
// tasks. Every good task runs once and is never dead-lettered; every
// hostile message ends in exactly one visible place (refused at publish, run
// by its handler, or dead-lettered with a reason); the workers keep
// consuming; nothing is left in the task stream. The seed is logged; set
// JETFLOW_HOSTILE_SEED to replay one.
func TestHostileProducerProperty(t *testing.T) {
	t.Parallel()
	hostileProperty(t, newEnv(t), 1)
}

// TestHostileProducerPropertyPartitioned is the property on a deployment
// of three task partitions: the hostile messages go to every partition's
// work subjects and staging targets, and to those of a partition the
// deployment does not have.
func TestHostileProducerPropertyPartitioned(t *testing.T) {
	t.Parallel()
	hostileProperty(t, newPartitionedEnv(t, 3), 3)
}

func hostileProperty(t *testing.T, e *env, partitions int) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("JETFLOW_HOSTILE_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const (
		plain   = "prop.plain"
		typed   = "prop.typed"
		good    = 120
		hostile = 120
	)
	// root returns the subject root of a random partition: "jetflow" or
	// "jetflow.p<k>", k sometimes one the deployment does not have.
	root := func() string {
		if partitions < 2 {
			return "jetflow"
		}
		if k := r.IntN(partitions + 1); k > 0 {
			return "jetflow.p" + strconv.Itoa(k)
		}
		return "jetflow"
	}
	var mu sync.Mutex
	ranGood := make(map[string]int)
	ranProbe := make(map[string]int)
	note := func(task *framework.Task) {
		mu.Lock()
		defer mu.Unlock()
		if p := task.Header("X-Probe"); p != "" {
			ranProbe[p]++
		} else {
			ranGood[task.ID]++
		}
	}
	// State tracking on: task IDs become KV keys.
	w := e.worker(t, framework.WithStateTracking(true))
	w.HandleFunc(plain, func(_ context.Context, task *framework.Task) error { note(task); return nil },
		framework.WithMaxAttempts(2), framework.WithPrefetch(4))
	framework.Handle(w, typed, func(_ context.Context, task *framework.Task, _ struct{ N int }) error {
		note(task)
		return nil
	}, framework.WithMaxAttempts(2), framework.WithPrefetch(4))
	startWorker(t, w)

	types := []string{plain, typed}
	prios := []framework.Priority{framework.PriorityCritical, framework.PriorityHigh, framework.PriorityNormal, framework.PriorityLow}
	var goodIDs []string
	stored := make(map[string]bool) // probes the stream accepted
	refused := 0
	for i := range good + hostile {
		if i%2 == 0 && len(goodIDs) < good {
			info := e.enqueue(t, types[r.IntN(2)], map[string]int{"N": i}, framework.WithPriority(prios[r.IntN(4)]))
			goodIDs = append(goodIDs, info.ID)
			continue
		}
		probe := fmt.Sprintf("p%d", i)
		h := nats.Header{}
		h.Set("X-Probe", probe)
		for range 1 + r.IntN(4) {
			hh := hostileHeaders[r.IntN(len(hostileHeaders))]
			h.Set(hh.key, hh.val(r))
		}
		var body []byte
		switch r.IntN(4) {
		case 0:
		case 1:
			body = []byte(`{"N":1}`)
		case 2:
			body = []byte(randToken(r, r.IntN(100), "{}[]\":,abc\x00\xff"))
		default:
			body = []byte("null")
		}
		subject := root() + ".task." + prios[r.IntN(4)].String() + "." + types[r.IntN(2)]
		switch r.IntN(8) {
		case 0:
			subject = "jetflow.task.urgent." + plain // no such priority
		case 1, 2:
			// A delayed task, as a producer publishes it, with a target
			// and due time that may or may not be valid: the workers'
			// delay mover schedules it or dead-letters it.
			subject = "jetflow.delay." + probe
			switch r.IntN(3) {
			case 0, 1:
				h.Set("Jetflow-Schedule-Target", root()+".fired."+prios[r.IntN(4)].String()+"."+types[r.IntN(2)])
			default:
				h.Set("Jetflow-Schedule-Target", pick("jetflow.task.normal."+plain, "jetflow.fired.urgent."+plain,
					"jetflow.wf.run-1", "jetflow.fired.normal.UPPER", "")(r))
			}
			if r.IntN(4) != 0 {
				h.Set("Jetflow-Scheduled-For", time.Now().Add(time.Duration(r.IntN(300))*time.Millisecond).UTC().Format(time.RFC3339Nano))
			} else {
				h.Set("Jetflow-Scheduled-For", pick("tomorrow", "", "2026-13-01T00:00:00Z")(r))
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: body})
		cancel()
		if err != nil || ack.Duplicate {
			refused++
			continue
		}
		stored[probe] = true
	}
	t.Logf("%d good tasks, %d hostile messages: %d stored, %d refused at publish", len(goodIDs), hostile, len(stored), refused)

	deadProbes := func() map[string][]dlq.Record {
		out := make(map[string][]dlq.Record)
		for _, d := range e.deadLetters(t) {
			p := d.Headers.Get("X-Probe")
			out[p] = append(out[p], d)
		}
		return out
	}
	testutil.Wait(t, waitLong, "every task ended", func() bool {
		dead := deadProbes()
		mu.Lock()
		defer mu.Unlock()
		if len(ranGood) < len(goodIDs) {
			return false
		}
		for p := range stored {
			if ranProbe[p] == 0 && len(dead[p]) == 0 {
				return false
			}
		}
		return true
	})
	for _, typ := range types {
		for _, p := range prios {
			e.waitSettled(t, typ, p)
		}
	}
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
	dead := deadProbes()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range goodIDs {
		if ranGood[id] != 1 {
			t.Errorf("good task %s ran %d times, want 1", id, ranGood[id])
		}
	}
	if d := dead[""]; len(d) > 0 {
		t.Errorf("%d good tasks dead-lettered, first: %s %q", len(d), d[0].Reason, d[0].LastError)
	}
	for p := range stored {
		n := ranProbe[p] + len(dead[p])
		if n != 1 {
			t.Errorf("hostile message %s ended %d times (ran %d, dead letters %d), want exactly once", p, n, ranProbe[p], len(dead[p]))
		}
		for _, d := range dead[p] {
			if d.Reason == "" || (d.Reason != dlq.ReasonMaxDeliveries && d.LastError == "") {
				t.Errorf("dead letter of %s without a reason: %+v", p, d)
			}
		}
	}
}
