package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// Config declares the topology. Every field has a usable zero value.
type Config struct {
	// Prefix is the subject prefix and, upper-cased, the stream name prefix.
	// Default "jetflow": subjects "jetflow.task.…", stream "JETFLOW_TASKS".
	Prefix string
	// Replicas is the replica count of every stream: 1 on a single server, 3
	// on a production cluster. Default 1.
	Replicas int
	// Storage is the storage of every stream. Default file storage.
	Storage jetstream.StorageType
	// DuplicateWindow is how long the task stream remembers task IDs to drop a
	// second enqueue of the same ID. Default 2 minutes.
	DuplicateWindow time.Duration
	// MaxTaskBytes caps the task stream's size in bytes. At the cap the
	// stream refuses new tasks (discard-new) and keeps every waiting one:
	// an enqueue fails with an error the client reports as
	// framework.ErrQueueFull, and fired delayed tasks and cron ticks wait in
	// the schedule stream until there is room (decision 040). Default 0:
	// unlimited.
	MaxTaskBytes int64
	// DLQMaxAge is how long dead letters are kept. Default 30 days.
	DLQMaxAge time.Duration
	// AdvisoryMaxAge is how long captured advisories are kept. Default 7 days.
	AdvisoryMaxAge time.Duration
	// AllowTaskPurge leaves purges of the task stream possible. Default
	// false: the task stream denies purges (DenyPurge), so no credential,
	// not even one granted "$JS.API.STREAM.PURGE.<task stream>", can empty
	// it, and the server never lets that setting be undone on an existing
	// stream. jetflow itself never purges the task stream; set it for test
	// and benchmark setups that reset subjects between runs. Rollups are
	// denied either way.
	AllowTaskPurge bool
	// Partitions is the number of task streams the tasks are spread over,
	// 1 to [MaxPartitions] (decision 046): on a cluster, each partition's
	// leader does its share of the work, so N partitions whose leaders sit
	// on different servers drain up to N times faster than one. Default
	// 0: the count deployed (1 for a new deployment). [Ensure] adds
	// partitions to a deployment; it does not remove them (docs/partitions.md).
	Partitions int
	// PartitionTags places the task streams of the partitions on the
	// servers tagged for them (server_tags in the servers' configuration):
	// partition k on the servers with the tag PartitionTags[k mod
	// len(PartitionTags)]. Without tags the cluster places them, which
	// may put every single-replica stream on one server; replicated
	// streams are spread by leader instead ([BalanceLeaders]). Default
	// none.
	PartitionTags []string
	// PartitionBy is what spreads tasks over the partitions:
	// [PartitionByTask] (by task ID, so one busy type uses every
	// partition) or [PartitionByType] (by type, so each task stream holds
	// the consumers of a share of the types: for deployments of many
	// types, decision 047). It is chosen with the second partition and
	// does not change after. Default "": the deployed one, else by task.
	PartitionBy PartitionKey

	// ordered is the deployed count ordered tasks are spread over, read by
	// Ensure (0: all partitions, a new deployment).
	ordered int
}

// Defaults used by [Config] fields left at their zero value, and the bound
// of [Config.Partitions].
const (
	// DefaultPrefix is the subject prefix used when none is configured.
	DefaultPrefix          = "jetflow"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultDLQMaxAge       = 30 * 24 * time.Hour
	DefaultAdvisoryMaxAge  = 7 * 24 * time.Hour
	// MaxPartitions (64) bounds Config.Partitions.
	MaxPartitions = streamdefs.MaxPartitions
)

