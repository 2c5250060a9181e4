package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
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
	// MaxTaskBytes caps the task stream's size in bytes. Message schedules
	// require discard-old, so at the cap the oldest tasks are dropped: size it
	// generously or leave it unlimited. Default 0: unlimited.
	MaxTaskBytes int64
	// DLQMaxAge is how long dead letters are kept. Default 30 days.
	DLQMaxAge time.Duration
	// AdvisoryMaxAge is how long captured advisories are kept. Default 7 days.
	AdvisoryMaxAge time.Duration
}

// Defaults used by [Config] fields left at their zero value.
const (
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultDLQMaxAge       = 30 * 24 * time.Hour
	DefaultAdvisoryMaxAge  = 7 * 24 * time.Hour
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
	return c, names, nil
}

// StreamConfigs returns the JetStream configurations [Ensure] applies, task
// stream first. It is exported so operators can review or reproduce them.
func StreamConfigs(c Config) ([]jetstream.StreamConfig, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	maxBytes := c.MaxTaskBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	tasks := jetstream.StreamConfig{
		Name:        n.TaskStream(),
		Description: "jetflow tasks: work subjects, one-shot delays, cron schedules and workflow runs",
		// One wildcard per priority rather than "<prefix>.task.>": a
		// publish on a subject with no valid priority (where no consumer
		// would ever read it) is refused at the producer instead of
		// stranding in the stream.
		Subjects: []string{
			n.prefix + ".task." + PriorityCritical.String() + ".>",
			n.prefix + ".task." + PriorityHigh.String() + ".>",
			n.prefix + ".task." + PriorityNormal.String() + ".>",
			n.prefix + ".task." + PriorityLow.String() + ".>",
			n.prefix + ".sched.>",
			n.prefix + ".cron.>",
			// Workflow run documents: no consumer reads them, they are
			// replaced by subject roll-up and expire by message TTL. They
			// live here so that a step result and the next steps' tasks
			// commit in one atomic batch.
			n.prefix + ".wf.>",
			// Ordered tasks: slot subjects consumed by partition consumers
			// with MaxAckPending 1 (ordering.go).
			n.prefix + ".ord.>",
		},
		Retention: jetstream.WorkQueuePolicy,
		// Message schedules require DiscardOld; with no limits set nothing
		// is ever discarded.
		Discard:            jetstream.DiscardOld,
		MaxBytes:           maxBytes,
		Storage:            c.Storage,
		Replicas:           c.Replicas,
		Duplicates:         c.DuplicateWindow,
		AllowMsgSchedules:  true,
		AllowMsgTTL:        true,
		AllowAtomicPublish: true,
		AllowDirect:        true,
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
		Subjects: []string{
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.TaskStream() + ".>",
			"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + n.TaskStream() + ".>",
		},
		Retention: jetstream.LimitsPolicy,
		Discard:   jetstream.DiscardOld,
		MaxAge:    c.AdvisoryMaxAge,
		Storage:   c.Storage,
		Replicas:  c.Replicas,
	}
	return []jetstream.StreamConfig{tasks, dlq, adv}, nil
}

// Report says what [Ensure] did to each resource.
type Report struct {
	// Created lists resources that did not exist and were created.
	Created []string
	// Updated lists resources whose configuration was changed in place.
	Updated []string
	// Unchanged lists resources that already matched.
	Unchanged []string
	// Drift lists differences that cannot be changed in place. When it is
	// non-empty Ensure also returns a *[DriftError].
	Drift []Drift
	// BucketsCreated and BucketsUnchanged list the KV buckets
	// ([BucketConfigs]) created, and those that existed already (their
	// settings are kept).
	BucketsCreated, BucketsUnchanged []string
}

