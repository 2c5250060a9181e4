package lanes

import (
	"slices"
	"testing"
	"time"
)

func TestOrderedRunsOneTaskOfAKeyAtATime(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true, Limit: func(string) int { return 5 }})
	s.run(
		step{"recv a 1", "a1"},
		step{"recv a 2", ""}, // a1 runs: a2 waits, whatever Limit says
		step{"recv b 9", "b9"},
		step{"recv a 3", ""},
		step{"done b 9", ""},
		step{"done a 1", "a2"},
		step{"done a 2", "a3"},
	)
	s.keys("a:0/1/0")
	s.run(step{"done a 3", ""})
	s.empty()
}

func TestTasksStartInSequenceOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"ordered", Config{Ordered: true}},
		{"cap 1", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := opened(t, tc.cfg)
			s.run(
				step{"recv a 5", "a5"},
				step{"recv a 9", ""},
				step{"recv a 7", ""},
				step{"recv a 8", ""},
				step{"recv a 6", ""},
				step{"done a 5", "a6"},
				step{"done a 6", "a7"},
				step{"done a 7", "a8"},
				step{"done a 8", "a9"},
				step{"done a 9", ""},
			)
			s.empty()
		})
	}
}

func TestCheckStartsEveryKeyInStreamOrder(t *testing.T) {
	t.Parallel()
	s := &script{t: t, g: New[string](Config{Limit: func(string) int { return 2 }})}
	s.run(
		step{"acquired", ""},
		step{"recv b 4", ""},
		step{"recv a 3", ""},
		step{"recv a 1", ""},
		step{"recv b 2", ""},
		step{"recv a 6", ""},
		step{"check 5 5", "a1 b2 a3 b4 open"},
		step{"check 5 5", "open"},
		step{"done a 1", "a6"},
	)
}

func TestOrderedAwaitsASequenceHandedBack(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1", "a1"},
		step{"recv a 2", ""},
		step{"recv a 3", ""},
		step{"recv b 9", "b9"},
		step{"nak a 1", ""}, // a2 waits for a1 to come back
		step{"recheck", ""},
		step{"nak b 9", ""},
	)
	s.keys("a:2/0/1 b:0/0/1")
	if got := s.g.Awaiting(); len(got) != 2 || got[0].Key != "a" || got[0].Seq != 1 || got[1].Key != "b" {
		t.Fatalf("Awaiting = %v", got)
	}
	s.run(
		step{"recv a 1 @20", "a1@20"}, // the redelivery is the key's head again
		step{"nak a 1", ""},
		step{"recv a 1 @21", "a1@21"},
		step{"done a 1", "a2"},
		step{"nak a 2", ""},
		step{"forget a 2", "a3"}, // dead-lettered: a3 may go
		step{"forget a 2", ""},
		step{"done a 3", ""},
		step{"forget b 9", ""},
	)
	s.empty()
}

func TestOrderedAwaitedHoldsOnlyHigherSequences(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 5", "a5"},
		step{"recv a 6", ""},
		step{"nak a 5", ""},
		step{"recv a 4", "a4"}, // below the awaited 5: a late redelivery goes first
		step{"done a 4", ""},
		step{"recv a 5", "a5"},
		step{"done a 5", "a6"},
		step{"done a 6", ""},
	)
	s.empty()
}

// A late redelivery of a sequence already settled (the server delivered it
// twice) starts again, at least once, when nothing of its key runs, before
// the key's higher queued sequences.
func TestOrderedLateRedeliveryStartsWhenTheKeyIsIdle(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1", "a1"},
		step{"done a 1", ""},
		step{"recv a 2", "a2"},
		step{"recv a 3", ""},
		step{"recv a 1", ""}, // a2 runs
		step{"done a 2", "a1"},
		step{"done a 1", "a3"},
		step{"done a 3", ""},
	)
	s.empty()
}

func TestCapRunsUpToLimitInOrder(t *testing.T) {
	t.Parallel()
	limits := map[string]int{"a": 2, "b": 3}
	s := opened(t, Config{Limit: func(k string) int { return limits[k] }})
	s.run(
		step{"recv a 1", "a1"},
		step{"recv a 2", "a2"},
		step{"recv a 3", ""},
		step{"recv a 4", ""},
		step{"recv b 5", "b5"},
		step{"recv b 6", "b6"},
		step{"recv b 7", "b7"},
		step{"recv b 8", ""},
		step{"done a 2", "a3"},
		step{"nak a 1", "a4"}, // not ordered: a1 coming back holds nothing
		step{"recv a 1", ""},
		step{"done a 3", "a1"},
	)
	s.keys("a:0/2/0 b:1/3/0")
}