func (c Config) withDefaults() (Config, Names, error) {
	names, err := NewNames(c.Prefix)
	if err != nil {
		return c, names, err
	}
	c.Prefix = names.Prefix()
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Replicas > 5 {
		return c, names, fmt.Errorf("streams: replicas %d: JetStream allows at most 5", c.Replicas)
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.DLQMaxAge <= 0 {
		c.DLQMaxAge = DefaultDLQMaxAge
	}
	if c.AdvisoryMaxAge <= 0 {
		c.AdvisoryMaxAge = DefaultAdvisoryMaxAge
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if err := streamdefs.ValidatePartitionCount(c.Partitions); err != nil {
		return c, names, err
	}
	if err := validatePartitionKey(c.PartitionBy); err != nil {
		return c, names, err
	}
	return c, names, nil
}

// StreamConfigs returns the JetStream configurations [Ensure] applies: the
// task stream (of partition 0), the schedule stream, the dead-letter
// stream, the advisory stream, the stream of workflow runs, the delay
// stream and the task streams of partitions 1 to [Config.Partitions]-1, in
// that order. It is exported so operators can review or reproduce them.
func StreamConfigs(c Config) ([]jetstream.StreamConfig, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	tasks := taskStreamConfig(c, n)
	sched := jetstream.StreamConfig{
		Name:        n.ScheduleStream(),
		Description: "jetflow schedules: one-shot delays, cron schedules, and fired schedules until the task stream sourced them",
		Subjects:    append([]string{n.ScheduleSubject(">"), n.CronSubject(">")}, firedSubjects(n, c.Partitions)...),
		// Work queue: the task stream's sourcing consumer acknowledges a
		// fired message once it is stored there, which deletes it here;
		// schedules themselves are never consumed (the consumer's filter
		// is the staging subjects only).
		Retention: jetstream.WorkQueuePolicy,
		// Message schedules require DiscardOld; with no limits set nothing
		// is ever discarded.
		Discard:           jetstream.DiscardOld,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		Duplicates:        c.DuplicateWindow,
		AllowMsgSchedules: true,
		AllowDirect:       true,
	}
	dlq := jetstream.StreamConfig{
		Name:        n.DLQStream(),
		Description: "jetflow dead letters: tasks that failed for good, with reason and history in headers",
		Subjects:    []string{n.prefix + ".dlq.>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.DLQMaxAge,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		AllowDirect: true,
	}
	adv := jetstream.StreamConfig{
		Name:        n.AdvisoryStream(),
		Description: "jetflow: captured max-delivery and termination advisories of the task stream",
		Subjects:    advisorySubjects(n, c.Partitions),
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.AdvisoryMaxAge,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}
	runs := jetstream.StreamConfig{
		Name:        n.RunStream(),
		Description: "jetflow workflow runs: the state document of each run; a new revision replaces the previous one, a final one expires by message TTL",
		Subjects:    []string{n.RunSubject(">")},
		Retention:   jetstream.LimitsPolicy,
		// One revision per run: the server drops the superseded one when
		// a new one is stored, without a delete request (decision 023).
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		// Writers replace documents by expected last subject sequence,
		// never by roll-up; purges stay possible for operators.
		AllowRollup: false,
	}
	// The task stream comes first: an existing one gives up the run
	// subjects before the run stream claims them.
	out := []jetstream.StreamConfig{tasks, sched, dlq, adv, runs, delayStreamConfig(c, n)}
	for k := 1; k < c.Partitions; k++ {
		out = append(out, taskStreamConfig(c, n.Partition(k)))
	}
	return out, nil
}

// taskStreamConfig returns the configuration of the task stream of n's
// partition.
func taskStreamConfig(c Config, n Names) jetstream.StreamConfig {
	maxBytes := c.MaxTaskBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	tasks := jetstream.StreamConfig{
		Name:        n.TaskStream(),
		Description: "jetflow tasks: work subjects and ordered tasks; fired schedules are sourced from " + n.ScheduleStream(),
		// One wildcard per priority rather than "<prefix>.task.>": a
		// publish on a subject with no valid priority (where no consumer
		// would ever read it) is refused at the producer instead of
		// stranding in the stream.
		// (Workflow run documents moved to their own stream, decision
		// 023.)
		Subjects: append(prioritySubjects(n.base()+".task."),
			// Ordered tasks: slot subjects consumed by partition consumers
			// with MaxAckPending 1 (ordering.go).
			n.OrderedWildcard(),
		),
		Retention: jetstream.WorkQueuePolicy,
		// Full means full: a new task is refused, no waiting task is
		// evicted, so one producer's flood cannot discard another's work
		// (decision 040; the stream holds no schedules, which would
		// require discard-old).
		Discard:    jetstream.DiscardNew,
		MaxBytes:   maxBytes,
		Storage:    c.Storage,
		Replicas:   c.Replicas,
		Duplicates: c.DuplicateWindow,
		// No message TTL and no atomic batches: jetflow uses neither on
		// task subjects, and a task with Nats-TTL would vanish unrun while
		// its ID still counts as a duplicate (decision 040).
		AllowMsgTTL:        false,
		AllowAtomicPublish: false,
		AllowDirect:        true,
		// No message schedules here (they would force rollups and purges
		// on): nobody who may publish a task can delete others' tasks with
		// a Nats-Rollup header, and nobody can purge the stream.
		AllowRollup: false,
		DenyPurge:   !c.AllowTaskPurge,
		Sources: []*jetstream.StreamSource{{
			Name:              n.ScheduleStream(),
			SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: n.FiredWildcard(), Destination: n.TaskWildcard()}},
			Consumer:          &jetstream.StreamConsumerSource{Name: n.FiredConsumer(), DeliverSubject: n.FiredDeliverSubject()},
		}},
	}
	if len(c.PartitionTags) > 0 {
		tasks.Placement = &jetstream.Placement{Tags: []string{c.PartitionTags[n.part%len(c.PartitionTags)]}}
	}
	if n.part == 0 {
		tasks.Metadata = layoutMetadata(c) // partitions.go
	}
	if n.part > 0 {
		tasks.Description = fmt.Sprintf("jetflow tasks, partition %d of %d: work subjects and ordered tasks; fired schedules are sourced from %s",
			n.part, c.Partitions, n.ScheduleStream())
	}
	return tasks
}

// prioritySubjects returns one wildcard per priority under prefix, for
// example "jetflow.task.critical.>".
func prioritySubjects(prefix string) []string {
	out := make([]string, 0, len(Priorities))
	for _, p := range []Priority{PriorityCritical, PriorityHigh, PriorityNormal, PriorityLow} {
		out = append(out, prefix+p.String()+".>")
	}
	return out
}

// Report says what [Ensure] did to each resource.
type Report struct {
	// Created lists resources that did not exist and were created.
	Created []string
	// Updated lists resources whose configuration was changed in place;
	// Changed lists each setting changed, with the value it had (Have) and
	// the one it has now (Want): the migrations Ensure made.
	Updated []string
	Changed []Drift
	// Unchanged lists resources that already matched.
	Unchanged []string
	// Drift lists differences that cannot be changed in place. When it is
	// non-empty Ensure also returns a *[DriftError].
	Drift []Drift
	// Weaker lists settings of existing resources that are less strict
	// than jetflow's and that the server cannot tighten in place: the
	// deployment works as before, without that protection, so they do not
	// fail Ensure. Each says how to tighten it (for example message TTL on
	// a task stream created by an earlier jetflow: decision 040).
	Weaker []Drift
	// BucketsCreated and BucketsUnchanged list the KV buckets (see
	// [Ensure]) created, and those that existed already (their settings
	// are kept).
	BucketsCreated, BucketsUnchanged []string
}

// Drift is one difference between the wanted and the existing
// configuration of a resource. In [Report].Drift and Weaker, and in
// [Plan].Drift and Weaker, it is one JetStream cannot update in place, and
// Fix says what an operator runs to resolve it; in Report.Changed and
// Plan.Change it is one Ensure changes in place, and Fix is "".
type Drift struct {
	Resource string // stream, consumer ("STREAM/consumer") or bucket name
	Field    string // configuration field
	Want     string // wanted value
	Have     string // existing value
	Fix      string `json:",omitempty"` // what to run, when Ensure cannot
}

// String describes the difference on one line.
func (d Drift) String() string {
	return fmt.Sprintf("%s: %s is %s, want %s", d.Resource, d.Field, d.Have, d.Want)
}

// DriftError is returned by [Ensure] when an existing resource differs in a way
// it cannot fix. It wraps [ErrDrift]. Fix it by hand (for example delete and
// recreate the stream after draining it) or change the [Config].
type DriftError struct {
	// Drift lists every difference found.
	Drift []Drift
}

// Error lists the differences.
func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drift))
	for i, d := range e.Drift {
		parts[i] = d.String()
	}
	return "streams: configuration drift that cannot be updated in place: " + strings.Join(parts, "; ")
}

