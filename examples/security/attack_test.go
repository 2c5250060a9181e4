package main

// Issue 38, items 2 to 5: each attack performed as its role against the
// documented deployment. Reply-subject injection (item 1) is in
// reply_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// deadLetters waits until the dead-letter stream holds a record matching
// match, read by the operator, and returns it.
func deadLetters(t *testing.T, d *deployment, what string, match func(dlq.Record) bool) dlq.Record {
	t.Helper()
	oc := d.connect(t, testutil.SecuredOperator)
	ocl, err := framework.NewClient(oc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	q := dlq.New(ocl)
	var found dlq.Record
	testutil.Wait(t, time.Minute, what, func() bool {
		recs, _, err := q.List(t.Context(), dlq.Filter{}, dlq.Page{})
		if err != nil {
			return false
		}
		for _, r := range recs {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// delayedTask is a delayed task as a producer publishes it by hand: on
// the delay subject of id, for typ at due, with the Nats-Msg-Id msgID.
func delayedTask(n streams.Names, id, msgID, typ string, due time.Time, payload string) *nats.Msg {
	m := &nats.Msg{Subject: n.DelaySubject(id), Data: []byte(payload), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Header.Set(framework.HeaderTaskID, id)
	m.Header.Set("Jetflow-Scheduled-For", due.UTC().Format(time.RFC3339Nano))
	m.Header.Set("Jetflow-Schedule-Target", n.FiredSubject(framework.PriorityNormal, typ))
	return m
}

// TestDelayCannotReplaceAnothersSchedule (item 2): tenant B publishes a
// delayed task under tenant A's waiting delayed task's ID, with a fresh
// Nats-Msg-Id (as after the duplicate window), due earlier and with its
// own payload. The victim's schedule stays: the victim's task runs once,
// on time, with its payload, and the newcomer is dead-lettered with
// reason "conflict".
func TestDelayCannotReplaceAnothersSchedule(t *testing.T) {
	t.Parallel()
	const typ = "delay.victim"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	type run struct {
		at      time.Time
		payload string
	}
	ran := make(chan run, 4)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
			if task.ID == "victim-d" {
				ran <- run{time.Now(), string(task.Payload)}
			}
			return nil
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, pa := d.client(t, testutil.SecuredProducer)
	due := time.Now().Add(8 * time.Second)
	if _, err := pa.js.PublishMsg(ctx, delayedTask(d.names, "victim-d", "victim-d", typ, due, `"victim"`)); err != nil {
		t.Fatalf("victim's delayed task: %v", err)
	}
	sched := d.names.ScheduleSubject("victim-d")
	testutil.Wait(t, 30*time.Second, "the victim's schedule", func() bool {
		return len(d.stored(t, d.names.ScheduleStream(), sched)) > 0
	})
	_, pb := d.client(t, testutil.SecuredProducerB)
	if _, err := pb.js.PublishMsg(ctx, delayedTask(d.names, "victim-d", "evil-d", typ, time.Now().Add(time.Second), `"attacker"`)); err != nil {
		t.Fatalf("attacker's delayed task: %v", err)
	}
	rec := deadLetters(t, d, "the newcomer dead-lettered", func(r dlq.Record) bool { return r.TaskID == "victim-d" })
	if rec.Reason != "conflict" {
		t.Errorf("the newcomer was dead-lettered with reason %q, want conflict", rec.Reason)
	}
	r := testutil.Recv(t, ran, 30*time.Second, "the victim's task")
	if r.at.Before(due) || r.payload != `"victim"` {
		t.Errorf("the victim's task ran %v before its due time with payload %s", due.Sub(r.at), r.payload)
	}
	select {
	case again := <-ran:
		t.Errorf("the victim's ID ran twice, the second time with %s", again.payload)
	default:
	}
}

// TestForgedTaskIDIsDeadLettered (item 3): tenant B publishes an
// immediate task whose Jetflow-Id is tenant A's next task's ID, with a
// fresh Nats-Msg-Id. It does not run as the victim: it is dead-lettered
// with reason "invalid", and the victim's effects.Once step runs and
// returns its own value.
func TestForgedTaskIDIsDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "fx.victim"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	got := make(chan string, 4)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			v, err := effects.OnceValue(ctx, "charge", func(context.Context) (string, error) {
				return string(task.Payload), nil
			})
			got <- task.ID + " " + v
			return err
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, pb := d.client(t, testutil.SecuredProducerB)
	m := &nats.Msg{Subject: d.names.TaskSubject(framework.PriorityNormal, typ), Data: []byte(`"attacker"`), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "evil-e")
	m.Header.Set(framework.HeaderTaskID, "victim-e")
	if _, err := pb.js.PublishMsg(ctx, m); err == nil {
		rec := deadLetters(t, d, "the forged task dead-lettered", func(r dlq.Record) bool { return r.Type == typ })
		if rec.Reason != dlq.ReasonInvalid {
			t.Errorf("the forged task was dead-lettered with reason %q, want invalid", rec.Reason)
		}
	}
	cl, pa := d.client(t, testutil.SecuredProducer)
	if _, err := cl.Enqueue(ctx, typ, "victim", framework.WithID("victim-e")); err != nil {
		t.Fatalf("victim's enqueue: %v (violations %v)", err, violations(pa))
	}
	for {
		r := testutil.Recv(t, got, 30*time.Second, "the victim's task")
		if r == `victim-e "victim"` {
			break
		}
		t.Errorf("a task ran as %q", r)
	}
}

// TestForgedCronTickIsDeadLettered (item 3): a producer publishes tasks
// under the IDs the next ticks of a repeating schedule will carry
// ("cron-<name>-<time>"). None runs as a tick; the forgeries are
// dead-lettered with reason "invalid"; the ticks run.
func TestForgedCronTickIsDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "cron.victim"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	var mu sync.Mutex
	var forged []string
	ticks := make(chan string, 64)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
			if task.Header(framework.HeaderScheduler) == "" {
				mu.Lock()
				forged = append(forged, task.ID)
				mu.Unlock()
				return nil
			}
			select {
			case ticks <- task.ID:
			default:
			}
			return nil
		})
	})
	oc := d.connect(t, testutil.SecuredOperator)
	ocl, err := framework.NewClient(oc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := schedule.New(ocl).Register(ctx, schedule.Definition{Name: "tick", Spec: "@every 1s", Type: typ}); err != nil {
		t.Fatalf("register: %v (violations %v)", err, violations(oc))
	}
	first := testutil.Recv(t, ticks, 30*time.Second, "the first tick")
	if !strings.HasPrefix(first, "cron-tick-") {
		t.Logf("tick IDs look like %q now: the forgeries below predict the old form", first)
	}
	_, pa := d.client(t, testutil.SecuredProducer)
	now := time.Now().UTC().Truncate(time.Second)
	var ids []string
	for i := 2; i <= 5; i++ {
		id := "cron-tick-" + now.Add(time.Duration(i)*time.Second).Format("20060102T150405Z")
		ids = append(ids, id)
		m := &nats.Msg{Subject: d.names.TaskSubject(framework.PriorityNormal, typ), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set(framework.HeaderTaskID, id)
		if _, err := pa.js.PublishMsg(ctx, m); err != nil {
			t.Logf("forged tick %s refused at publish: %v", id, err)
			ids = ids[:len(ids)-1]
		}
	}
	// Dead-lettered under the ID the worker can vouch for (the forged one
	// or the task's sequence), so count them by type and reason.
	oc2 := d.connect(t, testutil.SecuredOperator)
	ocl2, err := framework.NewClient(oc2.Conn)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, time.Minute, fmt.Sprintf("%d forged ticks dead-lettered as invalid", len(ids)), func() bool {
		recs, _, err := dlq.New(ocl2).List(ctx, dlq.Filter{Reason: dlq.ReasonInvalid}, dlq.Page{})
		n := 0
		for _, r := range recs {
			if r.Type == typ {
				n++
			}
		}
		return err == nil && n == len(ids)
	})
	// The ticks go on after the forgeries.
	for range 3 {
		testutil.Recv(t, ticks, 30*time.Second, "a tick after the forgeries")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(forged) > 0 {
		t.Errorf("forged ticks ran: %v", forged)
	}
}

// TestTTLIsRefusedOnTaskSubjects (item 4): a producer's Nats-TTL on a
// task would make it vanish unrun while its ID still counted as a
// duplicate, so a producer could squat the IDs it predicts. The stream
// refuses it, and the victim's task with that ID is stored and runs.
func TestTTLIsRefusedOnTaskSubjects(t *testing.T) {
	t.Parallel()
	const typ = "ttl.victim"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	ran := make(chan string, 4)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
			ran <- task.ID
			return nil
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, pb := d.client(t, testutil.SecuredProducerB)
	m := &nats.Msg{Subject: d.names.TaskSubject(framework.PriorityNormal, "unserved.type"), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "victim-t")
	m.Header.Set(framework.HeaderTaskID, "victim-t")
	m.Header.Set(jetstream.MsgTTLHeader, "1s")
	var apiErr *jetstream.APIError
	if _, err := pb.js.PublishMsg(ctx, m); !errors.As(err, &apiErr) {
		t.Errorf("a task with Nats-TTL: %v, want refused by the stream", err)
	}
	cl, pa := d.client(t, testutil.SecuredProducer)
	info, err := cl.Enqueue(ctx, typ, nil, framework.WithID("victim-t"))
	if err != nil {
		t.Fatalf("victim's enqueue: %v (violations %v)", err, violations(pa))
	}
	if info.Duplicate {
		t.Error("the victim's task was taken as a duplicate of the squatter's")
	}
	if id := testutil.Recv(t, ran, 30*time.Second, "the victim's task"); id != "victim-t" {
		t.Errorf("ran %q", id)
	}
}

// TestFullTaskStreamEvictsNothing (item 4): with MaxTaskBytes set, tenant
// B floods the task stream. The stream refuses B's tasks once full; tenant
// A's waiting tasks all stay.
func TestFullTaskStreamEvictsNothing(t *testing.T) {
	t.Parallel()
	const typ = "waiting.victim"
	d := deploy(t, testutil.SecuredConfig{Streams: streams.Config{MaxTaskBytes: 64 << 10}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl, pa := d.client(t, testutil.SecuredProducer)
	for i := range 10 {
		if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID(fmt.Sprintf("waiting-%d", i))); err != nil {
			t.Fatalf("victim's enqueue: %v (violations %v)", err, violations(pa))
		}
	}
	flood, _ := d.client(t, testutil.SecuredProducerB)
	payload := make([]byte, 1024)
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		_, err := flood.Enqueue(ctx, "flood.type", payload, framework.WithID(fmt.Sprintf("flood-%d", i)))
		refused = err != nil
		if refused && !errors.Is(err, framework.ErrQueueFull) {
			t.Logf("the flood was refused with %v", err)
		}
	}
	if !refused {
		t.Fatal("the task stream took 200 KiB of flood with a 64 KiB limit")
	}
	if got := d.stored(t, d.names.TaskStream(), d.names.TaskSubject(framework.PriorityNormal, typ)); len(got) != 10 {
		t.Errorf("%d of tenant A's 10 waiting tasks left after the flood", len(got))
	}
}

// TestProducerReachesNoBucketOrStreamInfo (item 4): a producer's
// "Nats-Rollup: all" on a state key wiped the state bucket, and its
// STREAM.INFO of the delay stream listed the waiting delayed tasks' IDs.
// In its account neither subject exists: both are refused.
func TestProducerReachesNoBucketOrStreamInfo(t *testing.T) {
	t.Parallel()
	d := deploy(t, testutil.SecuredConfig{})
	pc := d.connect(t, testutil.SecuredProducer)
	for what, op := range map[string]func(context.Context) error{
		"roll up the state bucket": func(context.Context) error {
			return pc.PublishMsg(&nats.Msg{Subject: "$KV." + d.names.StateBucket() + ".x",
				Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}})
		},
		"read the delay stream's info": func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+d.names.DelayStream(), []byte(`{"subjects_filter":">"}`))
			return err
		},
		"read a delayed task": func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+d.names.DelayStream(), []byte(`{"seq":1}`))
			return err
		},
	} {
		if err := pc.denied(t.Context(), op); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("producer could %s: %v", what, err)
		}
	}
}

