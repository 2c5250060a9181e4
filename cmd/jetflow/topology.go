package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// The topology commands: "jetflow upgrade" runs streams.Ensure (or, with
// --dry-run, streams.Check) with the deployment's own settings, and status
// shows the same check in its TOPOLOGY line.

type upgradeFlags struct {
	dryRun, migrate, runDocs bool
	replicas                 int
}

func upgradeCommands() []*command {
	var f upgradeFlags
	return []*command{{
		name: "upgrade",
		summary: "create the topology, or migrate it to this jetflow's (streams.Ensure) keeping the deployment's own settings; " +
			"lists what it created and migrated, and what needs an operator with the commands to run",
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&f.dryRun, "dry-run", false, "change nothing: list what is missing, what upgrade would migrate and what needs an operator (streams.Check)")
			fs.BoolVar(&f.migrate, "migrate-task-stream", false, "recreate a task stream of the layout before the schedule stream (streams.MigrateTaskStream; stop producers and workers first)")
			fs.BoolVar(&f.runDocs, "migrate-run-documents", false, "then move the workflow run documents an earlier task stream holds to the run stream (topology.MigrateRunDocuments; stop workflow workers and producers first)")
			fs.IntVar(&f.replicas, "replicas", 0, "replica count of every stream (default: the task stream's, or 1 for a new deployment)")
		},
		run: func(ctx context.Context, c *cli, args []string) error {
			if len(args) > 0 {
				return usagef("upgrade takes no arguments")
			}
			if f.replicas < 0 || f.replicas > 5 {
				return usagef("--replicas %d: from 1 to 5", f.replicas)
			}
			if f.dryRun && (f.migrate || f.runDocs) {
				return usagef("--dry-run changes nothing: it excludes --migrate-task-stream and --migrate-run-documents")
			}
			s, err := c.connect()
			if err != nil {
				return err
			}
			defer s.Close()
			js, err := jetstream.New(s.nc)
			if err != nil {
				return err
			}
			octx, cancel := context.WithTimeout(ctx, c.conn.timeout)
			defer cancel()
			cfg, found, err := streams.DeployedConfig(octx, js, c.conn.prefix)
			if err != nil {
				return err
			}
			if f.replicas > 0 {
				cfg.Replicas = f.replicas
			}
			out := upgradeOutput{Prefix: prefixOf(c), Found: found, DryRun: f.dryRun, Replicas: max(cfg.Replicas, 1)}
			switch {
			case f.dryRun:
				out.Plan, err = streams.Check(octx, js, cfg)
				if err != nil {
					return err
				}
			case f.migrate:
				mig, err := streams.MigrateTaskStream(octx, js, cfg)
				if mig != nil {
					out.Migration = &migrationOutput{Copied: mig.Copied, Restored: mig.Restored}
					out.Report = mig.Ensure
				}
				if err != nil && !errors.Is(err, streams.ErrDrift) {
					return err
				}
			default:
				out.Report, err = streams.Ensure(octx, js, cfg)
				if err != nil && !errors.Is(err, streams.ErrDrift) {
					return err
				}
			}
			if f.runDocs && (out.Report == nil || len(out.Report.Drift) == 0) {
				moved, err := topology.MigrateRunDocuments(octx, js, cfg)
				if err != nil {
					return err
				}
				out.RunDocuments = &moved
			}
			if out.Report != nil && len(out.Report.Drift) == 0 {
				// What Ensure does not see: data an earlier layout left
				// behind (run documents in the task stream).
				after, err := streams.Check(octx, js, cfg)
				if err != nil {
					return err
				}
				out.Left = after.Drift
			}
			if c.json {
				if err := c.printJSON(out.json()); err != nil {
					return err
				}
			} else {
				out.print(c.stdout)
			}
			if out.Report != nil && len(out.Report.Drift) > 0 {
				return fmt.Errorf("%d setting(s) cannot be changed in place: run the fixes above, then %s again", len(out.Report.Drift), streamdefs.UpgradeCommand)
			}
			if len(out.Left) > 0 {
				return fmt.Errorf("%d difference(s) left after the upgrade: run the fixes above", len(out.Left))
			}
			return nil
		},
	}}
}

// upgradeOutput is what upgrade did or, with --dry-run, would do.
type upgradeOutput struct {
	Prefix    string
	Found     bool
	DryRun    bool
	Replicas  int
	Plan      *streams.Plan
	Report    *streams.Report
	Migration *migrationOutput
	// RunDocuments is how many run documents --migrate-run-documents
	// moved.
	RunDocuments *int
	// Left is the drift Check still finds after Ensure.
	Left []streams.Drift
}