// Unwrap returns [ErrDrift].
func (e *DriftError) Unwrap() error { return ErrDrift }

// Ensure creates the task, schedule, dead-letter, advisory, run and delay streams of c,
// the schedule stream's sourcing consumer ([Names.FiredConsumer]) and the
// delay movers' consumer ([Names.DelayConsumer]), or
// updates them to match c, and creates the KV buckets of c that do not
// exist: task state, the effects ledger, failed attempts, circuit
// breakers, unique-task reservations, rate limits, blocked ordered tasks
// and the worker registry ([Names.StateBucket] and the others). It returns once the task stream sources the schedule
// stream, so delayed tasks fire from then on. It is idempotent and safe to
// call from many processes at once. Fields Ensure does not manage (for
// example limits an operator added) are kept. Differences that cannot be
// updated in place (retention, storage, message TTL allowed where jetflow
// does not want it, a task stream created before the schedule stream
// existed: see [MigrateTaskStream]) are reported in
// Report.Drift and as a *[DriftError]; what it changed in place is in
// Report.Changed. [Check] tells the same without changing anything. Errors of a cluster
// that is still forming ("no suitable peers", "temporarily unavailable",
// timeouts) are retried until ctx ends, or for 30 s when ctx has
// no deadline.
func Ensure(ctx context.Context, js jetstream.JetStream, c Config) (*Report, error) {
	return ensure(ctx, js, c, true)
}

