package fleet

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRefusalsCountAndForgetTheOldest(t *testing.T) {
	var s Refusals
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Note("a", 2, t0)
	s.Note("a", 2, t0.Add(time.Second))
	s.Note("b", 3, t0.Add(2*time.Second))
	got := s.Snapshot()
	if len(got) != 2 || got[0].Type != "b" || got[1].Count != 2 || !got[1].Last.Equal(t0.Add(time.Second)) {
		t.Fatalf("snapshot %+v, want b then a counted twice", got)
	}
	for i := range MaxRefused {
		s.Note(fmt.Sprintf("t%d", i), 1, t0.Add(time.Duration(10+i)*time.Second))
	}
	got = s.Snapshot()
	if len(got) != MaxRefused {
		t.Fatalf("%d refusals kept, want %d", len(got), MaxRefused)
	}
	for _, r := range got {
		if r.Type == "a" || r.Type == "b" {
			t.Fatalf("the oldest refusals were kept: %+v", r)
		}
	}
}

func TestServedRereadsWhenStaleOrUnserved(t *testing.T) {
	var s Served
	reads := 0
	listing := &Listing{Records: []Record{{Types: []Serves{{Type: "a", Versions: []int{1, 2}}}}}}
	list := func() (*Listing, error) { reads++; return listing, nil }
	if ok, err := s.Accepts("a", 2, time.Hour, list); !ok || err != nil || reads != 1 {
		t.Fatalf("accepts %v, %v after %d reads", ok, err, reads)
	}
	// Fresh and served: no read.
	if ok, _ := s.Accepts("a", 1, time.Hour, list); !ok || reads != 1 {
		t.Fatalf("accepts %v after %d reads, want the kept read", ok, reads)
	}
	// Unserved, read under a second ago: the kept read answers.
	if ok, _ := s.Accepts("a", 3, time.Hour, list); ok || reads != 1 {
		t.Fatalf("accepts %v after %d reads, want false without a read", ok, reads)
	}
	// Stale: read again.
	if _, err := s.Accepts("a", 1, 0, list); err != nil || reads != 2 {
		t.Fatalf("%d reads, want a second one", reads)
	}
	boom := errors.New("registry down")
	if ok, err := s.Accepts("a", 1, 0, func() (*Listing, error) { return nil, boom }); ok || !errors.Is(err, boom) {
		t.Fatalf("accepts %v, %v; want false and %v", ok, err, boom)
	}
}
