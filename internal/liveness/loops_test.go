package liveness

import (
	"testing"
	"time"
)

// A loop is stalled once it has been silent (and not busy) for longer than
// the limit, counting from the start before its first poll; a busy loop
// restarts the clock from when it was last seen busy.
func TestStalled(t *testing.T) {
	start := time.Unix(1000, 0)
	const limit = 10 * time.Second
	var h Loops
	l := h.Loop("c")
	if _, _, ok := h.Stalled(start.Add(limit), start, limit); ok {
		t.Fatal("stalled at the limit")
	}
	if name, since, ok := h.Stalled(start.Add(limit+time.Second), start, limit); !ok || name != "c" || since != limit+time.Second {
		t.Fatalf("never polled: %q %v %v", name, since, ok)
	}
	l.Poll(start.Add(5 * time.Second))
	l.Poll(start.Add(time.Second)) // earlier: ignored
	if got := l.LastPoll(); !got.Equal(start.Add(5 * time.Second)) {
		t.Fatalf("LastPoll = %v", got)
	}
	if _, _, ok := h.Stalled(start.Add(limit+time.Second), start, limit); ok {
		t.Fatal("stalled 6s after a poll")
	}
	l.SetBusy(true)
	if _, _, ok := h.Stalled(start.Add(time.Hour), start, limit); ok || !l.Busy() {
		t.Fatal("a busy loop is stalled")
	}
	l.SetBusy(false)
	if _, _, ok := h.Stalled(start.Add(time.Hour+limit), start, limit); ok {
		t.Fatal("stalled within the limit of last being seen busy")
	}
	if _, _, ok := h.Stalled(start.Add(time.Hour+limit+time.Second), start, limit); !ok {
		t.Fatal("not stalled past the limit of last being seen busy")
	}
}
