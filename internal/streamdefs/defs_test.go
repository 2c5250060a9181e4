package streamdefs

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// names is a deployment's names as the engine passes them.
type names struct{}

func (names) StateBucket() string    { return "S" }
func (names) EffectsBucket() string  { return "E" }
func (names) ErrorsBucket() string   { return "R" }
func (names) BreakerBucket() string  { return "B" }
func (names) UniqueBucket() string   { return "U" }
func (names) LimitsBucket() string   { return "L" }
func (names) OrderingBucket() string { return "O" }
func (names) WorkersBucket() string  { return "W" }
func (names) DelayConsumer() string  { return "movers" }
func (names) ScheduleStream() string { return "SCHED" }

func TestBucketConfigs(t *testing.T) {
	cfgs := BucketConfigs(names{}, jetstream.MemoryStorage, 3)
	seen := map[string]jetstream.KeyValueConfig{}
	for _, c := range cfgs {
		if c.Storage != jetstream.MemoryStorage || c.Replicas != 3 || c.Description == "" {
			t.Errorf("bucket %s: %+v", c.Bucket, c)
		}
		seen[c.Bucket] = c
	}
	for _, b := range []string{"S", "E", "R", "B", "U", "L", "O", "W"} {
		if _, ok := seen[b]; !ok {
			t.Errorf("no configuration for bucket %s", b)
		}
	}
	if seen["S"].TTL != DefaultStateTTL || seen["E"].TTL != DefaultEffectsTTL {
		t.Errorf("state TTL %v, effects TTL %v", seen["S"].TTL, seen["E"].TTL)
	}
}

func TestDelayConsumerConfig(t *testing.T) {
	c := DelayConsumerConfig(names{})
	// Unlimited deliveries: a delayed task is dead-lettered by its mover,
	// never dropped by the server.
	if c.Durable != "movers" || c.MaxDeliver != -1 || c.AckPolicy != jetstream.AckExplicitPolicy || c.MaxAckPending != FiredMaxAckPending {
		t.Fatalf("%+v", c)
	}
}

func TestValidatePartitionCount(t *testing.T) {
	for _, n := range []int{1, 2, MaxPartitions} {
		if err := ValidatePartitionCount(n); err != nil {
			t.Errorf("%d: %v", n, err)
		}
	}
	for _, n := range []int{0, -1, MaxPartitions + 1} {
		if err := ValidatePartitionCount(n); !errors.Is(err, ErrPartitions) {
			t.Errorf("%d: %v, want ErrPartitions", n, err)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	if PartitionOf("k", 1) != 0 || PartitionOf("k", 0) != 0 {
		t.Fatal("a count below 2 gives partition 0")
	}
	seen := map[int]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		p := PartitionOf(k, 3)
		if p < 0 || p > 2 || p != PartitionOf(k, 3) {
			t.Fatalf("PartitionOf(%q, 3) = %d", k, p)
		}
		seen[p] = true
	}
	if len(seen) != 3 {
		t.Errorf("12 keys over 3 partitions reached %v", seen)
	}
	// FNV-1a is part of the layout: keys must keep their partition across
	// versions (an ordered key's order depends on it).
	if got := PartitionOf("order-42", 16); got != PartitionOf("order-42", 16) || got != int(fnv1a("order-42")%16) {
		t.Errorf("PartitionOf is not FNV-1a: %d", got)
	}
}

func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func TestBackoff(t *testing.T) {
	b := Backoff()
	if d := b.NextBackOff(); d <= 0 {
		t.Fatalf("first backoff %v", d)
	}
}
