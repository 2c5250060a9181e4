package circuit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Record is the value stored under a dependency's key in the breaker
// bucket each time a worker's breaker changes state; package framework
// decodes it as its BreakerRecord (same JSON).
type Record struct {
	Dependency string    `json:"dependency"`
	State      State     `json:"state"`
	Since      time.Time `json:"since"`
	Until      time.Time `json:"until,omitzero"`
	Worker     string    `json:"worker"`
	Failures   uint32    `json:"failures,omitzero"`
	TaskTypes  []string  `json:"task_types,omitempty"`
	Consumers  []string  `json:"consumers,omitempty"`
}

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("breaker-state(%d)", int(s))
}

// MarshalText writes the state's name; an unknown state is an error.
func (s State) MarshalText() ([]byte, error) {
	switch s {
	case Closed, HalfOpen, Open:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("invalid breaker state %d", int(s))
}

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	switch string(b) {
	case "closed":
		*s = Closed
	case "half-open":
		*s = HalfOpen
	case "open":
		*s = Open
	default:
		return fmt.Errorf("invalid breaker state %q", b)
	}
	return nil
}

// Cluster spreads one worker's breakers across the cluster through the
// breaker bucket: it publishes local state changes, pauses the consumers
// of the task types that declared a dependency when its breaker opens,
// and opens local breakers that other workers report open (pausing the
// consumers they did not pause).
type Cluster struct {
	// ID identifies the worker process in its records.
	ID string
	// KV is the breaker bucket.
	KV jetstream.KeyValue
	// JS and Stream locate the consumers to pause. Streams, when set,
	// returns every task stream to pause them in (one per task partition),
	// and Stream is not used.
	JS      jetstream.JetStream
	Stream  string
	Streams func() []string
	// Types maps a dependency to the task types that declared it; fixed.
	Types map[string][]string
	// Consumers returns the durable consumers of a task type, every
	// priority.
	Consumers func(taskType string) []string
	// OpenTimeout returns the open timeout of the local breaker of dep,
	// which bounds the open period a remote report asks for; an error (dep
	// is no valid name) drops the report.
	OpenTimeout func(dep string) (time.Duration, error)
	// ForceOpen opens the local breaker of dep on a remote report.
	ForceOpen func(dep string)
	// Log receives the cluster's problems; LogKeyDep and LogKeyErr are
	// the attribute keys of a dependency and an error.
	Log                  *slog.Logger
	LogKeyDep, LogKeyErr string

	active atomic.Bool // Run runs and takes jobs
	mu     sync.Mutex
	jobs   map[string]Event
	wake   chan struct{}
	once   sync.Once
}

func (c *Cluster) wakeCh() chan struct{} {
	c.once.Do(func() { c.wake = make(chan struct{}, 1) })
	return c.wake
}

// Notify queues the local state change of dep for [Cluster.Run]. It runs on
// the caller's goroutine and never blocks; it ignores remote changes and
// changes while Run is not running.
func (c *Cluster) Notify(dep string, ev Event) {
	if ev.Remote || !c.active.Load() {
		return
	}
	c.mu.Lock()
	if c.jobs == nil {
		c.jobs = make(map[string]Event)
	}
	c.jobs[dep] = ev // a later change supersedes an unprocessed one
	c.mu.Unlock()
	select {
	case c.wakeCh() <- struct{}{}:
	default:
	}
}

// Run watches the bucket and carries out local changes until ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	c.active.Store(true)
	defer c.active.Store(false)
	var updates <-chan jetstream.KeyValueEntry
	watcher, err := c.KV.WatchAll(ctx)
	if err != nil {
		c.Log.Error("jetflow cannot watch the breaker bucket; breakers opened by other workers will not be seen",
			slog.Any(c.LogKeyErr, err))
	} else {
		defer func() { _ = watcher.Stop() }()
		updates = watcher.Updates()
	}
	wake := c.wakeCh()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if e != nil {
				c.remote(ctx, e)
			}
		case <-wake:
			c.runJobs(ctx)
		}
	}
}

// consumersOf returns the consumers of the task types that declared dep.
func (c *Cluster) consumersOf(dep string) []string {
	var out []string
	for _, tt := range c.Types[dep] {
		out = append(out, c.Consumers(tt)...)
	}
	return out
}

