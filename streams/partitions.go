package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// Task partitions (decision 046). One task stream is one Raft group with
// one leader, which does all of its work: past one server's capacity, the
// tasks are spread over [Config.Partitions] task streams whose leaders the
// cluster places on different servers. Partition 0 is the layout of a
// deployment without partitions: stream "<PREFIX>_TASKS", subjects
// "<prefix>.task.…" and "<prefix>.ord.…", so `nats pub` on a work subject
// still reaches a worker. Partition k ≥ 1 is stream "<PREFIX>_TASKS_P<k>"
// with subjects "<prefix>.p<k>.task.…", "<prefix>.p<k>.ord.…" and staging
// subjects "<prefix>.p<k>.fired.…" in the one schedule stream. The client
// chooses the partition ([PartitionOf]): by ordering key, so that a key
// lives in one partition, else by task ID, so that a retried enqueue meets
// its first copy in the same stream's duplicate window. Everything else
// (schedules, delays, dead letters, buckets, runs) is shared.

// metaPartitions is the metadata key of the first task stream that records
// the deployment's partition count, when it is more than one, and
// metaOrderedPartitions the count ordered tasks are spread over: the count
// the deployment had before partitions were added to it, which never
// changes, so that a key stays in its partition (and in order) however
// many partitions are added.
const (
	metaPartitions        = "jetflow.partitions"
	metaOrderedPartitions = "jetflow.partitions.ordered"
)

// metaOrderedSubjects is the metadata key of the first task stream that
// marks a deployment created by a version publishing ordered tasks on
// the slot subjects of [Names.OrderedSubject] only (its value
// orderedSubjectsBits); a task stream without it was created by an
// earlier version, whose producers may still publish on the old ones
// ([Layout.OldOrderedSubjects]). [Ensure] sets it when it creates the
// stream and never on an existing one.
const (
	metaOrderedSubjects = "jetflow.ordered.subjects"
	orderedSubjectsBits = "bits"
)

// Layout is how a deployment's tasks are spread: Partitions task
// partitions, the first Ordered of them for ordered tasks (by key), and
// the others by task ID or by task type (By).
type Layout struct {
	Partitions int
	Ordered    int
	// By is what spreads unordered tasks: [PartitionByTask] (also when
	// empty) or [PartitionByType].
	By PartitionKey
	// OldOrderedSubjects is set for a deployment created by a version
	// that published ordered tasks on "<prefix>.ord.<type>.<slot>"
	// ([Names.LegacyOrderedSubject]): workers' ordered partitions then
	// read those subjects too, so that the tasks of producers not yet
	// upgraded run in order with the others, at a cost to the server on
	// every ack (decision 051). Read from the deployment, never set by a
	// client.
	OldOrderedSubjects bool
}

// Partition returns the names of task partition k: the task stream, work,
// slot and staging subjects, and the sourcing consumer of that partition.
// Every other name is the same in every partition. Partition 0 is n's
// base layout. It does not validate k.
func (n Names) Partition(k int) Names {
	n.part = k
	return n
}

// PartitionIndex returns the task partition n addresses ([Names.Partition]).
func (n Names) PartitionIndex() int { return n.part }

// Partitions returns the names of partitions 0 to count-1 (at least one).
func (n Names) Partitions(count int) []Names {
	out := make([]Names, max(count, 1))
	for k := range out {
		out[k] = n.Partition(k)
	}
	return out
}

// base is the subject root of n's task partition: "<prefix>" or
// "<prefix>.p<k>".
func (n Names) base() string { return n.prefix + n.partTok() }

// partTok is "" for partition 0, ".p<k>" otherwise.
func (n Names) partTok() string {
	if n.part == 0 {
		return ""
	}
	return ".p" + strconv.Itoa(n.part)
}

// cut returns what follows the subject root of subject ([Names.base]) and
// the partition it names. Names of partition 0 (a deployment's base names)
// accept the root of any partition, "<prefix>." or "<prefix>.p<k>." with
// k from 1 to [MaxPartitions]-1 written without leading zeros; the names
// of partition k ≥ 1 accept only their own.
func (n Names) cut(subject string) (rest string, part int, ok bool) {
	if n.part > 0 {
		rest, ok = strings.CutPrefix(subject, n.base()+".")
		return rest, n.part, ok
	}
	rest, ok = strings.CutPrefix(subject, n.prefix+".")
	if !ok || len(rest) < 3 || rest[0] != 'p' || rest[1] < '1' || rest[1] > '9' {
		return rest, 0, ok
	}
	tok, after, found := strings.Cut(rest[1:], ".")
	if !found {
		return rest, 0, true
	}
	k, err := strconv.Atoi(tok)
	if err != nil || k < 1 || k >= MaxPartitions || strconv.Itoa(k) != tok {
		return rest, 0, true
	}
	return after, k, true
}

// SubjectPartition returns the task partition of a work, slot or staging
// subject: 0 for a subject of the base layout or of no partition.
func (n Names) SubjectPartition(subject string) int {
	_, k, _ := n.cut(subject)
	return k
}

