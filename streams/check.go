package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// Plan is what [Check] found: how the live topology differs from what
// [Ensure] creates for the same [Config]. Its zero value is a topology
// that is up to date.
type Plan struct {
	// Create lists the streams, consumers ("STREAM/consumer") and KV
	// buckets that do not exist: Ensure creates them.
	Create []string `json:"create,omitempty"`
	// Change lists the settings Ensure changes in place, each with the
	// live value (Have) and the one Ensure sets (Want). A deployment made
	// by an earlier jetflow lists its migrations here (for example the
	// task stream's Discard, DiscardOld to DiscardNew).
	Change []Drift `json:"change,omitempty"`
	// Drift lists the settings the server cannot change in place: Ensure
	// reports them and fails with a *[DriftError]. Each one's Fix says
	// what to run.
	Drift []Drift `json:"drift,omitempty"`
	// Weaker lists settings less strict than jetflow's that the server
	// cannot tighten in place; the deployment works as before without that
	// protection, and Ensure does not fail on them. Each one's Fix says
	// how to tighten it.
	Weaker []Drift `json:"weaker,omitempty"`
}

// UpToDate reports whether the live topology is the one Ensure creates:
// nothing to create, change, fix or tighten.
func (p *Plan) UpToDate() bool {
	return len(p.Create)+len(p.Change)+len(p.Drift)+len(p.Weaker) == 0
}

// NeedsEnsure reports whether running [Ensure] would create or change
// something.
func (p *Plan) NeedsEnsure() bool { return len(p.Create)+len(p.Change) > 0 }

// fieldRunDocuments is the Field of the [Drift] of run documents left in
// the task stream.
const fieldRunDocuments = "run documents"

// Check compares the live topology of c with what [Ensure] creates and
// changes nothing: every stream, Ensure's consumers and every KV bucket
// that is missing, and every setting Ensure manages that differs, with
// whether Ensure changes it in place or an operator must act (and what to
// run). It applies Ensure's own rules, so a Plan that is up to date is one
// on which Ensure changes nothing. Workflow run documents left in the task
// stream by the layout before the run stream are drift, fixed by "jetflow
// upgrade --migrate-run-documents". The per-type consumers of the task
// stream are not compared: a worker sets them right when it starts.
//
// It needs STREAM.INFO and CONSUMER.INFO on the topology's streams
// (the operator role of package access has them). Like Ensure it retries
// errors of a cluster that is still forming, until ctx ends or for 30 s
// when ctx has no deadline.
func Check(ctx context.Context, js jetstream.JetStream, c Config) (*Plan, error) {
	rep, err := ensure(ctx, js, c, false)
	if err != nil {
		return nil, err
	}
	return &Plan{Create: append(rep.Created, rep.BucketsCreated...), Change: rep.Changed, Drift: rep.Drift, Weaker: rep.Weaker}, nil
}

// DeployedConfig returns the [Config] of the deployment with the given
// prefix as its streams show it: the task stream's replicas, storage,
// duplicate window, size cap and purge setting, and the dead-letter and
// advisory streams' retention. [Ensure] and [Check] with it keep those
// settings as they are, so an upgrade changes only what jetflow itself
// changed. found is false, with the defaults, when there is no task
// stream.
func DeployedConfig(ctx context.Context, js jetstream.JetStream, prefix string) (c Config, found bool, err error) {
	c = Config{Prefix: prefix}
	_, n, err := c.withDefaults()
	if err != nil {
		return c, false, err
	}
	info := func(name string) (*jetstream.StreamConfig, error) {
		var cfg *jetstream.StreamConfig
		err := streamdefs.RetryTransient(ctx, func() error {
			s, err := js.Stream(ctx, name)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("streams: look up %s: %w", name, err)
			}
			cfg = &s.CachedInfo().Config
			return nil
		})
		return cfg, err
	}
	tasks, err := info(n.TaskStream())
	if err != nil || tasks == nil {
		return c, false, err
	}
	c.Replicas, c.Storage, c.DuplicateWindow = tasks.Replicas, tasks.Storage, tasks.Duplicates
	l, err := layoutOf(tasks.Metadata)
	if err != nil {
		return c, true, err
	}
	c.Partitions, c.PartitionBy = l.Partitions, l.By
	if tasks.MaxBytes > 0 {
		c.MaxTaskBytes = tasks.MaxBytes
	}
	// A stream with message schedules (the layout before the schedule
	// stream) has purges forced on; MigrateTaskStream recreates it with
	// the default.
	c.AllowTaskPurge = !tasks.DenyPurge && !tasks.AllowMsgSchedules
	for name, age := range map[string]*time.Duration{n.DLQStream(): &c.DLQMaxAge, n.AdvisoryStream(): &c.AdvisoryMaxAge} {
		s, err := info(name)
		if err != nil {
			return c, true, err
		}
		if s != nil {
			*age = s.MaxAge
		}
	}
	return c, true, nil
}

// checkRunDocuments reports, as drift, workflow run documents that a task
// stream of the layout before the run stream still holds: Ensure takes
// their subjects away from the task stream, "jetflow upgrade
// --migrate-run-documents" (topology.MigrateRunDocuments) moves them.
func checkRunDocuments(ctx context.Context, js jetstream.JetStream, n Names, rep *Report) error {
	s, err := js.Stream(ctx, n.TaskStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: look up %s: %w", n.TaskStream(), err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(n.RunSubject(">")))
	if err != nil {
		return fmt.Errorf("streams: run documents in %s: %w", n.TaskStream(), err)
	}
	if docs := len(info.State.Subjects); docs > 0 {
		rep.Drift = append(rep.Drift, Drift{Resource: n.TaskStream(), Field: fieldRunDocuments,
			Have: fmt.Sprintf("%d run(s) on %s", docs, n.RunSubject(">")), Want: "none (run documents live in " + n.RunStream() + ", decision 023)",
			Fix: n.fix(n.TaskStream(), fieldRunDocuments)})
	}
	return nil
}
