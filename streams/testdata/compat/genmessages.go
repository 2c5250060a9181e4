//go:build ignore

// genmessages writes the messages a release of jetflow stores, as JSON, for
// the wire-format compatibility test of package streams
// (TestPreviousReleaseMessages). It is run inside a tree of that release,
// not in this one:
//
//	rev=97b8596; dir=$(mktemp -d)
//	git archive $rev | tar -x -C $dir
//	cp streams/testdata/compat/genmessages.go $dir/
//	(cd $dir && go run genmessages.go) > streams/testdata/compat/$rev.json
//
// It uses only API that release had: an embedded server with its topology
// (testutil.StartEmbedded), a client, a worker with its delay mover and
// dead-letter router, a repeating schedule (schedule.Register), a
// dead-letter replay (dlq.Replay), and reads what they stored with plain
// JetStream gets. Run in this tree (go run streams/testdata/compat/genmessages.go)
// it writes what this version stores, which crosscheck.go reads in an
// earlier release's tree.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// message is one stored message: what the test publishes again.
type message struct {
	Name    string      `json:"name"`
	Stream  string      `json:"stream"`
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header"`
	Data    string      `json:"data"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "genmessages:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		return err
	}
	defer e.Close()
	js := e.JetStream
	cl, err := framework.NewClient(e.Conn, framework.WithStateTracking(true))
	if err != nil {
		return err
	}
	var out []message
	// take stores the last message on subject of stream under name.
	take := func(name, stream, subject string) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", name, subject, err)
		}
		// A direct get adds these; they are not what the writer stored.
		for _, k := range []string{"Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject", "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"} {
			m.Header.Del(k)
		}
		out = append(out, message{Name: name, Stream: stream, Subject: m.Subject, Header: m.Header, Data: string(m.Data)})
		return nil
	}
	enqueue := func(typ, id string, opts ...framework.EnqueueOption) error {
		opts = append(opts, framework.WithID(id))
		_, err := cl.Enqueue(ctx, typ, map[string]string{"to": id + "@example.com"}, opts...)
		return err
	}

	// What producers publish: an immediate task at high priority with a
	// header of the application's, an ordered task, delayed tasks.
	if err := enqueue("compat.email", "old-now-1", framework.WithPriority(framework.PriorityHigh), framework.WithHeader("X-Tenant", "acme")); err != nil {
		return err
	}
	if err := enqueue("compat.email", "old-ordered-1", framework.Ordered("customer-7")); err != nil {
		return err
	}
	for _, id := range []string{"old-delayed-1", "old-delayed-2"} {
		if err := enqueue("compat.email", id, framework.In(5*time.Second)); err != nil {
			return err
		}
	}
	if err := take("task", "JETFLOW_TASKS", "jetflow.task.high.compat.email"); err != nil {
		return err
	}
	if err := take("ordered", "JETFLOW_TASKS", "jetflow.ord.>"); err != nil {
		return err
	}
	if err := take("delayed", "JETFLOW_DELAYS", "jetflow.delay.old-delayed-1"); err != nil {
		return err
	}
	// A repeating schedule as Register stores it.
	if _, err := schedule.New(cl).Register(ctx, schedule.Definition{Name: "old-cron", Spec: "@every 1s", Type: "compat.email",
		Payload: map[string]string{"to": "cron@example.com"}, Headers: map[string]string{"X-Tenant": "acme"}}); err != nil {
		return err
	}
	if err := take("cron", "JETFLOW_SCHEDULES", "jetflow.cron.old-cron"); err != nil {
		return err
	}

	// A worker: its mover stores the delayed tasks' schedules, its
	// handlers run the tasks (state records), and a task that fails for
	// good is dead-lettered.
	w, err := framework.NewWorker(e.Conn, framework.WithStateTracking(true))
	if err != nil {
		return err
	}
	w.HandleFunc("compat.email", func(context.Context, *framework.Task) error { return nil },
		framework.WithOrdering(framework.Ordering{}), framework.WithServedPriorities(framework.PriorityHigh, framework.PriorityNormal))
	w.HandleFunc("compat.fail", func(context.Context, *framework.Task) error {
		return framework.Permanent(errors.New("card declined"))
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Shutdown(context.Background())
	if err := wait(ctx, func() bool {
		s, err := js.Stream(ctx, "JETFLOW_SCHEDULES")
		if err != nil {
			return false
		}
		_, err = s.GetLastMsgForSubject(ctx, "jetflow.sched.old-delayed-2")
		return err == nil
	}); err != nil {
		return fmt.Errorf("the mover's schedule: %w", err)
	}
	if err := take("schedule", "JETFLOW_SCHEDULES", "jetflow.sched.old-delayed-2"); err != nil {
		return err
	}
	if err := enqueue("compat.fail", "old-fail-1"); err != nil {
		return err
	}
	if err := wait(ctx, func() bool {
		s, err := js.Stream(ctx, "JETFLOW_DLQ")
		return err == nil && s.CachedInfo().State.Msgs > 0
	}); err != nil {
		return fmt.Errorf("the dead letter: %w", err)
	}
	if err := take("deadletter", "JETFLOW_DLQ", "jetflow.dlq.compat.fail"); err != nil {
		return err
	}
	// The task state records, once the tasks ran or died.
	for _, id := range []string{"old-now-1", "old-fail-1"} {
		if err := wait(ctx, func() bool {
			rec, err := cl.Inspector().GetTask(ctx, id)
			return err == nil && (rec.State == framework.StateSucceeded || rec.State == framework.StateDead)
		}); err != nil {
			return fmt.Errorf("the state of %s: %w", id, err)
		}
		if err := take("state-"+id, "KV_JETFLOW_STATE", "$KV.JETFLOW_STATE."+id); err != nil {
			return err
		}
	}
	// The replay of the dead letter as the release's dlq.Replay stores it,
	// taken before any worker runs it.
	if err := w.Shutdown(ctx); err != nil {
		return err
	}
	dq := dlq.New(cl)
	dead, _, err := dq.List(ctx, dlq.Filter{}, dlq.Page{})
	if err != nil || len(dead) != 1 {
		return fmt.Errorf("dead letters %d: %v", len(dead), err)
	}
	if _, err := dq.Replay(ctx, dead[0].Seq); err != nil {
		return err
	}
	if err := wait(ctx, func() bool { return take("replay", "JETFLOW_TASKS", "jetflow.task.normal.compat.fail") == nil }); err != nil {
		return fmt.Errorf("the replay: %w", err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Release  string    `json:"release"`
		Written  time.Time `json:"written"`
		Messages []message `json:"messages"`
	}{os.Getenv("JETFLOW_RELEASE"), time.Now().UTC(), out})
}

func wait(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
