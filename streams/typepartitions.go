package streams

import (
	"fmt"
	"hash/fnv"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Partitions by task type (decision 047). Every consumer of a work-queue
// stream costs every acknowledgement on it (decision 033), and a worker
// creates one per (type, priority): a deployment of a hundred types drains
// at a third of one type's rate on one stream. Spread by type, partition k
// ≥ 1 holds only the consumers of the types that hash to it, so each
// stream has a share of them. Partition 0 stays the catch-all: it keeps a
// consumer for every type and priority, because what does not know the
// layout publishes there (`nats pub` on a work subject, cron schedules,
// replays, workflow steps, hand-backs, a client that cannot read the
// layout).

// PartitionKey says what spreads a deployment's tasks over its partitions
// ([Config.PartitionBy]).
type PartitionKey string

const (
	// PartitionByTask spreads tasks by task ID (ordered tasks by key):
	// every partition serves every type, so one busy type uses them all.
	// The default.
	PartitionByTask PartitionKey = "task"
	// PartitionByType spreads tasks by task type (ordered tasks still by
	// key): each type lives in one partition besides partition 0, so each
	// stream holds the consumers of a share of the types.
	PartitionByType PartitionKey = "type"
)

// metaPartitionBy is the metadata key of the first task stream that
// records a deployment partitioned by type ([PartitionByType]).
const metaPartitionBy = "jetflow.partitions.by"

// validatePartitionKey checks a [PartitionKey]: "" (the deployed one), task
// or type.
func validatePartitionKey(k PartitionKey) error {
	switch k {
	case "", PartitionByTask, PartitionByType:
		return nil
	}
	return fmt.Errorf("%w: partition by %q: want %q or %q", ErrPartitions, k, PartitionByTask, PartitionByType)
}

// ByType reports whether l spreads tasks by type.
func (l Layout) ByType() bool { return l.By == PartitionByType && l.Partitions > 1 }

// TaskPartition returns the partition a client puts an unordered task with
// ID id in when l spreads by task ID (the default): a hash of the ID over
// the partitions, so that a retried enqueue meets its first copy in the
// same stream's duplicate window. It is -1 when l spreads by type.
func (l Layout) TaskPartition(id string) int {
	if l.ByType() {
		return -1
	}
	return streamdefs.PartitionOf(id, l.Partitions)
}

// TypePartition returns the partition a client puts an unordered task of
// taskType in when l spreads by type: partitions 1 to Partitions-1 by a
// consistent hash of the type (adding partitions moves a type only to an
// added one), or 0 with fewer than two partitions. It is -1 when l spreads
// by task ID.
func (l Layout) TypePartition(taskType string) int {
	if !l.ByType() {
		return -1
	}
	return typeHome(taskType, l.Partitions)
}

// Serves reports whether partition k of l holds the consumers of
// taskType: every partition does when l spreads by task ID; partition 0
// and the type's partition at every count from Ordered (the count before
// partitions were first added) to Partitions do when it spreads by type,
// so that the tasks a client with a layout read before partitions were
// added puts there are served.
func (l Layout) Serves(k int, taskType string) bool {
	if k == 0 || !l.ByType() {
		return true
	}
	for c := max(l.Ordered, 2); c <= l.Partitions; c++ {
		if typeHome(taskType, c) == k {
			return true
		}
	}
	return false
}

// ServedBy returns the partitions of l that hold the consumers of
// taskType, in order ([Layout.Serves]).
func (l Layout) ServedBy(taskType string) []int {
	var out []int
	for k := range max(l.Partitions, 1) {
		if l.Serves(k, taskType) {
			out = append(out, k)
		}
	}
	return out
}

// typeHome is the partition of taskType among count partitions spread by
// type: 1 + the jump hash of the type over count-1 buckets.
func typeHome(taskType string, count int) int {
	if count < 2 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(taskType))
	return 1 + jumpHash(h.Sum64(), count-1)
}

// jumpHash is Lamping and Veach's jump consistent hash: key's bucket among
// buckets, which changes, when buckets grows, only to one of the added
// buckets.
func jumpHash(key uint64, buckets int) int {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// resolvePartitionBy sets c.PartitionBy to the spread of deployment l
// (found: it exists). The spread is chosen with the second partition:
// until then c's is taken (by task when c gives none); after, a different
// one is recorded as drift and the deployed one kept, since workers
// spreading by type keep no consumers of a type outside its partitions,
// and the tasks that the other spread put there would wait.
func (c *Config) resolvePartitionBy(n Names, l Layout, found bool, rep *Report) {
	if !found || l.Partitions < 2 {
		if c.PartitionBy == "" {
			c.PartitionBy = PartitionByTask
		}
		return
	}
	deployed := l.By
	if deployed == "" {
		deployed = PartitionByTask
	}
	if c.PartitionBy != "" && c.PartitionBy != deployed {
		rep.Drift = append(rep.Drift, Drift{Resource: n.TaskStream(), Field: "PartitionBy",
			Want: string(c.PartitionBy), Have: string(deployed),
			Fix: "the spread of a partitioned deployment does not change in place: drain it into a new deployment (docs/partitions.md)"})
	}
	c.PartitionBy = deployed
}
