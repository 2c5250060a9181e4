package streams_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestPartitionNames(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	p2 := n.Partition(2)
	for _, c := range []struct{ got, want string }{
		{n.TaskStream(), "JETFLOW_TASKS"},
		{p2.TaskStream(), "JETFLOW_TASKS_P2"},
		{p2.TaskSubject(streams.PriorityHigh, "mail.send"), "jetflow.p2.task.high.mail.send"},
		{p2.OrderedSubject("orders", 7), "jetflow.p2.ord.orders.K.1.1.1.0.0.0.0.0"},
		{p2.LegacyOrderedSubject("orders", 7), "jetflow.p2.ord.orders.7"},
		{p2.FiredSubject(streams.PriorityLow, "a"), "jetflow.p2.fired.low.a"},
		{p2.FiredConsumer(), "tasks-p2"},
		{n.FiredConsumer(), "tasks"},
		{p2.DLQStream(), "JETFLOW_DLQ"}, // shared
		{p2.DelaySubject("x"), "jetflow.delay.x"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The base names parse every partition's subjects; a partition's names
	// only their own.
	for _, c := range []struct {
		subject string
		part    int
		ok      bool
	}{
		{"jetflow.task.high.mail.send", 0, true},
		{"jetflow.p2.task.high.mail.send", 2, true},
		{"jetflow.p63.task.low.a", 63, true},
		{"jetflow.p64.task.low.a", 0, false}, // beyond MaxPartitions
		{"jetflow.p02.task.low.a", 0, false}, // not canonical
		{"jetflow.p0.task.low.a", 0, false},
		{"jetflow.p.task.low.a", 0, false},
		{"jetflow.p2", 0, false},
		{"jetflow.p2.task.urgent.a", 2, false},
	} {
		p, typ, err := n.ParseTaskSubject(c.subject)
		if (err == nil) != c.ok {
			t.Errorf("ParseTaskSubject(%q): %v %q %v, want ok=%v", c.subject, p, typ, err, c.ok)
		}
		if c.ok && n.SubjectPartition(c.subject) != c.part {
			t.Errorf("SubjectPartition(%q) = %d, want %d", c.subject, n.SubjectPartition(c.subject), c.part)
		}
	}
	if _, _, err := p2.ParseTaskSubject("jetflow.task.high.a"); err == nil {
		t.Error("partition 2's names parsed a subject of partition 0")
	}
	if _, _, err := p2.ParseTaskSubject("jetflow.p3.task.high.a"); err == nil {
		t.Error("partition 2's names parsed a subject of partition 3")
	}
	if typ, slot, err := n.ParseOrderedSubject("jetflow.p5.ord.orders.9"); err != nil || typ != "orders" || slot != 9 {
		t.Errorf("ordered subject of partition 5: %q %d %v", typ, slot, err)
	}
	if p, typ, err := n.ParseScheduleTarget("jetflow.p5.fired.critical.a.b"); err != nil || p != streams.PriorityCritical || typ != "a.b" {
		t.Errorf("staging subject of partition 5: %v %q %v", p, typ, err)
	}
	for _, bad := range []int{-1, streams.MaxPartitions + 1} {
		if _, err := streams.StreamConfigs(streams.Config{Partitions: bad}); !errors.Is(err, streams.ErrPartitions) {
			t.Errorf("Partitions %d: %v", bad, err)
		}
	}
}

func TestEnsurePartitions(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	n := streams.MustNames("")
	for k := range 3 {
		cfg := streamConfig(t, ctx, js, n.Partition(k).TaskStream())
		if want := n.Partition(k).TaskSubject(streams.PriorityNormal, ">"); !slices.Contains(cfg.Subjects, want) {
			t.Errorf("partition %d subjects %v lack %s", k, cfg.Subjects, want)
		}
	}
	if got := streamConfig(t, ctx, js, n.TaskStream()).Metadata[streams.MetaPartitions]; got != "3" {
		t.Errorf("partition count in the metadata: %q", got)
	}
	if l, found, err := streams.DeployedLayout(ctx, js, n); l.Partitions != 3 || !found || err != nil {
		t.Errorf("DeployedLayout: %+v %v %v", l, found, err)
	}
	// A process that does not say keeps the deployed count.
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil || len(rep.Created)+len(rep.Updated) != 0 {
		t.Fatalf("Ensure without a count: %+v %v", rep, err)
	}
	if c, found, err := streams.DeployedConfig(ctx, js, ""); err != nil || !found || c.Partitions != 3 {
		t.Errorf("DeployedConfig: %+v %v %v", c, found, err)
	}
	// Fewer partitions is refused, and changes nothing.
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 2}); !errors.Is(err, streams.ErrDrift) {
		t.Errorf("Ensure with fewer partitions: %v", err)
	}
	if _, err := js.Stream(ctx, n.Partition(2).TaskStream()); err != nil {
		t.Errorf("partition 2 after a refused decrease: %v", err)
	}
	// More partitions adds streams.
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := streams.DeployedLayout(ctx, js, n); l.Partitions != 4 {
		t.Errorf("after growing to 4: %d", l.Partitions)
	}
	// Ordered tasks keep the partitions they had.
	if l, _, err := streams.DeployedLayout(ctx, js, n); err != nil || l != (streams.Layout{Partitions: 4, Ordered: 3}) {
		t.Errorf("layout after growing 3 → 4: %+v %v", l, err)
	}
	// A schedule aimed at a partition's staging subject fires into that
	// partition's task stream; one aimed at a partition the deployment
	// does not have is refused.
	due := time.Now().Add(100 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	sched := func(subject, target string) error {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("body"), Header: nats.Header{
			jetstream.ScheduleHeader: {"@at " + due}, jetstream.ScheduleTargetHeader: {target}}})
		return err
	}
	if err := sched("jetflow.sched.a", n.Partition(3).FiredSubject(streams.PriorityHigh, "mail")); err != nil {
		t.Fatal(err)
	}
	if err := sched("jetflow.sched.b", n.Partition(9).FiredSubject(streams.PriorityHigh, "mail")); err == nil {
		t.Error("a schedule aimed at partition 9 of 4 was stored")
	}
	waitMsgs(t, ctx, js, n.Partition(3).TaskStream(), n.Partition(3).TaskSubject(streams.PriorityHigh, "mail"), 1)
	// Advisories of every partition are captured.
	adv := streamConfig(t, ctx, js, n.AdvisoryStream())
	if !slices.Contains(adv.Subjects, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.JETFLOW_TASKS_P3.>") {
		t.Errorf("advisory subjects: %v", adv.Subjects)
	}
}

