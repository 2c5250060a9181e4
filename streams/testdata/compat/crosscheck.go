//go:build ignore

// crosscheck stores the messages of a file written by genmessages.go in a
// new topology of the tree it runs in, and checks that this tree's
// inspector, schedule manager, dead-letter queue and worker read and run
// them: the other direction of TestPreviousReleaseMessages, for messages
// this version writes and an earlier release reads. Run it in that
// release's tree:
//
//	go run streams/testdata/compat/genmessages.go > /tmp/current.json
//	rev=97b8596; dir=$(mktemp -d)
//	git archive $rev | tar -x -C $dir
//	cp streams/testdata/compat/crosscheck.go $dir/
//	(cd $dir && go run crosscheck.go /tmp/current.json)
//
// It uses only API that release had. It prints one line per check and
// exits 1 when one fails.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

type fixture struct {
	Release  string
	Messages []struct {
		Name, Stream, Subject string
		Header                nats.Header
		Data                  string
	}
}

var failed bool

func check(ok bool, what string, args ...any) {
	status := "ok  "
	if !ok {
		status, failed = "FAIL", true
	}
	fmt.Printf("%s %s\n", status, fmt.Sprintf(what, args...))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run crosscheck.go FIXTURE.json")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crosscheck:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

func run(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("messages written by %s, read by this tree\n", f.Release)
	var replay *nats.Msg
	for _, m := range f.Messages {
		msg := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: []byte(m.Data)}
		if m.Name == "replay" {
			replay = msg
			continue
		}
		_, err := e.JetStream.PublishMsg(ctx, msg)
		check(err == nil, "store %s on %s: %v", m.Name, m.Subject, err)
	}
	cl, err := framework.NewClient(e.Conn)
	if err != nil {
		return err
	}
	rec, err := cl.Inspector().GetTask(ctx, "old-fail-1")
	check(err == nil && rec.State == framework.StateDead && rec.Type == "compat.fail", "state record of old-fail-1: %+v, %v", rec, err)
	infos, err := schedule.New(cl).List(ctx)
	check(err == nil && len(infos) == 1 && infos[0].Name == "old-cron" && infos[0].Spec == "@every 1s", "repeating schedule listed: %d, %v", len(infos), err)
	dq := dlq.New(cl)
	dead, _, err := dq.List(ctx, dlq.Filter{}, dlq.Page{})
	check(err == nil && len(dead) == 1, "one dead letter: %d, %v", len(dead), err)
	if len(dead) == 1 {
		d := dead[0]
		check(d.TaskID == "old-fail-1" && d.Type == "compat.fail" && d.Reason == "permanent" && d.Deliveries == 1 &&
			d.LastError == "permanent: card declined" && d.OriginalSubject == "jetflow.task.normal.compat.fail",
			"dead letter read as task %s, type %s, reason %s, deliveries %d, error %q, subject %s", d.TaskID, d.Type, d.Reason, d.Deliveries, d.LastError, d.OriginalSubject)
	}

	var mu sync.Mutex
	ran := map[string]int{}
	tenant := map[string]string{}
	handle := func(_ context.Context, t *framework.Task) error {
		mu.Lock()
		defer mu.Unlock()
		ran[t.ID]++
		tenant[t.ID] = t.Header("X-Tenant")
		return nil
	}
	nc, err := e.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := framework.NewWorker(nc)
	if err != nil {
		return err
	}
	w.HandleFunc("compat.email", handle, framework.WithOrdering(framework.Ordering{}))
	w.HandleFunc("compat.fail", handle)
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Shutdown(context.Background())
	want := []string{"old-now-1", "old-ordered-1", "old-delayed-1", "old-delayed-2"}
	tick := func() string {
		for id := range ran {
			if strings.HasPrefix(id, "cron-old-cron-") {
				return id
			}
		}
		return ""
	}
	err = wait(ctx, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range want {
			if ran[id] == 0 {
				return false
			}
		}
		return tick() != ""
	})
	mu.Lock()
	for _, id := range want {
		check(ran[id] == 1, "task %s ran %d time(s)", id, ran[id])
	}
	check(tick() != "" && tenant[tick()] == "acme", "a tick of the repeating schedule ran: %q with tenant %q", tick(), tenant[tick()])
	check(tenant["old-now-1"] == "acme", "old-now-1 kept its header: %q", tenant["old-now-1"])
	mu.Unlock()
	if err != nil {
		return err
	}
	if len(dead) == 1 {
		_, err := dq.Replay(ctx, dead[0].Seq)
		check(err == nil, "replay the dead letter: %v", err)
		err = wait(ctx, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return ran["old-fail-1"] > 0 })
		check(err == nil, "the replayed dead letter ran under its ID: %v", err)
	}
	left, _, err := dq.List(ctx, dlq.Filter{}, dlq.Page{})
	check(err == nil && len(left) == 0, "no dead letter left: %d, %v", len(left), err)
	if replay != nil {
		// What the writer's own dlq.Replay stored: informational.
		_, err := e.JetStream.PublishMsg(ctx, replay)
		if err != nil {
			fmt.Printf("info the writer's replay cannot be stored by hand (%v): only its one-shot schedule can make it\n", err)
			return nil
		}
		before := ran["old-fail-1"]
		werr := wait(ctx, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return ran["old-fail-1"] > before })
		left, _, _ := dq.List(ctx, dlq.Filter{}, dlq.Page{})
		reasons := []string{}
		for _, d := range left {
			reasons = append(reasons, string(d.Reason))
		}
		fmt.Printf("info the writer's replay: ran again %v, dead letters %v\n", werr == nil, reasons)
	}
	return nil
}

func wait(ctx context.Context, d time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
