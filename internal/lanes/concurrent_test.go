package lanes

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

type task struct {
	key string
	seq uint64
}

// Workers settle tasks while deliveries keep arriving; with -race this
// checks the lock, and the workers check the cap and the order per key.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		limit int
	}{
		{"ordered", Config{Ordered: true}, 1},
		{"cap 3", Config{Limit: func(string) int { return 3 }}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const keys, tasks, workers = 7, 2000, 8
			g := New[task](tc.cfg)
			g.Acquired()
			g.Check(0, 0)
			work := make(chan task, tasks)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				running = map[string]int{}
				last    = map[string]uint64{}
				errs    []string
			)
			wg.Add(tasks)
			run := func(start []task) {
				for _, it := range start {
					work <- it
				}
			}
			for range workers {
				go func() {
					for it := range work {
						mu.Lock()
						running[it.key]++
						if running[it.key] > tc.limit {
							errs = append(errs, fmt.Sprintf("%s runs %d", it.key, running[it.key]))
						}
						if tc.cfg.Ordered && it.seq <= last[it.key] {
							errs = append(errs, fmt.Sprintf("%s/%d after %d", it.key, it.seq, last[it.key]))
						}
						last[it.key] = it.seq
						mu.Unlock()
						runtime.Gosched()
						mu.Lock()
						running[it.key]--
						mu.Unlock()
						run(g.Done(it.key, it.seq, false))
						wg.Done()
					}
				}()
			}
			for seq := range uint64(tasks) {
				it := task{fmt.Sprint(seq % keys), seq + 1}
				start, _, _ := g.Receive(Item[task]{Key: it.key, Seq: it.seq, DSeq: it.seq, V: it})
				run(start)
			}
			wg.Wait()
			close(work)
			for _, e := range errs {
				t.Error(e)
			}
			if len(g.Keys()) != 0 || g.Held() != 0 {
				t.Fatalf("after all done: keys %v, held %d", g.Keys(), g.Held())
			}
		})
	}
}
