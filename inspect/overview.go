package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// QueueOverview is the state of one (task type, priority) queue as an
// operator sees it: what waits, what runs, what is stuck, and whether
// anything serves it. See [Operator.Overview].
type QueueOverview struct {
	Type     string             `json:"type"`
	Priority framework.Priority `json:"priority"`
	// Consumer is the durable consumer serving the queue; empty when there
	// is none (see Stranded).
	Consumer string `json:"consumer,omitempty"`
	// Waiting counts tasks on the work subject not yet delivered to any
	// worker.
	Waiting uint64 `json:"waiting"`
	// Scheduled counts delayed tasks of the queue still waiting in their
	// schedules.
	Scheduled int `json:"scheduled"`
	// Running counts tasks delivered and not yet acknowledged: running now,
	// or waiting for their next attempt after a failed one.
	Running int `json:"running"`
	// Retrying counts the tasks among Running that were delivered more
	// than once (the server's redelivered count): they are on a second or
	// later attempt. A task waiting for its first retry counts only once it
	// was redelivered.
	Retrying int `json:"retrying"`
	// OldestWaiting is when the oldest waiting task was stored; zero when
	// nothing waits. Its age is the queue's backlog age.
	OldestWaiting time.Time `json:"oldest_waiting,omitzero"`
	// Dead counts the dead letters of the task type (all priorities).
	Dead uint64 `json:"dead"`
	// Paused is true while the consumer is paused, by an operator
	// ([Operator.Pause]) or an open circuit breaker, until PausedUntil.
	Paused      bool      `json:"paused"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Pulls counts the pull requests workers have waiting on the consumer:
	// zero while tasks wait means no worker is pulling.
	Pulls int `json:"pulls"`
	// LastDelivery is when the consumer last delivered a task.
	LastDelivery time.Time `json:"last_delivery,omitzero"`
	// Stranded is true when tasks sit on the work subject and no consumer
	// serves it: they will never run until a worker registers the type at
	// that priority.
	Stranded bool `json:"stranded"`
	// Leader is the server leading the consumer, on a cluster.
	Leader string `json:"leader,omitempty"`
	// ReplicasCurrent is false when a replica of the consumer is behind or
	// offline, on a cluster.
	ReplicasCurrent bool `json:"replicas_current"`
	// Workers counts the live workers serving the queue, from the worker
	// registry ([Operator.Workers]; 0 when [Overview].Registry is false).
	Workers int `json:"workers"`
	// NoWorker is true when tasks wait and no live worker serves the
	// queue: they run only once one starts. It needs the registry.
	NoWorker bool `json:"no_worker,omitempty"`
}

// ReplicaInfo describes one replica of a stream or consumer.
type ReplicaInfo struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline,omitempty"`
	Lag     uint64        `json:"lag,omitempty"`
	Active  time.Duration `json:"active,omitempty"`
}

// StreamOverview describes one of the topology's streams.
type StreamOverview struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// Cluster names the server's cluster ("" on a single server). Leader
	// is the server leading the stream there; Replicas are its followers.
	Cluster  string        `json:"cluster,omitempty"`
	Leader   string        `json:"leader,omitempty"`
	Replicas []ReplicaInfo `json:"replicas,omitempty"`
}

// Overview is a snapshot of every queue, for dashboards and the CLI's
// status command. See [Operator.Overview].
type Overview struct {
	// Queues are sorted by type, then priority (highest first). Stranded
	// queues are listed up to [MaxStrandedSubjects], those holding most
	// tasks first; StrandedOmitted counts the others.
	Queues          []QueueOverview `json:"queues"`
	StrandedOmitted int             `json:"stranded_omitted,omitempty"`
	// Dead counts dead letters per task type, of at most
	// [MaxUnservedQueues] types (those with most); DeadTotal sums every
	// type's, the unlisted ones' too.
	Dead      map[string]uint64 `json:"dead"`
	DeadTotal uint64            `json:"dead_total"`
	// Scheduled counts every delayed task; Cron counts repeating schedules.
	Scheduled int `json:"scheduled"`
	Cron      int `json:"cron"`
	// BrokenScheduled and BrokenCron count the delayed tasks and repeating
	// schedules that never fire because their subject's last message is
	// not a schedule jetflow wrote (see [QueueStats]).
	BrokenScheduled int `json:"broken_scheduled,omitempty"`
	BrokenCron      int `json:"broken_cron,omitempty"`
	// Streams describes the task, schedule and dead-letter streams.
	Streams []StreamOverview `json:"streams"`
	// Taken is when the snapshot was taken.
	Taken time.Time `json:"taken"`
	// Registry is true when the worker registry was read: worker counts
	// and NoWorker are known (see [Fleet].Registry).
	Registry bool `json:"registry"`
	// Unserved are the payload versions that live workers hand back and
	// none accepts ([Fleet].Unserved).
	Unserved []UnservedVersion `json:"unserved_versions,omitempty"`
}

