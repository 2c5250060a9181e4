package main

// Issue 38, item 1: reply-subject injection. Subject permissions do not
// apply to the server's own replies: in a single account, a producer's
// permitted publish whose reply subject is a schedule, KV, dead-letter or
// run-document subject makes the server publish its answer there, and the
// stream stores it. In the documented layout producers live in accounts of
// their own and reach the jetflow account through service imports only:
// the server rewrites the reply subject into one of its own, and its
// answer returns into the producer's account, where no stream is.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// strandedType is a task type no worker serves: the injecting publishes
// stay in the task stream and run nowhere.
const strandedType = "attack.stranded"

var injections atomic.Int64

// inject makes the server answer into target as c would: a permitted
// publish of a task and a STREAM.INFO request of the task stream, each
// with the reply subject target. It returns once the server answered a
// later publish on the same connection, so the answers to the injections
// have been routed by then.
func inject(t *testing.T, d *deployment, c *conn, target string) {
	t.Helper()
	n := injections.Add(1)
	id := fmt.Sprintf("inject-%d", n)
	m := &nats.Msg{Subject: d.names.TaskSubject(framework.PriorityNormal, strandedType), Reply: target, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(framework.HeaderTaskID, id)
	if err := c.PublishMsg(m); err != nil {
		t.Fatalf("inject into %s: %v", target, err)
	}
	// Refused in the accounts layout (producers have no JetStream API);
	// permitted in the single-account one.
	if err := c.PublishRequest("$JS.API.STREAM.INFO."+d.names.TaskStream(), target, nil); err != nil {
		t.Fatalf("inject into %s: %v", target, err)
	}
	barrier(t, d, c)
}

// barrier publishes a task on c and waits for the server's
// acknowledgement.
func barrier(t *testing.T, d *deployment, c *conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("barrier-%d", injections.Add(1))
	m := &nats.Msg{Subject: d.names.TaskSubject(framework.PriorityNormal, strandedType), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(framework.HeaderTaskID, id)
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("barrier publish: %v (violations %v)", err, violations(c))
	}
}

// TestReplyInjectionLeavesCronSchedules: both producers aim the server's
// answers at a repeating schedule's subject. A plain message there would
// replace the schedule, which would never fire again; it keeps firing.
func TestReplyInjectionLeavesCronSchedules(t *testing.T) {
	t.Parallel()
	const typ = "cron.work"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	fired := make(chan string, 64)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
			select {
			case fired <- task.ID:
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
	if _, err := schedule.New(ocl).Register(ctx, schedule.Definition{Name: "nightly", Spec: "@every 1s", Type: typ}); err != nil {
		t.Fatalf("operator: register: %v (violations %v)", err, violations(oc))
	}
	testutil.Recv(t, fired, 30*time.Second, "the cron's first fire")

	for _, role := range []string{testutil.SecuredProducer, testutil.SecuredProducerB} {
		inject(t, d, d.connect(t, role), d.names.CronSubject("nightly"))
	}
	// Drain what fired before the attack was routed, then see it fire on.
	for len(fired) > 0 {
		<-fired
	}
	for i := range 3 {
		testutil.Recv(t, fired, 30*time.Second, fmt.Sprintf("fire %d after the injection", i+1))
	}
	msgs := d.stored(t, d.names.ScheduleStream(), d.names.CronSubject("nightly"))
	if len(msgs) != 1 || msgs[0].Header.Get(jetstream.ScheduleHeader) != "@every 1s" {
		t.Fatalf("the cron's subject holds %d messages, the last with Nats-Schedule %q", len(msgs), msgs[len(msgs)-1].Header.Get(jetstream.ScheduleHeader))
	}
}

// TestReplyInjectionLeavesDelayedTasks: tenant B aims the server's answers
// at tenant A's delayed task's schedule. A plain message there would drop
// the schedule and the task would never run; it runs, not early.
func TestReplyInjectionLeavesDelayedTasks(t *testing.T) {
	t.Parallel()
	const typ = "delay.work"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	ran := make(chan time.Time, 1)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
			if task.ID == "victim-1" {
				ran <- time.Now()
			}
			return nil
		})
	})
	cl, pc := d.client(t, testutil.SecuredProducer)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	due := time.Now().Add(3 * time.Second)
	if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID("victim-1"), framework.At(due)); err != nil {
		t.Fatalf("enqueue: %v (violations %v)", err, violations(pc))
	}
	sched := d.names.ScheduleSubject("victim-1")
	testutil.Wait(t, 30*time.Second, "the mover to store the victim's schedule", func() bool {
		return len(d.stored(t, d.names.ScheduleStream(), sched)) > 0
	})
	inject(t, d, d.connect(t, testutil.SecuredProducerB), sched)
	at := testutil.Recv(t, ran, 30*time.Second, "the victim's delayed task to run")
	if at.Before(due) {
		t.Errorf("the victim's task ran %v early", due.Sub(at))
	}
}

