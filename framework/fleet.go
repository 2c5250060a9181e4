package framework

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/streams"
)

// Every running worker announces itself in the worker registry, the KV
// bucket [streams.Names.WorkersBucket] ("JETFLOW_WORKERS"): its ID, host,
// process ID, build ([WithVersion]), the types and priorities it serves,
// its concurrency and busy slots, when it started and when it last wrote
// the record. It writes the record when it starts and every registry
// interval ([Timings].RegistryInterval, default 5 s) with a TTL of three
// intervals, and deletes it when it shuts down. A killed worker's record
// expires: it is gone at most three intervals (15 s by default) after the
// worker's last write. Package inspect lists the registry
// (inspect.Operator.Workers), as do `jetflow workers`, `jetflow status`, the
// dashboard and the Prometheus collector.
//
// The registry is a service beside the worker: one write per interval, none
// on a task's path. A worker that cannot write it (a server without the
// bucket and no permission to create it) logs a warning and works on.

// fleetOptions are the worker's registry settings; the zero value means
// the defaults.
type fleetOptions struct {
	id       string        // WithWorkerID; "" is a generated ID
	version  string        // WithVersion; "" is the program's build
	interval time.Duration // Timings.RegistryInterval; 0 is DefaultRegistryInterval
}

// WithWorkerID sets the worker's ID in the worker registry: 1 to 64 ASCII
// letters, digits, '-' and '_', unique among the running workers (a second
// worker under the same ID overwrites the first one's record). Set it to
// grant a worker write permission on its own record only
// ("$KV.JETFLOW_WORKERS.<id>"). Workers only. Default: a generated unique
// ID.
func WithWorkerID(id string) WorkerOption {
	return workerOnly(func(o *options) error {
		if !fleet.ValidID(id) {
			return fmt.Errorf("%w: worker ID %q (want 1 to %d of A-Z a-z 0-9 - _)", ErrInvalidOption, id, fleet.MaxIDLen)
		}
		o.fleet.id = id
		return nil
	})
}

// WithVersion sets the build or version string the worker announces in
// the worker registry, for example a release tag or a commit. At most 256
// bytes of printable text. Workers only. Default: the main module's path
// and version from the program's build information, with its VCS revision
// when recorded.
func WithVersion(v string) WorkerOption {
	return workerOnly(func(o *options) error {
		rec := fleet.Record{ID: "x", Version: v, TTLSeconds: 1}
		if v == "" || (fleet.Rules{}).Check(&rec) != nil {
			return fmt.Errorf("%w: version %q (want 1 to %d bytes of printable text)", ErrInvalidOption, v, fleet.MaxTextLen)
		}
		o.fleet.version = v
		return nil
	})
}

// fleetRules validate registry records with the rules of package streams.
var fleetRules = fleet.Rules{
	TaskType: streams.ValidateTaskType,
	Priority: func(s string) error { _, err := streams.ParsePriority(s); return err },
	Key:      validateOrderingKey,
}

// ID returns the worker's ID in the worker registry ([WithWorkerID]).
func (w *Worker) ID() string { return w.opts.fleet.id }

// installFleet sets the worker's registry defaults and adds the service
// that announces it.
func (w *Worker) installFleet() {
	f := &w.opts.fleet
	if f.id == "" {
		f.id = nuid.Next()
	}
	if f.version == "" {
		f.version = fleet.DefaultVersion()
	}
	if f.interval == 0 {
		f.interval = DefaultRegistryInterval
	}
	w.newVersionGate() // versions.go
	w.addExtension(extension{Plugin: Plugin{Name: "registry", Service: w.announce}})
}

// announce writes the worker's registry record every interval until ctx
// ends, then deletes it (fleet.Service).
func (w *Worker) announce(ctx context.Context, _ *Worker) {
	self := fleet.Record{ID: w.opts.fleet.id, Host: fleet.Hostname(), PID: os.Getpid(), Version: w.opts.fleet.version,
		Concurrency: w.opts.concurrency, Types: make([]fleet.Serves, 0, len(w.order))}
	for _, tt := range w.order {
		s := fleet.Serves{Type: tt.name, Concurrency: tt.cfg.concurrency, Versions: tt.cfg.versions}
		for _, p := range tt.cfg.priorities {
			s.Priorities = append(s.Priorities, p.String())
		}
		self.Types = append(self.Types, s)
	}
	s := &fleet.Service{JS: w.js, Bucket: w.names.WorkersBucket(), TaskStream: w.names.TaskStream(),
		Interval: w.opts.fleet.interval, Rules: fleetRules, Log: w.log, Self: self,
		Now: func(rec *fleet.Record) {
			rec.Started = w.startedAt().UTC()
			rec.Busy = min(w.in.NumRunning(), rec.Concurrency)
			rec.Refused = w.versions.Refused.Snapshot()
			rec.Lanes = w.in.HeldLanes() // internal/intake
		}}
	s.Run(ctx)
}