// TestPartitionsSpreadOverACluster: on a three-node cluster, replicated
// partitions get one leader per server (BalanceLeaders, run by the Ensure
// that created them), and single-replica partitions sit on the servers
// their tags name.
func TestPartitionsSpreadOverACluster(t *testing.T) {
	t.Parallel()
	c := testutil.RunCluster(t, 3, func(o *server.Options) { o.Tags = jwt.TagList{o.ServerName} })
	c.WaitJetStreamReady(t)
	_, js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	leaders, err := streams.Leaders(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range leaders {
		seen[l.Leader] = true
		if len(l.Peers) != 3 {
			t.Errorf("partition %d: peers %v", l.Partition, l.Peers)
		}
	}
	if len(leaders) != 3 || len(seen) != 3 {
		t.Errorf("leaders %+v: want one per server", leaders)
	}
	tags := []string{"jetflow-n3", "jetflow-n1", "jetflow-n2"}
	if _, err := streams.Ensure(ctx, js, streams.Config{Prefix: "tagged", Partitions: 3, PartitionTags: tags}); err != nil {
		t.Fatal(err)
	}
	placed, err := streams.Leaders(ctx, js, "tagged")
	if err != nil {
		t.Fatal(err)
	}
	for k, l := range placed {
		if l.Leader != tags[k] {
			t.Errorf("partition %d on %q, want %q", k, l.Leader, tags[k])
		}
	}
}

// TestLayoutOfGrownDeployment: a deployment grown from one partition keeps
// its ordered tasks in the first; a hostile layout in the metadata is
// refused.
func TestLayoutOfGrownDeployment(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	n := streams.MustNames("")
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if l, _, err := streams.DeployedLayout(ctx, js, n); err != nil || l != (streams.Layout{Partitions: 3, Ordered: 1}) {
		t.Errorf("layout after growing 1 → 3: %+v %v", l, err)
	}
	s, err := js.Stream(ctx, n.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Metadata[streams.MetaOrderedPartitions] = "9" // more than the partitions
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := streams.DeployedLayout(ctx, js, n); !errors.Is(err, streams.ErrPartitions) {
		t.Errorf("ordered partitions beyond the count: %v", err)
	}
}

// Ensure marks the deployments it creates as using this version's ordered
// slot subjects alone, and never marks an existing one: growing a
// deployment an earlier version created keeps its workers reading the old
// subjects too (decision 051).
func TestOrderedSubjectsMark(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	n := streams.MustNames("")
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if l, _, err := streams.DeployedLayout(ctx, js, n); err != nil || l.OldOrderedSubjects {
		t.Errorf("a deployment Ensure created: %+v %v; want it marked", l, err)
	}
	s, err := js.Stream(ctx, n.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	delete(cfg.Metadata, streams.MetaOrderedSubjects) // as an earlier version created it
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	l, _, err := streams.DeployedLayout(ctx, js, n)
	if err != nil || l != (streams.Layout{Partitions: 3, Ordered: 2, OldOrderedSubjects: true}) {
		t.Errorf("an earlier version's deployment grown 2 → 3: %+v %v; want it unmarked", l, err)
	}
}