// TestReplyInjectionForgesNoEffect: tenant B aims the server's answers at
// the effects ledger's keys of a task of tenant A it predicts. A value
// there would look like an effect claimed before, and the victim's step
// would be skipped (dead-lettered: "outcome was never recorded"); the
// step runs once and the task succeeds.
func TestReplyInjectionForgesNoEffect(t *testing.T) {
	t.Parallel()
	const typ = "fx.work"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}})
	var steps atomic.Int32
	done := make(chan error, 1)
	d.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			err := effects.Once(ctx, "charge", func(context.Context) error {
				steps.Add(1)
				return nil
			})
			done <- err
			return err
		})
	})
	bucket := "$KV." + d.names.EffectsBucket() + "."
	ac := d.connect(t, testutil.SecuredProducerB)
	for _, key := range []string{"victim-2.charge", "fx=2Ework.victim-2.charge"} {
		inject(t, d, ac, bucket+key)
	}
	cl, pc := d.client(t, testutil.SecuredProducer)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID("victim-2")); err != nil {
		t.Fatalf("enqueue: %v (violations %v)", err, violations(pc))
	}
	if err := testutil.Recv(t, done, 30*time.Second, "the victim's task to run"); err != nil {
		t.Fatalf("the victim's effect: %v", err)
	}
	if n := steps.Load(); n != 1 {
		t.Errorf("the victim's step ran %d times, want 1", n)
	}
}

// replyTargets are subjects of streams and buckets a reply must never
// land on, with the stream that would store it.
func replyTargets(n streams.Names) []struct{ stream, subject string } {
	kv := func(bucket, key string) struct{ stream, subject string } {
		return struct{ stream, subject string }{"KV_" + bucket, "$KV." + bucket + "." + key}
	}
	return []struct{ stream, subject string }{
		{n.ScheduleStream(), n.CronSubject("forged")},
		{n.ScheduleStream(), n.ScheduleSubject("forged")},
		{n.DLQStream(), n.DLQSubject("victim.type")},
		{n.RunStream(), n.RunSubject("run-1")},
		{n.AdvisoryStream(), "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.TaskStream() + ".victim_type-normal"},
		kv(n.StateBucket(), "victim-3"),
		kv(n.EffectsBucket(), "victim-3.charge"),
		kv(n.ErrorsBucket(), "victim-3"),
		kv(n.BreakerBucket(), "payments-gw"),
		kv(n.UniqueBucket(), "victim-key"),
		kv(n.LimitsBucket(), "victim.type"),
		kv(n.OrderingBucket(), "victim-3"),
	}
}

// TestReplyInjectionForgesNoRecord: both producers aim the server's
// answers at dead-letter records, run documents, advisories, schedules and
// every bucket. Nothing is stored there.
func TestReplyInjectionForgesNoRecord(t *testing.T) {
	t.Parallel()
	d := deploy(t, testutil.SecuredConfig{})
	targets := replyTargets(d.names)
	for _, role := range []string{testutil.SecuredProducer, testutil.SecuredProducerB} {
		c := d.connect(t, role)
		for _, tg := range targets {
			inject(t, d, c, tg.subject)
		}
	}
	for _, tg := range targets {
		if msgs := d.stored(t, tg.stream, tg.subject); len(msgs) > 0 {
			t.Errorf("%s holds %d messages on %s, the first %.60q", tg.stream, len(msgs), tg.subject, msgs[0].Data)
		}
	}
}

// TestSingleAccountStoresInjectedReplies shows what the single-account
// layout does not stop: the same injections as
// TestReplyInjectionForgesNoRecord, by a producer with subject permissions
// only, and the server's answers are stored on every target.
func TestSingleAccountStoresInjectedReplies(t *testing.T) {
	t.Parallel()
	s := testutil.RunSecured(t, testutil.SecuredConfig{SingleAccount: true})
	js, err := jetstream.New(s.Connect(t, testutil.SecuredAdmin))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{Secured: s, names: streams.MustNames(""), admin: js}
	c := d.connect(t, testutil.SecuredProducer)
	for _, tg := range replyTargets(d.names) {
		inject(t, d, c, tg.subject)
		testutil.Wait(t, 30*time.Second, "the answer stored on "+tg.subject, func() bool {
			return len(d.stored(t, tg.stream, tg.subject)) > 0
		})
	}
	if v := violations(c); len(v) > 0 {
		t.Errorf("the single-account producer was refused: %v", v)
	}
}
