package workflow

import (
	"fmt"
	"testing"
)

// A List scan holds at most twice its limit of decoded documents, however
// many runs it reads, and still answers the newest runs in order.
func TestListHoldsABoundedNumberOfDocuments(t *testing.T) {
	l := listed{at: make(map[string]*listEntry), limit: 5}
	for i := range 1000 {
		id := fmt.Sprintf("run-%04d", i)
		l.add(id, uint64(i+1), &Run{ID: id}, true)
	}
	if l.peak > 2*l.limit {
		t.Errorf("held up to %d documents, want at most %d", l.peak, 2*l.limit)
	}
	newest := l.newest()
	if len(newest) != 1000 {
		t.Fatalf("%d runs listed, want 1000", len(newest))
	}
	for i, e := range newest[:5] {
		if want := fmt.Sprintf("run-%04d", 999-i); e.id != want || e.run == nil {
			t.Errorf("newest[%d] = %s (document held: %v), want %s with its document", i, e.id, e.run != nil, want)
		}
	}
	// Revisions that do not match remove their runs; the run that becomes
	// the newest lost its document to trim, and List reads it again.
	for i := 999; i > 994; i-- {
		l.add(fmt.Sprintf("run-%04d", i), uint64(2000-i), nil, false)
	}
	if e := l.newest()[0]; e.id != "run-0994" || e.run != nil {
		t.Errorf("newest = %s (document held: %v), want run-0994 without its document", e.id, e.run != nil)
	}
}