// Overview returns every queue with its counts, backlog age, pause state
// and serving consumer, flags stranded work subjects (tasks that no
// consumer serves), and describes the streams with their cluster leaders
// and replica currency. It combines [Operator.QueueStats] and
// [Operator.QueueActivity] with one stream info request, one direct get
// per stranded subject (at most [MaxStrandedSubjects]), and on a cluster
// one more consumer listing for the consumers' leaders.
func (i *Operator) Overview(ctx context.Context) (*Overview, error) {
	qs, err := i.QueueStats(ctx)
	if err != nil {
		return nil, err
	}
	acts, err := i.QueueActivity(ctx)
	if err != nil {
		return nil, err
	}
	out := &Overview{Dead: qs.Dead, DeadTotal: qs.UnlistedDead, Scheduled: qs.Scheduled, Cron: qs.Cron, Taken: qs.Taken,
		BrokenScheduled: qs.BrokenScheduled, BrokenCron: qs.BrokenCron}
	for _, n := range qs.Dead {
		out.DeadTotal += n
	}
	type qk struct {
		typ  string
		prio framework.Priority
	}
	rows := make(map[qk]*QueueOverview)
	row := func(typ string, p framework.Priority) *QueueOverview {
		k := qk{typ, p}
		r := rows[k]
		if r == nil {
			r = &QueueOverview{Type: typ, Priority: p, Dead: qs.Dead[typ], ReplicasCurrent: true}
			rows[k] = r
		}
		return r
	}
	for _, q := range qs.Queues {
		r := row(q.Type, q.Priority)
		r.Scheduled, r.Retrying = q.Scheduled, q.Redelivered
	}
	for _, a := range acts {
		r := row(a.Type, a.Priority)
		r.Consumer, r.Waiting, r.Running, r.Pulls = a.Consumer, a.Waiting, a.InFlight, a.Pulling
		r.OldestWaiting, r.LastDelivery = a.OldestWaiting, a.LastDelivery
		r.Paused, r.PausedUntil = a.Paused, a.PausedUntil
	}
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		return nil, i.opErr("overview", err)
	}
	// Work subjects holding tasks: a subject without a consumer is stranded.
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter(i.names.TaskWildcard()))
	if err != nil {
		return nil, i.opErr("overview", err)
	}
	// Any publisher can spread tasks over as many subjects as it likes;
	// each listed one costs a direct get. Keep those holding most tasks.
	type strandedSubject struct {
		subject string
		qk
		n uint64
	}
	var stranded []strandedSubject
	for subj, n := range si.State.Subjects {
		p, typ, err := i.names.ParseTaskSubject(subj)
		if err != nil {
			continue
		}
		if r := rows[qk{typ, p}]; r != nil && r.Consumer != "" {
			continue
		}
		stranded = append(stranded, strandedSubject{subj, qk{typ, p}, n})
	}
	slices.SortFunc(stranded, func(a, b strandedSubject) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.subject, b.subject)
	})
	if len(stranded) > MaxStrandedSubjects {
		out.StrandedOmitted = len(stranded) - MaxStrandedSubjects
		stranded = stranded[:MaxStrandedSubjects]
	}
	for _, s := range stranded {
		r := row(s.typ, s.prio)
		r.Waiting, r.Stranded = s.n, true
		_, err = jsapi.DirectGet(ctx, i.nc, i.names.TaskStream(), jsapi.GetRequest{NextFor: s.subject}, func(m jsapi.Stored) error {
			r.OldestWaiting = m.Time
			return nil
		})
		if err != nil {
			return nil, i.opErr("overview: oldest stranded task", err)
		}
	}
	if si.Cluster != nil && si.Cluster.Name != "" {
		lister := stream.ListConsumers(ctx)
		for ci := range lister.Info() {
			p, typ, err := i.names.ParseTaskSubject(ci.Config.FilterSubject)
			if err != nil || ci.Cluster == nil || ci.Cluster.Leader == "" {
				continue
			}
			if r := rows[qk{typ, p}]; r != nil {
				r.Leader, r.ReplicasCurrent = ci.Cluster.Leader, replicasCurrent(ci.Cluster.Replicas)
			}
		}
		if err := lister.Err(); err != nil {
			return nil, i.opErr("overview: list consumers", err)
		}
	}
	for _, r := range rows {
		out.Queues = append(out.Queues, *r)
	}
	i.countWorkers(ctx, out) // workers.go
	slices.SortFunc(out.Queues, func(a, b QueueOverview) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Priority.Rank() - b.Priority.Rank()
	})
	out.Streams = append(out.Streams, streamOverview(si))
	// The task streams of the other partitions, with their leaders.
	if l, _, err := streams.DeployedLayout(ctx, i.js, i.names); err == nil {
		for _, p := range i.names.Partitions(l.Partitions)[1:] {
			if s, err := i.js.Stream(ctx, p.TaskStream()); err == nil {
				out.Streams = append(out.Streams, streamOverview(s.CachedInfo()))
			}
		}
	}
	// The schedule stream: delayed tasks, cron schedules, and fired ones
	// the task stream has not sourced yet.
	if sched, err := i.js.Stream(ctx, i.names.ScheduleStream()); err == nil {
		out.Streams = append(out.Streams, streamOverview(sched.CachedInfo()))
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, i.opErr("overview", err)
	}
	// Then the delay stream (delayed tasks not yet moved into their
	// schedules), the dead letters and the workflow run documents.
	for _, name := range []string{i.names.DelayStream(), i.names.DLQStream(), i.names.RunStream()} {
		if s, err := i.js.Stream(ctx, name); err == nil {
			out.Streams = append(out.Streams, streamOverview(s.CachedInfo()))
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, i.opErr("overview", err)
		}
	}
	return out, nil
}