// Drift is one difference between the wanted and the existing configuration
// that JetStream cannot update in place.
type Drift struct {
	Resource string // stream or consumer name
	Field    string // configuration field
	Want     string // wanted value
	Have     string // existing value
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

// Ensure creates the task, dead-letter and advisory streams of c, or updates
// them to match c, and creates the KV buckets of c ([BucketConfigs]) that do
// not exist. It is idempotent and safe to call from many processes at
// once. Fields Ensure does not manage (for example limits an operator added)
// are kept. Differences that cannot be updated in place (retention, storage)
// are reported in Report.Drift and as a *[DriftError]. Errors of a cluster
// that is still forming ("no suitable peers", "temporarily unavailable",
// timeouts) are retried until ctx ends, or for [EnsureRetryFor] when ctx has
// no deadline.
func Ensure(ctx context.Context, js jetstream.JetStream, c Config) (*Report, error) {
	cfgs, err := StreamConfigs(c)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	for _, want := range cfgs {
		// A cluster that is still forming (or electing its meta leader)
		// answers "no suitable peers" or "temporarily unavailable" for a
		// moment: retry those until ctx ends (at most EnsureRetryFor when
		// ctx has no deadline).
		var one *Report
		err := retryTransient(ctx, func() error {
			one = &Report{}
			return ensureStream(ctx, js, want, one)
		})
		rep.Created = append(rep.Created, one.Created...)
		rep.Updated = append(rep.Updated, one.Updated...)
		rep.Unchanged = append(rep.Unchanged, one.Unchanged...)
		rep.Drift = append(rep.Drift, one.Drift...)
		if err != nil {
			return rep, err
		}
	}
	if err := ensureBuckets(ctx, js, c, rep); err != nil {
		return rep, err
	}
	if len(rep.Drift) > 0 {
		return rep, &DriftError{Drift: rep.Drift}
	}
	return rep, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, rep *Report) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another process created it between our lookup and create.
			s, err = js.Stream(ctx, want.Name)
		} else if err != nil {
			return fmt.Errorf("streams: create %s: %w", want.Name, err)
		} else {
			rep.Created = append(rep.Created, want.Name)
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("streams: look up %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	next := have
	changed := false
	set := func(cond bool, apply func()) {
		if cond {
			apply()
			changed = true
		}
	}
	drift := func(field string, w, h any) {
		rep.Drift = append(rep.Drift, Drift{Resource: want.Name, Field: field, Want: fmt.Sprint(w), Have: fmt.Sprint(h)})
	}
	if have.Retention != want.Retention {
		drift("Retention", want.Retention, have.Retention)
	}
	if have.Storage != want.Storage {
		drift("Storage", want.Storage, have.Storage)
	}
	set(!sameSet(have.Subjects, want.Subjects), func() { next.Subjects = want.Subjects })
	set(have.Replicas != want.Replicas, func() { next.Replicas = want.Replicas })
	set(have.Duplicates != want.Duplicates && want.Duplicates > 0, func() { next.Duplicates = want.Duplicates })
	set(have.MaxAge != want.MaxAge, func() { next.MaxAge = want.MaxAge })
	set(want.MaxBytes > 0 && have.MaxBytes != want.MaxBytes, func() { next.MaxBytes = want.MaxBytes })
	set(have.Discard != want.Discard, func() { next.Discard = want.Discard })
	set(want.AllowMsgSchedules && !have.AllowMsgSchedules, func() { next.AllowMsgSchedules = true })
	set(want.AllowMsgTTL && !have.AllowMsgTTL, func() { next.AllowMsgTTL = true })
	set(want.AllowAtomicPublish && !have.AllowAtomicPublish, func() { next.AllowAtomicPublish = true })
	set(want.AllowDirect && !have.AllowDirect, func() { next.AllowDirect = true })
	set(have.Description != want.Description, func() { next.Description = want.Description })
	if !changed {
		rep.Unchanged = append(rep.Unchanged, want.Name)
		return nil
	}
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return fmt.Errorf("streams: update %s: %w", want.Name, err)
	}
	rep.Updated = append(rep.Updated, want.Name)
	return nil
}

// EnsureRetryFor bounds how long [Ensure] retries transient cluster errors
// when its context has no deadline.
const EnsureRetryFor = 30 * time.Second

func retryTransient(ctx context.Context, f func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, EnsureRetryFor)
		defer cancel()
	}
	return retry.Do(ctx, ensureRetry, natserr.Transient, f)
}

// ensureRetry spaces the attempts of retryTransient.
var ensureRetry = retry.Policy{Min: 50 * time.Millisecond, Max: time.Second}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
