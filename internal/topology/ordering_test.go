package topology_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

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
	// A deployment this version created: one filter, the bits of the
	// partition.
	spec := topology.OrderedConsumerSpec{TaskType: "o.t", Partitions: 4, Partition: 1}
	c, err := topology.EnsureOrderedConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.FilterSubjects; !slices.Equal(got, []string{names.OrderedFilter("o.t", 4, 1)}) {
		t.Errorf("filters %v, want the bits filter alone", got)
	}
	// One an earlier version created: the old slot subjects too.
	spec.Legacy = true
	c, err = topology.EnsureOrderedConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if cfg.MaxAckPending != 1 || len(cfg.FilterSubjects) != 65 || cfg.Metadata[topology.MetaPartition] != "1/4" {
		t.Fatalf("config: max ack pending %d, %d filters, partition %q", cfg.MaxAckPending, len(cfg.FilterSubjects), cfg.Metadata[topology.MetaPartition])
	}
	if cfg.FilterSubjects[0] != names.OrderedFilter("o.t", 4, 1) ||
		cfg.FilterSubjects[1] != names.LegacyOrderedSubject("o.t", 1) || cfg.FilterSubjects[2] != names.LegacyOrderedSubject("o.t", 5) {
		t.Errorf("filters start %v, want the bits filter, then legacy slots 1, 5, …", cfg.FilterSubjects[:3])
	}
	// Again: the same consumer.
	if _, err := topology.EnsureOrderedConsumer(ctx, js, names, spec); err != nil {
		t.Fatal(err)
	}
	// A consumer of an earlier version (legacy slots only) gains the bits
	// filter: tasks enqueued after an upgrade reach it.
	legacy := cfg
	legacy.FilterSubjects = cfg.FilterSubjects[1:]
	if _, err := js.UpdateConsumer(ctx, names.TaskStream(), legacy); err != nil {
		t.Fatal(err)
	}
	c, err = topology.EnsureOrderedConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.FilterSubjects; len(got) != 65 || got[0] != names.OrderedFilter("o.t", 4, 1) {
		t.Errorf("an earlier version's consumer was not updated: %d filters, first %q", len(got), got[0])
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

// TestEnsureLaneConsumer: a lane reads its slots with one filter, many
// tasks in flight and a pinned priority group; its filter and the serial
// partitions' of the same type overlap, so the server refuses the second.
func TestEnsureLaneConsumer(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	names := streams.MustNames("")
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	spec := topology.LaneConsumerSpec{TaskType: "o.t", Lanes: 16, Lane: 6}
	c, err := topology.EnsureLaneConsumer(ctx, js, names, spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if cfg.Durable != "o_t-lane16-6" || cfg.MaxAckPending != topology.DefaultLaneMaxAckPending ||
		len(cfg.FilterSubjects) != 1 || cfg.FilterSubjects[0] != "jetflow.ord.o.t.K.0.1.1.0.>" ||
		cfg.PriorityPolicy != jetstream.PriorityPolicyPinned || len(cfg.PriorityGroups) != 1 || cfg.PriorityGroups[0] != topology.LaneGroup ||
		cfg.PinnedTTL != topology.DefaultLanePinnedTTL || cfg.Metadata[topology.MetaLane] != "6/16" {
		t.Fatalf("config: %+v", cfg)
	}
	if _, err := topology.EnsureLaneConsumer(ctx, js, names, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.EnsureOrderedConsumer(ctx, js, names, topology.OrderedConsumerSpec{TaskType: "o.t", Partitions: 16, Partition: 6}); err == nil {
		t.Error("a serial partition overlapping a lane was created")
	}
	for _, bad := range []topology.LaneConsumerSpec{
		{TaskType: "", Lanes: 4},
		{TaskType: "o.t", Lanes: 3},
		{TaskType: "o.t", Lanes: 4, Lane: 4},
		{TaskType: "o.t", Lanes: 4, Lane: -1},
	} {
		if _, err := topology.EnsureLaneConsumer(ctx, js, names, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