// TestWorkerStaysInItsLane (item 5): a worker may not pause another
// type's consumers by writing another dependency's breaker record, write
// the effects ledger of another type, or create or change the delay
// mover's shared consumer (which streams.Ensure created).
func TestWorkerStaysInItsLane(t *testing.T) {
	t.Parallel()
	const typ = "lane.work"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}, Dependencies: []string{"mail.smtp"}})
	wc := d.connect(t, testutil.SecuredWorker)
	record, _ := json.Marshal(map[string]any{"state": "open", "since": time.Now(), "until": time.Now().Add(time.Hour)})
	for what, op := range map[string]func(context.Context) error{
		"open another dependency's breaker": func(context.Context) error {
			return wc.Publish("$KV."+d.names.BreakerBucket()+".payments-gw", record)
		},
		"write another type's effects": func(context.Context) error {
			return wc.Publish("$KV."+d.names.EffectsBucket()+".other=2Etype.victim.charge", []byte(`{}`))
		},
		"change the mover's consumer": func(ctx context.Context) error {
			_, err := wc.js.CreateOrUpdateConsumer(ctx, d.names.DelayStream(), jetstream.ConsumerConfig{
				Durable: d.names.DelayConsumer(), AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: d.names.DelaySubject("nothing")})
			return err
		},
		"change the mover's consumer by hand": func(ctx context.Context) error {
			// The create subject without the filter, the filter in the body.
			req := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":%q,"ack_policy":"explicit","filter_subject":%q},"action":"update"}`,
				d.names.DelayStream(), d.names.DelayConsumer(), d.names.DelaySubject("nothing"))
			_, err := wc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+d.names.DelayStream()+"."+d.names.DelayConsumer(), []byte(req))
			return err
		},
		"publish a task": func(context.Context) error {
			return wc.Publish(d.names.TaskSubject(framework.PriorityNormal, typ), nil)
		},
	} {
		if err := wc.denied(t.Context(), op); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("worker could %s: %v", what, err)
		}
	}
	// Its own dependency's record and its own type's effects it may write.
	if err := wc.Publish("$KV."+d.names.BreakerBucket()+".mail.smtp", record); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if v := violations(wc); len(v) > 0 {
		t.Errorf("worker refused its own dependency's record: %v", v)
	}
	// And the shared consumer is as streams.Ensure made it.
	c, err := d.admin.Consumer(t.Context(), d.names.DelayStream(), d.names.DelayConsumer())
	if err != nil {
		t.Fatalf("the mover's consumer: %v", err)
	}
	if c.CachedInfo().Config.FilterSubject != "" {
		t.Errorf("the mover's consumer filters %q", c.CachedInfo().Config.FilterSubject)
	}
}