// layoutOf reads the layout of a first task stream's metadata: one
// partition when it has none; ordered tasks over every partition when it
// does not say.
func layoutOf(meta map[string]string) (Layout, error) {
	l := Layout{Partitions: 1, Ordered: 1, OldOrderedSubjects: meta[metaOrderedSubjects] != orderedSubjectsBits}
	read := func(key string, max int) (int, error) {
		v := meta[key]
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			return 0, fmt.Errorf("%w: metadata %s=%q on the task stream is not 1 to %d", ErrPartitions, key, v, max)
		}
		return n, nil
	}
	if _, ok := meta[metaPartitions]; !ok {
		return l, nil
	}
	var err error
	if l.Partitions, err = read(metaPartitions, MaxPartitions); err != nil {
		return Layout{}, err
	}
	l.Ordered = l.Partitions
	if _, ok := meta[metaOrderedPartitions]; ok {
		if l.Ordered, err = read(metaOrderedPartitions, l.Partitions); err != nil {
			return Layout{}, err
		}
	}
	if by, ok := meta[metaPartitionBy]; ok {
		if by != string(PartitionByTask) && by != string(PartitionByType) {
			return Layout{}, fmt.Errorf("%w: metadata %s=%q on the task stream is not %q or %q", ErrPartitions, metaPartitionBy, by, PartitionByTask, PartitionByType)
		}
		l.By = PartitionKey(by)
	}
	return l, nil
}

// DeployedLayout returns the layout of the deployment n names, from its
// first task stream's metadata: one partition when the stream has none,
// and found false (with one partition) when there is no task stream.
// Workers serve every partition it gives; clients spread new tasks over
// them.
func DeployedLayout(ctx context.Context, js jetstream.JetStream, n Names) (l Layout, found bool, err error) {
	l = Layout{Partitions: 1, Ordered: 1}
	s, err := js.Stream(ctx, n.Partition(0).TaskStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("streams: look up %s: %w", n.Partition(0).TaskStream(), err)
	}
	l, err = layoutOf(s.CachedInfo().Config.Metadata)
	return l, true, err
}

// deployedPartitions is the partition count of [DeployedLayout].
func deployedPartitions(ctx context.Context, js jetstream.JetStream, n Names) (count int, found bool, err error) {
	l, found, err := DeployedLayout(ctx, js, n)
	return l.Partitions, found, err
}

// resolvePartitions sets c.Partitions to the deployed count when it is 0
// (1 for a new deployment). A count below the deployed one is recorded as
// drift and the deployed count kept: the partitions it would leave out
// may still hold tasks, and removing them is a migration
// (docs/partitions.md), not an update.
func (c *Config) resolvePartitions(ctx context.Context, js jetstream.JetStream, rep *Report) error {
	n, err := NewNames(c.Prefix)
	if err != nil {
		return err
	}
	var (
		l     Layout
		found bool
	)
	err = streamdefs.RetryTransient(ctx, func() error {
		var err error
		l, found, err = DeployedLayout(ctx, js, n)
		return err
	})
	if err != nil {
		return err
	}
	count := l.Partitions
	// Ordered tasks stay over the partitions they had (a key keeps its
	// partition); a new deployment spreads them over all.
	c.ordered = l.Ordered
	if !found {
		c.ordered = 0
	}
	c.resolvePartitionBy(n, l, found, rep) // typepartitions.go
	if c.Partitions == 0 {
		c.Partitions = count
		return nil
	}
	if found && c.Partitions < count {
		rep.Drift = append(rep.Drift, Drift{Resource: n.TaskStream(), Field: "Partitions",
			Want: strconv.Itoa(c.Partitions), Have: strconv.Itoa(count),
			Fix: "partitions are not removed in place: drain the partitions above the new count first (docs/partitions.md)"})
		c.Partitions = count
	}
	return nil
}

// firedSubjects returns the staging subjects of every partition, one
// wildcard per priority.
func firedSubjects(n Names, partitions int) []string {
	var out []string
	for _, p := range n.Partitions(partitions) {
		out = append(out, prioritySubjects(p.base()+".fired.")...)
	}
	return out
}

// advisorySubjects returns the max-delivery and termination advisory
// subjects of every partition's task stream.
func advisorySubjects(n Names, partitions int) []string {
	var out []string
	for _, p := range n.Partitions(partitions) {
		out = append(out,
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+p.TaskStream()+".>",
			"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+p.TaskStream()+".>")
	}
	return out
}

// layoutMetadata is the metadata of the first task stream of a deployment
// of c: that its ordered tasks use this version's slot subjects (kept
// only when Ensure creates the stream) and, with c.Partitions > 1, the
// count, the count ordered tasks are spread over (the deployed one, else
// all), and the spread when it is by type.
func layoutMetadata(c Config) map[string]string {
	meta := map[string]string{metaOrderedSubjects: orderedSubjectsBits}
	if c.Partitions < 2 {
		return meta
	}
	ordered := c.ordered
	if ordered < 1 || ordered > c.Partitions {
		ordered = c.Partitions
	}
	meta[metaPartitions], meta[metaOrderedPartitions] = strconv.Itoa(c.Partitions), strconv.Itoa(ordered)
	if c.PartitionBy == PartitionByType {
		meta[metaPartitionBy] = string(PartitionByType)
	}
	return meta
}