// runJobs publishes local state changes and, for an open breaker, pauses
// the consumers of the task types that declared the dependency.
func (c *Cluster) runJobs(ctx context.Context) {
	c.mu.Lock()
	jobs := c.jobs
	c.jobs = nil
	c.mu.Unlock()
	for dep, ev := range jobs {
		rec := Record{Dependency: dep, State: ev.To, Since: ev.At.UTC(), Worker: c.ID, TaskTypes: c.Types[dep]}
		if ev.To == Open {
			rec.Until = ev.Until.UTC()
			rec.Failures = ev.Failures
			rec.Consumers = c.consumersOf(dep)
		}
		c.publish(ctx, rec)
		if ev.To == Open {
			c.pause(ctx, dep, rec.Consumers, ev.Until)
		}
	}
}

func (c *Cluster) publish(ctx context.Context, rec Record) {
	data, err := json.Marshal(rec)
	if err != nil {
		c.Log.Error("jetflow cannot encode breaker record", slog.Any(c.LogKeyErr, err))
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.KV.Put(pctx, rec.Dependency, data); err != nil {
		c.Log.Warn("jetflow cannot publish breaker state", slog.String(c.LogKeyDep, rec.Dependency),
			slog.String("state", rec.State.String()), slog.Any(c.LogKeyErr, err))
	}
}

// pause pauses the named consumers until until, concurrently. Consumers
// that do not exist (a priority nobody serves) are skipped.
func (c *Cluster) pause(ctx context.Context, dep string, consumers []string, until time.Time) {
	var wg sync.WaitGroup
	streams := []string{c.Stream}
	if c.Streams != nil {
		streams = c.Streams()
	}
	for _, stream := range streams {
		for _, name := range consumers {
			wg.Go(func() { c.pauseOne(ctx, dep, stream, name, until) })
		}
	}
	wg.Wait()
}

// pauseOne pauses one consumer of stream until until.
func (c *Cluster) pauseOne(ctx context.Context, dep, stream, name string, until time.Time) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.JS.PauseConsumer(pctx, stream, name, until)
	switch {
	case err == nil:
		c.Log.Info("jetflow consumer paused by circuit breaker", slog.String(c.LogKeyDep, dep),
			slog.String("stream", stream), slog.String("consumer", name), slog.Time("until", until))
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		c.Log.Warn("jetflow cannot pause consumer for circuit breaker", slog.String(c.LogKeyDep, dep),
			slog.String("stream", stream), slog.String("consumer", name), slog.Any(c.LogKeyErr, err))
	}
}

// remote handles a record written to the bucket: another worker's breaker
// opened, so open ours and pause our consumers it did not pause.
func (c *Cluster) remote(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		c.Log.Warn("jetflow ignores an undecodable breaker record", slog.String("key", e.Key()), slog.Any(c.LogKeyErr, err))
		return
	}
	now := time.Now()
	if rec.Worker == c.ID || rec.State != Open || !rec.Until.After(now) {
		return
	}
	timeout, err := c.OpenTimeout(e.Key())
	if err != nil {
		return
	}
	until, ok := reportedOpen(rec, timeout, now)
	if !ok {
		return
	}
	c.ForceOpen(e.Key())
	var mine []string
	for _, name := range c.consumersOf(e.Key()) {
		if !slices.Contains(rec.Consumers, name) {
			mine = append(mine, name)
		}
	}
	c.pause(ctx, e.Key(), mine, until)
}

// maxClockSkew is how far ahead of this worker's clock the start of a
// reported open period may be: another worker's clock may run a little
// ahead.
const maxClockSkew = time.Minute

// reportedOpen returns when the open period that rec reports ends by this
// worker's open timeout, and whether that is after now. Anyone who may
// write the bucket chooses the record's times: a record open until the
// year 9999 would stop the dependency's task types for good, and one that
// began long ago, or begins in the far future, would pause them again at
// every worker start (the watcher delivers the latest record first). So
// the period ends at Until, but no later than timeout after Since, where a
// Since up to maxClockSkew ahead counts as now; a record without Since, or
// with one further ahead, reports nothing.
func reportedOpen(rec Record, timeout time.Duration, now time.Time) (time.Time, bool) {
	if rec.Since.IsZero() || rec.Since.After(now.Add(maxClockSkew)) {
		return time.Time{}, false
	}
	since := rec.Since
	if since.After(now) {
		since = now
	}
	until := rec.Until
	if limit := since.Add(timeout); until.After(limit) {
		until = limit
	}
	return until, until.After(now)
}

// HoldFor is how long to set aside a task refused by a breaker open until
// until: until then, spread over a short window so that held tasks do not
// all ask at the same instant.
func HoldFor(until time.Time) time.Duration {
	d := max(time.Until(until), 0)
	spread := min(max(d/10, 10*time.Millisecond), 500*time.Millisecond)
	return d + rand.N(spread)
}