func streamOverview(si *jetstream.StreamInfo) StreamOverview {
	s := StreamOverview{Name: si.Config.Name, Messages: si.State.Msgs, Bytes: si.State.Bytes}
	if si.Cluster != nil && si.Cluster.Name != "" {
		s.Cluster, s.Leader = si.Cluster.Name, si.Cluster.Leader
		for _, p := range si.Cluster.Replicas {
			s.Replicas = append(s.Replicas, ReplicaInfo{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, Active: p.Active})
		}
	}
	return s
}

func replicasCurrent(ps []*jetstream.PeerInfo) bool {
	for _, p := range ps {
		if !p.Current || p.Offline {
			return false
		}
	}
	return true
}

// opErr maps an error of an inspector operation to the package's errors.
func (i *Operator) opErr(op string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jsapi.ErrNoStream) {
		return fmt.Errorf("inspect: %s: %w: %w", op, framework.ErrTopologyMissing, err)
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("inspect: %s: %w: %w", op, framework.ErrNotFound, err)
	}
	return fmt.Errorf("inspect: %s: %w", op, err)
}

// PauseType pauses taskType's queues like [Operator.PauseQueue], for
// several priorities at once, until until (zero: until resumed). With no
// priorities it pauses every existing consumer of the type and returns an
// error wrapping [framework.ErrNotFound] when there is none. A priority given
// explicitly whose consumer does not exist yet is created with default
// limits and paused, so that a worker started later finds it paused
// (workers keep a pause when they update limits). It returns the paused
// consumers' names.
func (i *Operator) PauseType(ctx context.Context, taskType string, until time.Time, prios ...framework.Priority) ([]string, error) {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return nil, err
	}
	if len(prios) == 0 {
		found, err := i.typeQueues(ctx, taskType)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%w: no consumer serves task type %s (pass a priority to pause it before a worker starts)", framework.ErrNotFound, taskType)
		}
		prios = found
	} else {
		for _, p := range prios {
			if !p.Valid() {
				return nil, fmt.Errorf("%w: priority %d", framework.ErrInvalidOption, uint8(p))
			}
			if _, err := topology.EnsureConsumer(ctx, i.js, i.names, topology.ConsumerSpec{TaskType: taskType, Priority: p}); err != nil {
				return nil, i.opErr("pause "+taskType, err)
			}
		}
	}
	var names []string
	for _, p := range prios {
		if err := i.PauseQueue(ctx, taskType, p, until); err != nil {
			return nil, err
		}
		names = append(names, i.names.ConsumerName(taskType, p))
	}
	return names, nil
}

// ResumeType resumes taskType's queues like [Operator.ResumeQueue]: those
// of the priorities given, or every existing one. It returns the names of
// the resumed consumers, or an error wrapping [framework.ErrNotFound] when none of
// them exists.
func (i *Operator) ResumeType(ctx context.Context, taskType string, prios ...framework.Priority) ([]string, error) {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return nil, err
	}
	found, err := i.typeQueues(ctx, taskType)
	if err != nil {
		return nil, err
	}
	if len(prios) > 0 {
		found = slices.DeleteFunc(found, func(p framework.Priority) bool { return !slices.Contains(prios, p) })
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w: no consumer of task type %s to resume", framework.ErrNotFound, taskType)
	}
	var names []string
	for _, p := range found {
		if err := i.ResumeQueue(ctx, taskType, p); err != nil {
			return nil, err
		}
		names = append(names, i.names.ConsumerName(taskType, p))
	}
	return names, nil
}

// typeQueues returns the priorities of taskType that have a consumer.
func (i *Operator) typeQueues(ctx context.Context, taskType string) ([]framework.Priority, error) {
	var out []framework.Priority
	for _, p := range streams.Priorities {
		_, err := i.js.Consumer(ctx, i.names.TaskStream(), i.names.ConsumerName(taskType, p))
		switch {
		case err == nil:
			out = append(out, p)
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		default:
			return nil, i.opErr("consumers of "+taskType, err)
		}
	}
	return out, nil
}
