package dispatch

import (
	"slices"
	"testing"
)

type grants struct{ got []string }

func (g *grants) grant(v string, resumed bool) {
	if resumed {
		v += "*"
	}
	g.got = append(g.got, v)
}

func TestStrictOrderAndClassCaps(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](2, false, [Ranks]int{}, g.grant)
	a, b := NewClass(1), NewClass(2)
	s.Offer("low-a1", 3, a)
	s.Offer("low-a2", 3, a) // class a is full: waits
	s.Offer("crit-b1", 0, b)
	s.Offer("crit-b2", 0, b) // no slot left
	if want := []string{"low-a1", "crit-b1"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	s.Release("low-a1", a) // the critical task goes first, though a has room again
	if want := []string{"low-a1", "crit-b1", "crit-b2"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	if !s.Withdraw("low-a2", 3) || s.Withdraw("low-a2", 3) {
		t.Fatal("Withdraw of a waiting item")
	}
	if s.NumRunning() != 2 || s.NumWaiting(3) != 0 {
		t.Fatalf("running %d waiting %d", s.NumRunning(), s.NumWaiting(3))
	}
}

func TestLendAndResume(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](1, false, [Ranks]int{}, g.grant)
	c := NewClass(1)
	s.Offer("held", 2, c)
	s.Offer("next", 2, c)
	s.Lend(c) // held gives its slot to next, but stays running
	if want := []string{"held", "next"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	s.Resume("held", 2, c)
	s.Release("next", c)
	if want := []string{"held", "next", "held*"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	var seen []string
	s.Each(func(v string) { seen = append(seen, v) })
	if !slices.Equal(seen, []string{"held"}) {
		t.Fatalf("Each visited %v", seen)
	}
}

func TestWeightedServesEveryRank(t *testing.T) {
	t.Parallel()
	counts := map[string]int{}
	var s *Scheduler[string]
	c := NewClass(1 << 30)
	s = New[string](1, true, [Ranks]int{8, 4, 2, 1}, func(v string, _ bool) { counts[v]++ })
	// One slot, every rank always waiting: each release draws a rank.
	names := []string{"c", "h", "n", "l"}
	s.Offer("c", 0, c) // takes the slot
	for r := 1; r < Ranks; r++ {
		s.Offer(names[r], r, c)
	}
	for range 3000 {
		run := s.Running()[0]
		r := slices.Index(names, run)
		s.Offer(run, r, c) // back in line before the slot frees
		s.Release(run, c)
	}
	for _, n := range names {
		if counts[n] == 0 {
			t.Errorf("rank %s never served: %v", n, counts)
		}
	}
	if counts["c"] <= counts["l"] {
		t.Errorf("critical served %d times, low %d: want more critical", counts["c"], counts["l"])
	}
}

func TestReleaseTake(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](1, false, [Ranks]int{}, g.grant)
	c := NewClass(1)
	s.Offer("a", 2, c)
	s.Offer("b", 2, c)
	s.Offer("crit", 0, c)
	next, ok := s.ReleaseTake("a", c)
	if !ok || next != "crit" {
		t.Fatalf("ReleaseTake = %q, %v; want crit, true (strict priority)", next, ok)
	}
	if want := []string{"a"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v: a taken item is not passed to grant", g.got, want)
	}
	if s.NumRunning() != 1 || s.NumWaiting(2) != 1 {
		t.Fatalf("running %d waiting %d", s.NumRunning(), s.NumWaiting(2))
	}
	if next, ok := s.ReleaseTake("crit", c); !ok || next != "b" {
		t.Fatalf("ReleaseTake = %q, %v; want b, true", next, ok)
	}
	// A resumed item is granted to its own goroutine, not taken.
	s.Lend(c)           // b lends its slot…
	s.Offer("d", 2, c)  // …to d
	s.Resume("b", 0, c) // b wants it back
	s.Offer("e", 2, c)  // and e waits too
	if next, ok := s.ReleaseTake("d", c); ok {
		t.Fatalf("ReleaseTake = %q, true; want the resumed b granted, nothing taken", next)
	}
	if want := []string{"a", "d", "b*"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	if next, ok := s.ReleaseTake("b", c); !ok || next != "e" {
		t.Fatalf("ReleaseTake = %q, %v; want e, true", next, ok)
	}
	if next, ok := s.ReleaseTake("e", c); ok {
		t.Fatalf("ReleaseTake with nothing waiting = %q, true", next)
	}
}

func TestSwapYieldsToWaitingItems(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](2, false, [Ranks]int{}, g.grant)
	a, b := NewClass(2), NewClass(1)
	s.Offer("a1", 2, a)
	s.Offer("b1", 2, b)
	// Nothing waits: a1's slot goes straight to a2.
	if !s.Swap("a1", "a2", a) || s.Contended(a) {
		t.Fatal("Swap refused with nothing waiting")
	}
	var running []string
	s.Each(func(v string) { running = append(running, v) })
	slices.Sort(running)
	if !slices.Equal(running, []string{"a2", "b1"}) {
		t.Fatalf("running %v", running)
	}
	// b2 waits for b's cap: a's slot could not serve it, so a2 may pass
	// its slot on.
	s.Offer("b2", 0, b)
	if s.Contended(a) || !s.Swap("a2", "a3", a) {
		t.Fatal("Swap refused for a waiting item of a full class")
	}
	// A waiting item that a's slot could serve goes first.
	s.Offer("a4", 3, a)
	if !s.Contended(a) || s.Swap("a3", "a5", a) {
		t.Fatal("Swap took a slot a waiting item could use")
	}
	s.Release("b1", b) // b2 (critical) starts
	s.Offer("c1", 0, NewClass(1))
	if !s.Contended(a) || s.Swap("a3", "a5", a) {
		t.Fatal("Swap took a slot a waiting item of another class could use")
	}
	if got, ok := s.ReleaseTake("a3", a); !ok || got != "c1" {
		t.Fatalf("ReleaseTake = %v, %v; want c1", got, ok)
	}
}

// StartNew takes a free slot for an item that was never queued only when no
// waiting item could use it, and makes the item only then.
func TestStartNew(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](2, false, [Ranks]int{}, g.grant)
	a, b := NewClass(1), NewClass(2)
	made := 0
	mk := func(v string) func() string { return func() string { made++; return v } }
	if v, ok := s.StartNew(a, mk("direct-a1")); !ok || v != "direct-a1" {
		t.Fatalf("StartNew on a free scheduler: %q, %v", v, ok)
	}
	if _, ok := s.StartNew(a, mk("direct-a2")); ok {
		t.Fatal("StartNew past its class cap")
	}
	s.Offer("low-a3", 3, a) // class a is full: waits, but does not contend for b's slot
	if _, ok := s.StartNew(b, mk("direct-b1")); !ok {
		t.Fatal("StartNew refused a slot no waiting item can take")
	}
	if _, ok := s.StartNew(b, mk("direct-b2")); ok {
		t.Fatal("StartNew with no slot left")
	}
	s.Release("direct-b1", b) // one slot free, a still full: low-a3 keeps waiting
	s.Offer("crit-b3", 0, b)  // granted at once
	s.Offer("crit-b4", 0, b)  // waits for a slot
	s.Release("direct-a1", a) // low-a3 could take it but crit-b4 goes first
	if want := []string{"crit-b3", "crit-b4"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	s.Release("crit-b3", b) // low-a3 now runs
	s.Offer("low-a5", 3, a) // waits: a is full
	if _, ok := s.StartNew(b, mk("direct-b5")); ok {
		t.Fatal("StartNew with no slot free")
	}
	s.Release("crit-b4", b) // a free slot, but low-a5 waits for a's, not b's
	if _, ok := s.StartNew(b, mk("direct-b6")); !ok {
		t.Fatal("StartNew refused a slot the waiting item cannot take")
	}
	if made != 3 {
		t.Fatalf("made %d items, want the 3 started", made)
	}
	if s.NumRunning() != 2 {
		t.Fatalf("running %d, want 2", s.NumRunning())
	}
}

// LendTake hands the lent slot to the first offered item, for the caller
// to run; a resumed item is granted as usual.
func TestLendTake(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](1, false, [Ranks]int{}, g.grant)
	c := NewClass(1)
	s.Offer("held", 2, c)
	if _, ok := s.LendTake(c); ok {
		t.Fatal("LendTake with nothing waiting took an item")
	}
	s.Resume("held", 2, c) // takes the lent slot back at once
	s.Offer("next", 2, c)
	if want := []string{"held", "held*"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
	if next, ok := s.LendTake(c); !ok || next != "next" {
		t.Fatalf("LendTake = %q, %v; want next, true", next, ok)
	}
	if want := []string{"held", "held*"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v: a taken item is not passed to grant", g.got, want)
	}
	if s.NumRunning() != 2 {
		t.Fatalf("running %d, want the lending item and the one it lent to", s.NumRunning())
	}
}

// A waiting item that could take the free slot goes before StartNew.
func TestStartNewYieldsToWaiting(t *testing.T) {
	t.Parallel()
	g := &grants{}
	s := New[string](1, false, [Ranks]int{}, g.grant)
	c := NewClass(1)
	s.Offer("run", 2, c)
	s.Offer("wait", 0, c)
	if _, ok := s.StartNew(c, func() string { t.Fatal("made an item that cannot start"); return "" }); ok {
		t.Fatal("StartNew with no slot")
	}
	s.Lend(c) // the slot goes to the waiting item at once
	if _, ok := s.StartNew(c, func() string { return "direct" }); ok {
		t.Fatal("StartNew took the lent slot from the waiting item")
	}
	if want := []string{"run", "wait"}; !slices.Equal(g.got, want) {
		t.Fatalf("granted %v, want %v", g.got, want)
	}
}
