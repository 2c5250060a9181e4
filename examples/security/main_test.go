package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	want := `server: TLS with a certificate generated at start-up; account JETFLOW: admin, worker, operator; account TENANT_A: producer
admin: topology ensured
worker: serving email.send
producer: enqueued email.send welcome-ada
worker: sent welcome e-mail to ada@example.com
producer: purge JETFLOW_TASKS denied (permissions violation)
producer: consume email.send denied (permissions violation)
worker: enqueue denied (permissions violation)
operator: purged JETFLOW_DLQ
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

// TestRolePermissions runs a producer, a worker and an operator with their
// least-privilege users, in the documented accounts layout, through what
// jetflow does by default (state records, retries, dead letters with their
// router and reconciler, delays, the effects ledger, a circuit breaker that
// opens and pauses consumers, dead-letter listing and replay) and checks
// that no allowed path hits a permission violation; then that each role is
// refused what it must not do.
func TestRolePermissions(t *testing.T) {
	t.Parallel()
	const typ = "perm.work"
	d := deploy(t, testutil.SecuredConfig{Types: []string{typ}, Dependencies: []string{"mail.smtp"}})
	names := d.names
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	wc := d.connect(t, testutil.SecuredWorker)
	w, err := framework.NewWorker(wc.Conn, framework.WithTimings(framework.Timings{ReconcileInterval: 200 * time.Millisecond}), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := breaker.Install(w, breaker.WithSettings("mail.smtp", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 500 * time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	var smtpCalls atomic.Int32
	var statusRan, laterRan atomic.Bool
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		switch {
		case task.ID == "later-1":
			laterRan.Store(true)
		case strings.HasPrefix(task.ID, "status"):
			statusRan.Store(true)
		case strings.HasPrefix(task.ID, "retry") && task.Attempt == 1:
			return framework.RetryAfter(10 * time.Millisecond)
		case strings.HasPrefix(task.ID, "fail"):
			return framework.Permanent(errors.New("refused"))
		case strings.HasPrefix(task.ID, "exhaust"):
			return errors.New("always failing")
		case strings.HasPrefix(task.ID, "once"):
			return effects.Once(ctx, "send", func(context.Context) error { return nil })
		case strings.HasPrefix(task.ID, "breaker"):
			return breaker.Call(ctx, "mail.smtp", func(context.Context) error {
				if smtpCalls.Add(1) == 1 {
					return errors.New("smtp down") // opens the breaker
				}
				return nil
			})
		}
		return nil
	}, breaker.WithDependencies("mail.smtp"), framework.WithMaxAttempts(2),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker start: %v (violations %v)", err, violations(wc))
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Shutdown(sctx)
	}()

	cl, pc := d.client(t, testutil.SecuredProducer)
	for _, id := range []string{"ok-1", "retry-1", "fail-1", "exhaust-1", "once-1", "breaker-1"} {
		if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID(id)); err != nil {
			t.Fatalf("enqueue %s: %v (violations %v)", id, err, violations(pc))
		}
	}
	// A producer publishing straight to the work subject a task whose
	// headers look like a server status (empty body, "Status: 409 Consumer
	// Deleted"): it runs like any task and poisons nothing.
	status := &nats.Msg{Subject: names.TaskSubject(framework.PriorityNormal, typ), Header: nats.Header{}}
	status.Header.Set(jetstream.MsgIDHeader, "status-1")
	status.Header.Set(framework.HeaderTaskID, "status-1")
	status.Header.Set("Status", "409")
	status.Header.Set("Description", "Consumer Deleted")
	if _, err := pc.js.PublishMsg(ctx, status); err != nil {
		t.Fatalf("publish status-shaped task: %v (violations %v)", err, violations(pc))
	}
	if _, err := cl.Enqueue(ctx, typ, nil, framework.WithID("later-1"), framework.In(300*time.Millisecond)); err != nil {
		t.Fatalf("delayed enqueue: %v (violations %v)", err, violations(pc))
	}
	// A producer's Nats-Rollup header on a work or delay subject (which
	// subject permissions cannot see) is refused by the stream: it would
	// have deleted the subject's waiting tasks, or with "all" the whole
	// stream.
	for _, subject := range []string{names.TaskSubject(framework.PriorityNormal, typ), names.DelaySubject("later-1")} {
		for _, kind := range []string{jetstream.MsgRollupSubject, jetstream.MsgRollupAll} {
			m := &nats.Msg{Subject: subject, Header: nats.Header{jetstream.MsgRollup: {kind}}}
			var apiErr *jetstream.APIError
			if _, err := pc.js.PublishMsg(ctx, m); !errors.As(err, &apiErr) {
				t.Errorf("producer's Nats-Rollup: %s on %s: %v, want refused by the stream", kind, subject, err)
			}
		}
	}
	if _, err := cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: typ}, {Type: typ}}); err != nil {
		t.Fatalf("enqueue many: %v (violations %v)", err, violations(pc))
	}

	oc := d.connect(t, testutil.SecuredOperator)
	ocl, err := framework.NewClient(oc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	dl := dlq.New(ocl)
	var recs []dlq.Record
	testutil.Wait(t, time.Minute, "two dead letters (permanent and exhausted)", func() bool {
		recs, _, err = dl.List(ctx, dlq.Filter{}, dlq.Page{})
		return err == nil && len(recs) >= 2
	})
	// The tasks finish (the breaker task on its second attempt, once its
	// breaker let a probe through) and leave the stream.
	testutil.Wait(t, time.Minute, "task stream empty", func() bool {
		st, err := d.admin.Stream(ctx, names.TaskStream())
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	if !statusRan.Load() {
		t.Error("the status-shaped task did not run")
	}
	// The delayed task went through the worker's delay mover.
	testutil.Wait(t, time.Minute, "the delayed task to run", laterRan.Load)
	if _, err := dl.Replay(ctx, recs[0].Seq); err != nil {
		t.Errorf("operator replay: %v (violations %v)", err, violations(oc))
	}
	if _, err := inspect.New(ocl).QueueStats(ctx); err != nil {
		t.Errorf("operator queue stats: %v (violations %v)", err, violations(oc))
	}
	// What the CLI's status, breakers and workflows commands read.
	if _, err := inspect.New(ocl).BreakerRecords(ctx); err != nil {
		t.Errorf("operator breaker records: %v (violations %v)", err, violations(oc))
	}
	if ws, err := inspect.New(ocl).Workers(ctx); err != nil || len(ws.Workers) != 1 {
		t.Errorf("operator worker registry: %v, %v (violations %v)", ws, err, violations(oc))
	}
	wfc, err := workflow.NewClient(ocl)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := wfc.List(ctx, workflow.RunFilter{}); err != nil {
		t.Errorf("operator workflow runs: %v (violations %v)", err, violations(oc))
	}
	if _, err := dl.Purge(ctx, dlq.Filter{}); err != nil {
		t.Errorf("operator purge: %v (violations %v)", err, violations(oc))
	}

	for who, c := range map[string]*conn{"worker": wc, "producer": pc, "operator": oc} {
		for _, v := range violations(c) {
			t.Errorf("%s hit a permission violation on an allowed path: %s", who, v)
		}
	}

	// What each role must not do.
	tasks := names.TaskStream()
	workerConsumer := names.ConsumerName(typ, framework.PriorityNormal)
	for _, c := range []struct {
		who  string
		conn *conn
		what string
		op   func(ctx context.Context) error
	}{
		{"producer", pc, "purge the task stream", func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+tasks, nil)
			return err
		}},
		{"producer", pc, "create a consumer", func(ctx context.Context) error {
			_, err := pc.js.CreateOrUpdateConsumer(ctx, tasks, jetstream.ConsumerConfig{Durable: "steal", FilterSubject: names.TaskWildcard()})
			return err
		}},
		{"producer", pc, "pull a worker's consumer", func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT."+tasks+"."+workerConsumer, []byte(`{"batch":1}`))
			return err
		}},
		{"producer", pc, "read task messages", func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+tasks, []byte(`{"seq":1}`))
			return err
		}},
		{"producer", pc, "write a dead letter", func(ctx context.Context) error {
			return pc.Publish(names.DLQSubject(typ), nil)
		}},
		{"producer", pc, "write the state bucket", func(ctx context.Context) error {
			return pc.PublishMsg(&nats.Msg{Subject: "$KV." + names.StateBucket() + ".x", Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}})
		}},
		{"producer", pc, "read the delay stream's info", func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+names.DelayStream(), nil)
			return err
		}},
		{"worker", wc, "enqueue", func(ctx context.Context) error {
			c, err := framework.NewClient(wc.Conn, framework.WithStateTracking(false))
			if err != nil {
				return err
			}
			_, err = c.Enqueue(ctx, typ, nil)
			return err
		}},
		{"worker", wc, "consume another type", func(ctx context.Context) error {
			_, err := wc.js.CreateOrUpdateConsumer(ctx, tasks, jetstream.ConsumerConfig{
				Durable: names.ConsumerName("other.type", framework.PriorityNormal), FilterSubject: names.TaskSubject(framework.PriorityNormal, "other.type")})
			return err
		}},
		{"worker", wc, "purge dead letters", func(ctx context.Context) error {
			_, err := wc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+names.DLQStream(), nil)
			return err
		}},
		{"operator", oc, "consume tasks", func(ctx context.Context) error {
			_, err := oc.js.CreateOrUpdateConsumer(ctx, tasks, jetstream.ConsumerConfig{Durable: "peek", FilterSubject: names.TaskWildcard()})
			return err
		}},
		{"producer", pc, "purge the schedule stream", func(ctx context.Context) error {
			_, err := pc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+names.ScheduleStream(), nil)
			return err
		}},
		{"producer", pc, "publish a cron schedule", func(ctx context.Context) error {
			return pc.Publish(names.CronSubject("evil"), nil)
		}},
		// The schedule stream must allow roll-ups: a producer never
		// writes it, so its Nats-Rollup: all cannot delete others'
		// delayed tasks and cron schedules.
		{"producer", pc, "write the schedule stream", func(ctx context.Context) error {
			return pc.PublishMsg(&nats.Msg{Subject: names.ScheduleSubject("evil"), Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}})
		}},
		{"operator", oc, "purge the task stream", func(ctx context.Context) error {
			_, err := oc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+tasks, nil)
			return err
		}},
	} {
		if err := c.conn.denied(ctx, c.op); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%s could %s: %v", c.who, c.what, err)
		}
	}
}
