//go:build ignore

// sidebyside runs a worker, a client and the dead-letter queue of the tree
// it runs in against a server whose topology another version ensured, then
// runs that tree's streams.Ensure and prints what it changed back. Run it
// in an earlier release's tree against a server this version set up:
//
//	go run ./cmd/jetflow dev --no-ui --port 4333 --store /tmp/jf &   # this version's Ensure
//	rev=97b8596; dir=$(mktemp -d)
//	git archive $rev | tar -x -C $dir
//	cp streams/testdata/compat/sidebyside.go $dir/
//	(cd $dir && go run sidebyside.go nats://127.0.0.1:4333)
//	NATS_URL=nats://127.0.0.1:4333 go run ./cmd/jetflow upgrade --dry-run
//
// With AWAIT_REPLAY=1 it waits for its dead letter to be replayed (run
// this version's `jetflow dlq replay SEQ` meanwhile) and checks that its
// worker runs the replay under the task's ID.
//
// It uses only API that release had, and exits 1 when a check fails.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run sidebyside.go NATS_URL")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside: FAIL:", err)
		os.Exit(1)
	}
}

// awaitReplay waits until the task id ran a second time.
func awaitReplay(ctx context.Context, id string, mu *sync.Mutex, ran map[string]int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		mu.Lock()
		n := ran[id]
		mu.Unlock()
		if n >= 2 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replay of %s did not run here", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func run(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		return err
	}
	run := fmt.Sprint(time.Now().UnixNano())
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("sbs-%s-%d", run, i)
		opts := []framework.EnqueueOption{framework.WithID(id)}
		if i >= 3 {
			opts = append(opts, framework.In(time.Second))
		}
		if _, err := cl.Enqueue(ctx, "sbs.task", []byte("x"), opts...); err != nil {
			return fmt.Errorf("enqueue %s: %w", id, err)
		}
		ids = append(ids, id)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	w, err := framework.NewWorker(nc)
	if err != nil {
		return err
	}
	w.HandleFunc("sbs.task", func(_ context.Context, t *framework.Task) error {
		mu.Lock()
		ran[t.ID]++
		mu.Unlock()
		return nil
	})
	w.HandleFunc("sbs.fail", func(_ context.Context, t *framework.Task) error {
		mu.Lock()
		ran[t.ID]++
		replay := t.Header("Jetflow-Replayed-From-Seq") != ""
		mu.Unlock()
		if replay {
			return nil
		}
		return framework.Permanent(errors.New("no"))
	})
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Shutdown(context.Background())
	failID := "sbs-fail-" + run
	if _, err := cl.Enqueue(ctx, "sbs.fail", []byte("x"), framework.WithID(failID)); err != nil {
		return err
	}
	for {
		mu.Lock()
		n := 0
		for _, id := range ids {
			if ran[id] == 1 {
				n++
			}
		}
		mu.Unlock()
		if n == len(ids) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d tasks ran (3 immediate, 2 delayed)", n, len(ids))
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Println("ok   3 immediate and 2 delayed tasks enqueued and run by this tree's client and worker")
	dq := dlq.New(cl)
	for {
		recs, _, err := dq.List(ctx, dlq.Filter{Type: "sbs.fail"}, dlq.Page{})
		if err == nil && len(recs) == 1 && recs[0].TaskID == failID {
			fmt.Printf("ok   dead letter written and read: reason %s, type %s, sequence %d\n", recs[0].Reason, recs[0].Type, recs[0].Seq)
			if os.Getenv("AWAIT_REPLAY") != "" {
				// Replay it with the other version's CLI meanwhile:
				// this tree's worker must run it under its ID.
				fmt.Printf("wait run `jetflow dlq replay %d` within 60 s\n", recs[0].Seq)
				if err := awaitReplay(ctx, failID, &mu, ran); err != nil {
					return err
				}
				fmt.Println("ok   the replay ran under the task's ID in this tree's worker")
				break
			}
			if _, err := dq.Purge(ctx, dlq.Filter{Type: "sbs.fail"}); err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no dead letter for %s: %v", failID, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		return fmt.Errorf("this tree's Ensure: %w", err)
	}
	fmt.Printf("info this tree's Ensure updated %v, created %v, buckets created %v\n", rep.Updated, rep.Created, rep.BucketsCreated)
	return nil
}
