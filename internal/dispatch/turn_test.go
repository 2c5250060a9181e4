package dispatch

import (
	"testing"
	"time"
)

func TestTurn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var tn Turn
	// Short handlers add up to a turn.
	if tn.Ran(at(0), at(20*time.Microsecond)) {
		t.Fatal("yield after 20µs")
	}
	if tn.Ran(at(25*time.Microsecond), at(45*time.Microsecond)) {
		t.Fatal("yield after 45µs")
	}
	if !tn.Ran(at(50*time.Microsecond), at(70*time.Microsecond)) {
		t.Fatal("no yield after 70µs")
	}
	// The next turn starts with the next handler, not at the yield.
	if tn.Ran(at(time.Second), at(time.Second+10*time.Microsecond)) {
		t.Fatal("yield after a fresh 10µs")
	}
	// A long handler uses a turn by itself.
	tn = Turn{}
	if !tn.Ran(at(0), at(YieldAfter)) {
		t.Fatal("no yield after a handler of a whole turn")
	}
	// No handler ran: nothing counts.
	if tn.Ran(time.Time{}, time.Time{}) {
		t.Fatal("yield without a handler")
	}
}