type migrationOutput struct {
	Copied   int `json:"copied"`
	Restored int `json:"restored"`
}

// driftJSON is a streams.Drift in upgrade's and status's JSON.
type driftJSON struct {
	Resource string `json:"resource"`
	Field    string `json:"field"`
	Have     string `json:"have"`
	Want     string `json:"want"`
	Fix      string `json:"fix,omitempty"`
}

func driftsJSON(ds []streams.Drift) []driftJSON {
	out := make([]driftJSON, len(ds))
	for i, d := range ds {
		out[i] = driftJSON{Resource: d.Resource, Field: d.Field, Have: d.Have, Want: d.Want, Fix: d.Fix}
	}
	return out
}

// planJSON is a streams.Plan in JSON: Missing are the resources upgrade
// creates, Change the settings it migrates in place, Drift and Weaker
// those an operator fixes.
type planJSON struct {
	UpToDate bool        `json:"up_to_date"`
	Missing  []string    `json:"missing"`
	Change   []driftJSON `json:"change"`
	Drift    []driftJSON `json:"drift"`
	Weaker   []driftJSON `json:"weaker"`
}

func newPlanJSON(p *streams.Plan) *planJSON {
	return &planJSON{UpToDate: p.UpToDate(), Missing: nonNil(p.Create), Change: driftsJSON(p.Change), Drift: driftsJSON(p.Drift), Weaker: driftsJSON(p.Weaker)}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (o *upgradeOutput) json() any {
	type reportJSON struct {
		Created   []string    `json:"created"`
		Migrated  []driftJSON `json:"migrated"`
		Unchanged []string    `json:"unchanged"`
		Drift     []driftJSON `json:"drift"`
		Weaker    []driftJSON `json:"weaker"`
	}
	v := struct {
		Prefix   string      `json:"prefix"`
		Found    bool        `json:"found"`
		DryRun   bool        `json:"dry_run"`
		Replicas int         `json:"replicas"`
		Plan     *planJSON   `json:"plan,omitempty"`
		Report   *reportJSON `json:"report,omitempty"`
		// Left is what Check still finds after the upgrade.
		Left      []driftJSON      `json:"left,omitempty"`
		Migration *migrationOutput `json:"migration,omitempty"`
		// RunDocuments is set with --migrate-run-documents.
		RunDocuments *int `json:"run_documents_moved,omitempty"`
	}{Prefix: o.Prefix, Found: o.Found, DryRun: o.DryRun, Replicas: o.Replicas, Migration: o.Migration, RunDocuments: o.RunDocuments, Left: driftsJSON(o.Left)}
	if o.Plan != nil {
		v.Plan = newPlanJSON(o.Plan)
	}
	if r := o.Report; r != nil {
		v.Report = &reportJSON{Created: nonNil(append(r.Created, r.BucketsCreated...)), Migrated: driftsJSON(r.Changed),
			Unchanged: nonNil(append(r.Unchanged, r.BucketsUnchanged...)), Drift: driftsJSON(r.Drift), Weaker: driftsJSON(r.Weaker)}
	}
	return v
}

func (o *upgradeOutput) print(w io.Writer) {
	what := "existing deployment"
	if !o.Found {
		what = "no deployment yet"
	}
	fmt.Fprintf(w, "topology of prefix %s (%s, %d replica(s))\n", o.Prefix, what, o.Replicas)
	if o.Migration != nil {
		fmt.Fprintf(w, "migrated the task stream: %d message(s) copied, %d restored\n", o.Migration.Copied, o.Migration.Restored)
	}
	if p := o.Plan; p != nil {
		if p.UpToDate() {
			fmt.Fprintln(w, "up to date: nothing to create or migrate")
			return
		}
		for _, r := range p.Create {
			fmt.Fprintf(w, "  missing   %s\n", r)
		}
		for _, d := range p.Change {
			fmt.Fprintf(w, "  migrate   %s\n", changeLine(d))
		}
		printFixes(w, p.Drift, p.Weaker)
		if p.NeedsEnsure() {
			fmt.Fprintf(w, "run `%s` to create and migrate the above in place\n", streamdefs.UpgradeCommand)
		}
		return
	}
	r := o.Report
	if r == nil {
		return
	}
	for _, x := range append(r.Created, r.BucketsCreated...) {
		fmt.Fprintf(w, "  created   %s\n", x)
	}
	for _, d := range r.Changed {
		fmt.Fprintf(w, "  migrated  %s\n", changeLine(d))
	}
	fmt.Fprintf(w, "  unchanged %d resource(s)\n", len(r.Unchanged)+len(r.BucketsUnchanged))
	printFixes(w, r.Drift, r.Weaker)
	if o.RunDocuments != nil {
		fmt.Fprintf(w, "  moved     %d workflow run document(s) to the run stream\n", *o.RunDocuments)
	}
	printFixes(w, o.Left, nil)
	if len(r.Drift)+len(r.Weaker)+len(o.Left) == 0 {
		fmt.Fprintln(w, "up to date")
	}
}

// changeLine describes a setting migrated in place.
func changeLine(d streams.Drift) string {
	return fmt.Sprintf("%s %s: %s -> %s", d.Resource, d.Field, d.Have, d.Want)
}

// printFixes lists drift and weaker settings with what to run.
func printFixes(w io.Writer, drift, weaker []streams.Drift) {
	for _, d := range drift {
		fmt.Fprintf(w, "  DRIFT     %s\n            fix: %s\n", d.String(), d.Fix)
	}
	for _, d := range weaker {
		fmt.Fprintf(w, "  weaker    %s\n            works as before, without that protection; to tighten it: %s\n", d.String(), d.Fix)
	}
}

// topologyStatus is the TOPOLOGY of jetflow status: the result of
// streams.Check with the deployment's own settings, or why there is none.
type topologyStatus struct {
	Plan  *planJSON `json:"plan,omitempty"`
	Error string    `json:"error,omitempty"`
	// Run is the command that creates and migrates what Plan lists, when
	// there is something it can do.
	Run string `json:"run,omitempty"`

	plan *streams.Plan
}

// topologyCheck checks the topology for status, at most once per
// topologyCheckEvery while watching.
type topologyCheck struct {
	last time.Time
	st   *topologyStatus
}

// topologyCheckEvery is how often status --watch checks the topology: it
// changes at an upgrade, not from one refresh to the next.
const topologyCheckEvery = 30 * time.Second

// check returns the TOPOLOGY of status. A failure to check is reported in
// it, never as the command's error: status shows the queues regardless.
func (t *topologyCheck) check(ctx context.Context, c *cli, s *session) *topologyStatus {
	if t.st != nil && time.Since(t.last) < topologyCheckEvery {
		return t.st
	}
	t.last, t.st = time.Now(), &topologyStatus{}
	ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
	defer cancel()
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.st.Error = err.Error()
		return t.st
	}
	cfg, _, err := streams.DeployedConfig(ctx, js, c.conn.prefix)
	if err == nil {
		t.st.plan, err = streams.Check(ctx, js, cfg)
	}
	if err != nil {
		t.st.Error = "not checked: " + err.Error()
		return t.st
	}
	t.st.Plan = newPlanJSON(t.st.plan)
	if t.st.plan.NeedsEnsure() {
		t.st.Run = streamdefs.UpgradeCommand
	}
	return t.st
}

