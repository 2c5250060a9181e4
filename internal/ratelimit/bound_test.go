package ratelimit

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// TestPermitsPerWindowBound reserves, in one batch from an idle limit, more
// permits than one Interval holds (the horizon, at least 50 ms, is longer
// than these Intervals) and counts the due times in every closed window of
// one Interval: at most Limit + Burst, and the first window after the idle
// period holds exactly that many (Burst at once, then one every
// Interval/Limit up to its end). The guarantee ratelimit.Limit documents.
func TestPermitsPerWindowBound(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	_, js := testutil.JetStream(t, srv)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "LIMITS"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limit{
		{Limit: 4, Interval: 40 * time.Millisecond, Burst: 1},
		{Limit: 4, Interval: 40 * time.Millisecond, Burst: 2},
		{Limit: 8, Interval: 40 * time.Millisecond, Burst: 8},
		{Limit: 5, Interval: 40 * time.Millisecond, Burst: 3},
		{Limit: 3, Interval: 40 * time.Millisecond, Burst: 1}, // Interval/Limit rounded down
	} {
		l, err := l.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%d per %v burst %d", l.Limit, l.Interval, l.Burst)
		if l.Horizon() <= l.Interval {
			t.Fatalf("%s: horizon %v does not cover the interval", name, l.Horizon())
		}
		lim := NewLimiter(KeyType(fmt.Sprintf("t%d-%d", l.Limit, l.Burst)), l, kv, slog.New(slog.DiscardHandler), t.Context().Done())
		dues, _, err := lim.reserve(1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(dues) <= l.Limit+l.Burst {
			t.Fatalf("%s: %d permits reserved, want more than one interval holds", name, len(dues))
		}
		most := 0
		for i, from := range dues {
			n := 0
			for _, d := range dues[i:] {
				if !d.After(from.Add(l.Interval)) {
					n++
				}
			}
			if i == 0 && n != l.Limit+l.Burst {
				t.Errorf("%s: the first interval after an idle period holds %d permits, want Limit + Burst = %d", name, n, l.Limit+l.Burst)
			}
			most = max(most, n)
		}
		if most > l.Limit+l.Burst {
			t.Errorf("%s: an interval holds %d permits, more than Limit + Burst = %d", name, most, l.Limit+l.Burst)
		}
	}
}