// ensure is [Ensure] when apply is true. When it is false it changes
// nothing: it reads every resource and records in the report what Ensure
// would create and change ([Check]).
func ensure(ctx context.Context, js jetstream.JetStream, c Config, apply bool) (*Report, error) {
	if _, _, err := c.withDefaults(); err != nil {
		return nil, err
	}
	rep := &Report{}
	if err := c.resolvePartitions(ctx, js, rep); err != nil {
		return rep, err
	}
	cfgs, err := StreamConfigs(c)
	if err != nil {
		return nil, err
	}
	c, n, _ := c.withDefaults()
	// A cluster that is still forming (or electing its meta leader) answers
	// "no suitable peers" or "temporarily unavailable" for a moment: retry
	// those until ctx ends (at most streamdefs.RetryFor when ctx has no
	// deadline).
	step := func(f func(one *Report) error) error {
		var one *Report
		err := streamdefs.RetryTransient(ctx, func() error {
			one = &Report{}
			return f(one)
		})
		rep.Created = append(rep.Created, one.Created...)
		rep.Updated = append(rep.Updated, one.Updated...)
		rep.Changed = append(rep.Changed, one.Changed...)
		rep.Unchanged = append(rep.Unchanged, one.Unchanged...)
		rep.Drift = append(rep.Drift, one.Drift...)
		rep.Weaker = append(rep.Weaker, one.Weaker...)
		return err
	}
	tasks, sched, rest := cfgs[0], cfgs[1], cfgs[2:]
	// A task stream created before the schedule stream holds the delayed
	// tasks and cron schedules and cannot be changed into the new one (the
	// server neither turns schedules off nor lets a stream with schedules
	// source another): report it and leave it alone; MigrateTaskStream
	// recreates it.
	old := false
	if err := step(func(*Report) error {
		s, err := js.Stream(ctx, tasks.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("streams: look up %s: %w", tasks.Name, err)
		}
		old = s.CachedInfo().Config.AllowMsgSchedules
		return nil
	}); err != nil {
		return rep, err
	}
	if old {
		rep.Drift = append(rep.Drift, Drift{Resource: tasks.Name, Field: "AllowMsgSchedules", Want: "false (schedules in " + sched.Name +
			"; recreate the task stream with streams.MigrateTaskStream)", Have: "true", Fix: n.fix(tasks.Name, "AllowMsgSchedules")})
	} else {
		if err := step(func(one *Report) error { return ensureStream(ctx, js, n, sched, one, apply) }); err != nil {
			return rep, err
		}
		for _, p := range n.Partitions(c.Partitions) {
			if err := step(func(one *Report) error { return ensureFiredConsumer(ctx, js, c, p, one, apply) }); err != nil {
				return rep, err
			}
		}
		rest = append([]jetstream.StreamConfig{tasks}, rest...)
	}
	for _, want := range rest {
		if old && want.Name == n.RunStream() {
			// The old task stream still holds the run subjects; the run
			// stream is created once MigrateTaskStream recreated it.
			continue
		}
		if err := step(func(one *Report) error { return ensureStream(ctx, js, n, want, one, apply) }); err != nil {
			return rep, err
		}
	}
	if err := step(func(one *Report) error { return ensureDelayConsumer(ctx, js, n, one, apply) }); err != nil {
		return rep, err
	}
	if !old && apply {
		for _, p := range n.Partitions(c.Partitions) {
			if err := waitSourcing(ctx, js, p.TaskStream(), sched.Name); err != nil {
				return rep, err
			}
		}
		if err := balanceCreated(ctx, js, c, rep); err != nil { // leaders.go
			return rep, err
		}
	}
	if !old && !apply {
		if err := step(func(one *Report) error { return checkRunDocuments(ctx, js, n, one) }); err != nil {
			return rep, err
		}
	}
	if err := ensureBuckets(ctx, js, c, rep, apply); err != nil {
		return rep, err
	}
	if len(rep.Drift) > 0 && apply {
		return rep, &DriftError{Drift: rep.Drift}
	}
	return rep, nil
}

// sameSources reports whether a and b source the same streams through the
// same consumers and transforms.
func sameSources(a, b []*jetstream.StreamSource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.FilterSubject != y.FilterSubject || !slices.Equal(x.SubjectTransforms, y.SubjectTransforms) ||
			(x.Consumer == nil) != (y.Consumer == nil) || (x.Consumer != nil && *x.Consumer != *y.Consumer) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
