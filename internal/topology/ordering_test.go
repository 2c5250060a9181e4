package topology_test

import (
	"testing"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

func TestValidatePartitions(t *testing.T) {
	for _, n := range []int{1, 2, 16, 256} {
		if err := topology.ValidatePartitions(n); err != nil {
			t.Errorf("%d: %v", n, err)
		}
	}
	for _, n := range []int{0, 3, 257, 512} {
		if err := topology.ValidatePartitions(n); err == nil {
			t.Errorf("%d partitions accepted", n)
		}
	}
}

// TestEnsureOrderedConsumer: a partition consumer runs one task at a time
// over its share of the slots, and bad specs are refused.
func TestEnsureOrderedConsumer(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	names := streams.MustNames("")
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	spec := topology.OrderedConsumerSpec{TaskType: "o.t", Partitions: 4, Partition: 1}
	c, err := topology.EnsureOrderedConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if cfg.MaxAckPending != 1 || len(cfg.FilterSubjects) != 64 || cfg.Metadata[topology.MetaPartition] != "1/4" {
		t.Fatalf("config: max ack pending %d, %d filters, partition %q", cfg.MaxAckPending, len(cfg.FilterSubjects), cfg.Metadata[topology.MetaPartition])
	}
	if cfg.FilterSubjects[0] != names.OrderedSubject("o.t", 1) || cfg.FilterSubjects[1] != names.OrderedSubject("o.t", 5) {
		t.Errorf("filters start %v, want slots 1, 5, …", cfg.FilterSubjects[:2])
	}
	// Again: the same consumer.
	if _, err := topology.EnsureOrderedConsumer(ctx, js, names, spec); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []topology.OrderedConsumerSpec{
		{TaskType: "", Partitions: 4},
		{TaskType: "o.t", Partitions: 3},
		{TaskType: "o.t", Partitions: 4, Partition: 4},
		{TaskType: "o.t", Partitions: 4, Partition: -1},
	} {
		if _, err := topology.EnsureOrderedConsumer(ctx, js, names, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestDelayTopology(t *testing.T) {
	n := streams.MustNames("")
	top := topology.DelayTopology(n)
	if top.DelayStream != n.DelayStream() || top.ScheduleStream != n.ScheduleStream() || top.Consumer.Durable != n.DelayConsumer() {
		t.Fatalf("%+v", top)
	}
	subj, _, _, err := top.Target(n.FiredSubject(streams.PriorityHigh, "a.b"))
	if err != nil || subj == "" {
		t.Fatalf("target of a fired subject: %q, %v", subj, err)
	}
	if _, _, _, err := top.Target("not.a.fired.subject"); err == nil {
		t.Error("a subject that is not a fired one has a target")
	}
}
