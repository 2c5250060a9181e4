package intake

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

func names(t *testing.T) streams.Names {
	t.Helper()
	n, err := streams.NewNames("jf")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// key is a consumer of a plan as partition/type/priority/max-ack-pending.
func key(c Consumer, types []Spec) string {
	return fmt.Sprintf("%d/%s/%d/%d", c.Names.PartitionIndex(), types[c.Type].Name, c.Spec.Priority, c.Spec.MaxAckPending)
}

func TestPlan(t *testing.T) {
	t.Parallel()
	n := names(t)
	hi, lo := streams.PriorityHigh, streams.PriorityLow
	types := []Spec{
		{Name: "a", Priorities: []streams.Priority{hi, lo}, MaxInFlight: 10, CapSet: true, MaxAttempts: 3, AckWait: time.Second},
		{Name: "b", Priorities: []streams.Priority{lo}, MaxInFlight: 7},
	}
	byType := streams.Layout{Partitions: 3, Ordered: 3, By: streams.PartitionByType}
	served := byType.ServedBy("a") // partition 0 and a's own
	tests := []struct {
		name  string
		parts []streams.Names
		l     streams.Layout
		want  []string
	}{
		{"one partition", []streams.Names{n}, streams.Layout{Partitions: 1, Ordered: 1},
			[]string{fmt.Sprintf("0/a/%d/10", hi), fmt.Sprintf("0/a/%d/10", lo), fmt.Sprintf("0/b/%d/7", lo)}},
		{"by task: a set cap is split, a default one is not", n.Partitions(2), streams.Layout{Partitions: 2, Ordered: 2},
			[]string{fmt.Sprintf("0/a/%d/5", hi), fmt.Sprintf("0/a/%d/5", lo), fmt.Sprintf("0/b/%d/7", lo),
				fmt.Sprintf("1/a/%d/5", hi), fmt.Sprintf("1/a/%d/5", lo), fmt.Sprintf("1/b/%d/7", lo)}},
		{"added partitions only", n.Partitions(2)[1:], streams.Layout{Partitions: 2, Ordered: 2},
			[]string{fmt.Sprintf("1/a/%d/5", hi), fmt.Sprintf("1/a/%d/5", lo), fmt.Sprintf("1/b/%d/7", lo)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := Plan(tc.parts, tc.l, types)
			var got []string
			for _, c := range plan {
				got = append(got, key(c, types))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Plan = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("by type", func(t *testing.T) {
		plan := Plan(n.Partitions(3), byType, types)
		perA := map[int]int{}
		for _, c := range plan {
			if types[c.Type].Name != "a" {
				continue
			}
			k := c.Names.PartitionIndex()
			perA[k] = c.Spec.MaxAckPending
			if c.Spec.MaxDeliver != 3 || c.Spec.AckWait != time.Second || c.Spec.TaskType != "a" {
				t.Errorf("spec %+v does not carry the type's settings", c.Spec)
			}
		}
		if len(perA) != len(served) {
			t.Fatalf("a has consumers in partitions %v, want %v", perA, served)
		}
		sum := 0
		for _, k := range served {
			sum += perA[k]
		}
		if sum != 10 {
			t.Errorf("a's shares %v add up to %d, want 10", perA, sum)
		}
	})
}

// EnsureAll calls every index once, never more than limit at once.
func TestEnsureAllBounded(t *testing.T) {
	t.Parallel()
	const n, limit = 40, 3
	var running, peak atomic.Int32
	seen := make([]atomic.Int32, n)
	err := EnsureAll(context.Background(), n, limit, func(ctx context.Context, i int) error {
		r := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if r <= p || peak.CompareAndSwap(p, r) {
				break
			}
		}
		seen[i].Add(1)
		for range 100 {
			runtime.Gosched() // let the others start, were they not bounded
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Errorf("index %d ensured %d times", i, c)
		}
	}
	if p := peak.Load(); p > limit {
		t.Errorf("%d ran at once, limit %d", p, limit)
	}
}

// EnsureAll runs up to limit at once: limit calls that each wait for all
// of them to have started all finish.
func TestEnsureAllParallel(t *testing.T) {
	t.Parallel()
	const limit = 4
	var started sync.WaitGroup
	started.Add(limit)
	err := EnsureAll(context.Background(), limit, limit, func(ctx context.Context, i int) error {
		started.Done()
		started.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The first error is returned and cancels the others' ctx; the errors the
// cancellation causes come after it and are not returned.
func TestEnsureAllFirstError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var waiting sync.WaitGroup
	waiting.Add(2)
	err := EnsureAll(context.Background(), 3, 3, func(ctx context.Context, i int) error {
		if i == 2 {
			waiting.Wait()
			return boom
		}
		waiting.Done()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Errorf("EnsureAll = %v, want the first error", err)
	}
	if err := EnsureAll(context.Background(), 0, 0, nil); err != nil {
		t.Errorf("nothing to ensure: %v", err)
	}
}