func TestLimitIsReadEachTimeATaskCouldStart(t *testing.T) {
	t.Parallel()
	limit := 3
	s := opened(t, Config{Limit: func(string) int { return limit }})
	s.run(
		step{"recv a 1", "a1"},
		step{"recv a 2", "a2"},
		step{"recv a 3", "a3"},
		step{"recv a 4", ""},
		step{"recv a 5", ""},
		step{"recv a 6", ""},
	)
	limit = 1 // lowered: the three running go on, nothing starts until one is left
	s.run(
		step{"done a 1", ""},
		step{"done a 2", ""},
		step{"done a 3", "a4"},
	)
	limit = 3
	s.run(
		step{"recheck", "a5 a6"},
		step{"recheck", ""},
	)
	limit = 0 // below 1 counts as 1
	s.run(
		step{"done a 4", ""},
		step{"done a 5", ""},
		step{"recv a 7", ""},
		step{"done a 6", "a7"},
	)
}

func TestLimitDefaultsToOne(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{})
	s.run(
		step{"recv a 1", "a1"},
		step{"recv a 2", ""},
		step{"nak a 1", "a2"},
	)
}

func TestRedeliveryOfAHeldSequenceIsStale(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1 @1", "a1@1"},
		step{"recv a 2 @2", ""},
		step{"recv a 2 @5", "~a2@2"}, // the newer delivery takes the queued one's place
		step{"recv a 2 @4", "~a2@4"}, // an older one than held is stale itself
		step{"recv a 1 @6", "~a1@6"}, // a1 runs: the new delivery is dropped
		step{"check 99 99", "open"},  // an open gate stays open
		step{"done a 1", "a2@5"},
	)
	// The running task is counted by its latest delivery.
	s.run(
		step{"recv a 2 @9", "~a2@9"},
		step{"acquired", ""},
		step{"check 1 8", ""},
		step{"check 0 8", "open"},
	)
}

func TestUnknownDoneAndForgetAreNoOps(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"done x 1", ""},
		step{"nak x 1", ""},
		step{"forget x 1", ""},
		step{"recv a 1", "a1"},
		step{"recv a 2", ""},
		step{"done a 2", ""}, // queued, not running
		step{"nak a 3", ""},
		step{"forget a 1", ""}, // running, not awaited
	)
	s.keys("a:1/1/0")
	s.run(
		step{"done a 1", "a2"},
		step{"done a 1", ""},
		step{"done a 2", ""},
	)
	s.empty()
}

func TestNoKeyStateOutlivesItsTasks(t *testing.T) {
	t.Parallel()
	g := New[int](Config{Limit: func(string) int { return 3 }})
	g.Acquired()
	g.Check(0, 0)
	keys := []string{"a", "b", "c", "d", "e"}
	var running []Item[int]
	seq := uint64(0)
	for range 10 {
		for _, k := range keys {
			seq++
			it := Item[int]{Key: k, Seq: seq, DSeq: seq, V: int(seq)}
			start, _, _ := g.Receive(it)
			for _, v := range start {
				running = append(running, Item[int]{Key: keys[(v-1)%len(keys)], Seq: uint64(v)})
			}
		}
	}
	for len(running) > 0 {
		r := running[0]
		running = running[1:]
		for _, v := range g.Done(r.Key, r.Seq, false) {
			running = append(running, Item[int]{Key: keys[(v-1)%len(keys)], Seq: uint64(v)})
		}
	}
	if len(g.keys) != 0 || g.Held() != 0 || g.queued != 0 || g.running != 0 {
		t.Fatalf("after all done: keys %v, held %d", g.Keys(), g.Held())
	}
}

func TestAwaitingAndQueued(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	s := opened(t, Config{Limit: func(string) int { return 2 }, Now: func() time.Time { return now }})
	s.run(
		step{"recv b 3", "b3"},
		step{"recv a 1", "a1"},
		step{"recv a 2", "a2"},
		step{"recv a 4", ""},
		step{"recv b 7", "b7"},
		step{"recv b 5", ""},
		step{"nak b 7", "b5"},
	)
	now = now.Add(time.Second)
	s.run(step{"nak a 1", "a4"}, step{"recv a 8", ""}, step{"recv b 6", ""})
	want := []Awaited{{"b", 7, time.Unix(1000, 0)}, {"a", 1, time.Unix(1001, 0)}}
	if got := s.g.Awaiting(); !slices.Equal(got, want) {
		t.Fatalf("Awaiting = %v, want %v", got, want)
	}
	if got := s.g.Queued(); !slices.Equal(got, []string{"b6", "a8"}) {
		t.Fatalf("Queued = %v", got)
	}
	if s.g.Held() != 6 {
		t.Fatalf("Held = %d, want 6", s.g.Held())
	}
	s.keys("a:1/2/1 b:1/2/1")
}

func TestNewUsesTheClock(t *testing.T) {
	t.Parallel()
	g := New[string](Config{})
	g.Acquired()
	g.Check(0, 0)
	g.Receive(Item[string]{Key: "a", Seq: 1, DSeq: 1})
	before := time.Now()
	g.Done("a", 1, true)
	if w := g.Awaiting(); len(w) != 1 || w[0].Since.Before(before) {
		t.Fatalf("Awaiting = %v, want one since %v", w, before)
	}
}