// print writes the TOPOLOGY section of status.
func (st *topologyStatus) print(w io.Writer) {
	fmt.Fprintln(w)
	switch {
	case st.Error != "":
		fmt.Fprintf(w, "TOPOLOGY %s\n", st.Error)
		return
	case st.plan.UpToDate():
		fmt.Fprintln(w, "TOPOLOGY up to date")
		return
	}
	p := st.plan
	var parts []string
	if n := len(p.Create) + len(p.Change); n > 0 {
		parts = append(parts, fmt.Sprintf("%d to create or migrate", n))
	}
	if len(p.Drift) > 0 {
		parts = append(parts, fmt.Sprintf("%d DRIFT", len(p.Drift)))
	}
	if len(p.Weaker) > 0 {
		parts = append(parts, fmt.Sprintf("%d weaker", len(p.Weaker)))
	}
	fmt.Fprintf(w, "TOPOLOGY differs from this jetflow's: %s\n", strings.Join(parts, ", "))
	for _, r := range p.Create {
		fmt.Fprintf(w, "  missing   %s\n", r)
	}
	for _, d := range p.Change {
		fmt.Fprintf(w, "  migrate   %s\n", changeLine(d))
	}
	if p.NeedsEnsure() {
		fmt.Fprintf(w, "  run `%s` (`%s --dry-run` lists it again)\n", streamdefs.UpgradeCommand, streamdefs.UpgradeCommand)
	}
	printFixes(w, p.Drift, p.Weaker)
}

// statusWithTopology is status's JSON document: the overview with its topology.
type statusWithTopology struct {
	*inspect.Overview
	Topology *topologyStatus `json:"topology"`
}