// TestLaneWorkerForgesNoOtherDeadLetter (item 5): a worker that runs
// neither the dead-letter router nor the delay mover (both dead-letter
// tasks of every type; keep them in a trusted worker) may write the dead
// letters of its own types only, so it cannot forge a record of another
// type for an operator to replay. Its own failures still reach the
// dead-letter stream without a permission violation.
func TestLaneWorkerForgesNoOtherDeadLetter(t *testing.T) {
	t.Parallel()
	const typ = "lane.fail"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}, WorkerFeatures: access.DeadLetters | access.Effects})
	wc := d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(context.Context, *framework.Task) error {
			return framework.Permanent(errors.New("refused"))
		})
	}, framework.WithDeadLetterRouter(false), framework.WithDelayMover(false))
	forged := &nats.Msg{Subject: d.names.DLQSubject("payments.charge"), Header: nats.Header{}}
	forged.Header.Set(framework.HeaderTaskID, "forged-1")
	if err := wc.denied(t.Context(), func(context.Context) error { return wc.PublishMsg(forged) }); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("a lane worker could write another type's dead letter: %v", err)
	}
	cl, pc := d.client(t, testutil.SecuredProducer)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID("fails-1")); err != nil {
		t.Fatalf("enqueue: %v (violations %v)", err, violations(pc))
	}
	deadLetters(t, d, "the lane worker's own dead letter", func(r dlq.Record) bool { return r.TaskID == "fails-1" })
	if v := violations(wc); len(v) > 0 {
		t.Errorf("the lane worker hit permission violations: %v", v)
	}
}
