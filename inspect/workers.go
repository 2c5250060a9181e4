package inspect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/streams"
)

// WorkerInfo is one running worker as it announced itself in the worker
// registry (see [framework.Timings].RegistryInterval).
type WorkerInfo struct {
	ID      string `json:"id"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Version string `json:"version"`
	// Types are the task types the worker serves, in its registration
	// order.
	Types []WorkerType `json:"types"`
	// Concurrency is the worker's slot count; Busy the slots running a
	// handler at LastSeen.
	Concurrency int `json:"concurrency"`
	Busy        int `json:"busy"`
	// Started is when the worker started; LastSeen when it last wrote its
	// record (both by the worker's clock).
	Started  time.Time `json:"started"`
	LastSeen time.Time `json:"last_seen"`
	// TTL is how long the record lives after LastSeen unless it is written
	// again: a worker killed at LastSeen is listed until LastSeen + TTL.
	TTL time.Duration `json:"ttl"`
	// Refused are the payload versions the worker handed back because its
	// handler does not accept them (see [framework.AcceptVersions]), most
	// recent first.
	Refused []VersionRefusal `json:"refused,omitempty"`
}

// VersionRefusal is a payload version of a type a worker handed back:
// how many tasks since it started, and when the last one.
type VersionRefusal struct {
	Type    string    `json:"type"`
	Version int       `json:"version"`
	Count   uint64    `json:"count"`
	Last    time.Time `json:"last"`
}

// UnservedVersion is a payload version of a type that live workers handed
// back within [UnservedWindow] and that no live worker accepts: its tasks
// wait, and are dead-lettered with reason "version" after the grace of
// the worker that last handed them back ([framework.Timings].VersionGrace).
type UnservedVersion struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	// RefusedBy are the IDs of the workers that handed it back; Count the
	// tasks they handed back since they started; Last the latest.
	RefusedBy []string  `json:"refused_by"`
	Count     uint64    `json:"count"`
	Last      time.Time `json:"last"`
}

// UnservedWindow is how recent a hand-back must be for its version to be
// reported unserved: an older one no longer arrives.
const UnservedWindow = 10 * time.Minute

// WorkerType is a task type a worker serves.
type WorkerType struct {
	Type string `json:"type"`
	// Priorities are the priorities it pulls, highest first.
	Priorities []framework.Priority `json:"priorities"`
	// Concurrency is the type's slot count on the worker.
	Concurrency int `json:"concurrency"`
	// Versions are the payload versions its handler accepts, ascending;
	// empty means every version.
	Versions []int `json:"versions,omitempty"`
}

// Serves reports whether w pulls tasks of typ at p.
func (w *WorkerInfo) Serves(typ string, p framework.Priority) bool {
	for _, t := range w.Types {
		if t.Type == typ {
			for _, tp := range t.Priorities {
				if tp == p {
					return true
				}
			}
		}
	}
	return false
}

// Fleet is the worker registry's content. See [Operator.Workers].
type Fleet struct {
	// Workers are sorted by host, then start time, then ID; at most
	// [MaxWorkers].
	Workers []WorkerInfo `json:"workers"`
	// Registry is false when the registry bucket does not exist: no worker
	// of a jetflow version with a registry has started (worker counts are
	// then unknown, not zero).
	Registry bool `json:"registry"`
	// Invalid counts records that break the registry's rules (written by
	// another tool) and were skipped; Omitted those beyond MaxWorkers.
	Invalid int `json:"invalid,omitempty"`
	Omitted int `json:"omitted,omitempty"`
	// Taken is when the registry was read.
	Taken time.Time `json:"taken"`
	// Unserved are the payload versions no live worker accepts while
	// workers hand their tasks back, by type and version.
	Unserved []UnservedVersion `json:"unserved_versions,omitempty"`
}

// MaxWorkers bounds [Fleet].Workers.
const MaxWorkers = fleet.MaxList

// Count returns how many listed workers serve typ at p.
func (f *Fleet) Count(typ string, p framework.Priority) int {
	n := 0
	for i := range f.Workers {
		if f.Workers[i].Serves(typ, p) {
			n++
		}
	}
	return n
}

// ByType returns how many listed workers serve each task type, at any
// priority.
func (f *Fleet) ByType() map[string]int {
	out := make(map[string]int)
	for _, w := range f.Workers {
		for _, t := range w.Types {
			out[t.Type]++
		}
	}
	return out
}

// registryRules validate registry records with the rules the worker writes
// them by.
var registryRules = fleet.Rules{
	TaskType: streams.ValidateTaskType,
	Priority: func(s string) error { _, err := streams.ParsePriority(s); return err },
	Key:      ordering.ValidateKey,
}

// Workers lists the live workers of the registry in one watch of its
// bucket. A worker that shut down is gone at once; a killed one when its
// record's TTL passes (three registry intervals: 15 s by default). Records
// that break the rules (an ID that is not the key, control characters, an
// invalid task type or priority) are counted in Invalid, not listed.
func (i *Operator) Workers(ctx context.Context) (*Fleet, error) {
	out := &Fleet{Taken: time.Now(), Workers: []WorkerInfo{}}
	l, err := registryRules.List(ctx, i.js, i.names.WorkersBucket())
	if errors.Is(err, fleet.ErrNoRegistry) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: workers: %w", err)
	}
	out.Registry, out.Invalid, out.Omitted = true, l.Invalid, l.Omitted
	for _, r := range l.Records {
		w := WorkerInfo{ID: r.ID, Host: r.Host, PID: r.PID, Version: r.Version, Concurrency: r.Concurrency,
			Busy: r.Busy, Started: r.Started, LastSeen: r.Heartbeat, TTL: time.Duration(r.TTLSeconds) * time.Second,
			Types: make([]WorkerType, 0, len(r.Types))}
		for _, s := range r.Types {
			t := WorkerType{Type: s.Type, Concurrency: s.Concurrency, Versions: s.Versions}
			for _, ps := range s.Priorities {
				p, _ := streams.ParsePriority(ps) // checked by registryRules
				t.Priorities = append(t.Priorities, p)
			}
			w.Types = append(w.Types, t)
		}
		for _, f := range r.Refused {
			w.Refused = append(w.Refused, VersionRefusal(f))
		}
		out.Workers = append(out.Workers, w)
	}
	for _, u := range l.Unserved(out.Taken, UnservedWindow) {
		out.Unserved = append(out.Unserved, UnservedVersion(u))
	}
	return out, nil
}

// countWorkers sets the worker count and the no-worker flag of o's queues
// from the registry. A registry that cannot be read (an operator without
// permission on its bucket) leaves o.Registry false and is logged.
func (i *Operator) countWorkers(ctx context.Context, o *Overview) {
	f, err := i.Workers(ctx)
	if err != nil {
		i.log.Warn("jetflow inspect: worker registry not read; worker counts unknown", slog.Any("error", err))
		return
	}
	o.Registry, o.Unserved = f.Registry, f.Unserved
	if !f.Registry {
		return
	}
	for k := range o.Queues {
		q := &o.Queues[k]
		q.Workers = f.Count(q.Type, q.Priority)
		q.NoWorker = q.Workers == 0 && q.Waiting > 0
	}
}
