package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/workflow"
)

// scheduleView is a repeating schedule as the CLI prints it in JSON.
type scheduleView struct {
	Name     string             `json:"name"`
	Spec     string             `json:"spec"`
	TimeZone string             `json:"time_zone,omitempty"`
	Type     string             `json:"type"`
	Priority framework.Priority `json:"priority"`
	NextFire time.Time          `json:"next_fire,omitzero"`
	LastFire time.Time          `json:"last_fire,omitzero"`
	Stored   time.Time          `json:"stored"`
	Subject  string             `json:"subject"`
	// Broken says why the schedule does not fire as registered (see
	// schedule.Info.Broken); BrokenAt is when it broke.
	Broken   string    `json:"broken,omitempty"`
	BrokenAt time.Time `json:"broken_at,omitzero"`
}

func cronCommands() []*command {
	return []*command{
		{
			name:    "cron ls",
			summary: "list repeating schedules: spec, zone, task, next and last fire; BROKEN ones with the reason",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("cron ls takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				list, err := schedule.New(s.cl).List(ctx)
				if err != nil {
					return err
				}
				now := time.Now()
				views := []scheduleView{}
				for _, sc := range list {
					views = append(views, scheduleView{Name: sc.Name, Spec: sc.Spec, TimeZone: sc.TimeZone, Type: sc.Type,
						Priority: sc.Priority, NextFire: sc.Next, LastFire: sc.LastFire(now), Stored: sc.Stored, Subject: sc.Subject,
						Broken: sc.Broken, BrokenAt: sc.BrokenAt})
				}
				if c.json {
					return c.printJSON(views)
				}
				if len(views) == 0 {
					fmt.Fprintln(c.stdout, "no repeating schedules")
					return nil
				}
				t := newTable(c.stdout, "NAME", "SPEC", "ZONE", "TYPE", "PRIORITY", "NEXT FIRE", "LAST FIRE", "NOTE")
				var broken []scheduleView
				for _, v := range views {
					zone := v.TimeZone
					if zone == "" {
						zone = "UTC"
					}
					note := ""
					if v.Broken != "" {
						note = "BROKEN since " + when(v.BrokenAt, now) + " (below)"
						broken = append(broken, v)
					}
					t.row(v.Name, v.Spec, zone, v.Type, v.Priority, when(v.NextFire, now), when(v.LastFire, now), note)
				}
				if err := t.flush(); err != nil {
					return err
				}
				if len(broken) > 0 {
					fmt.Fprintf(c.stdout, "\n%d BROKEN schedule(s): registering each again (schedule.Register, at the application's start) restores it; jetflow cron rm removes it\n", len(broken))
					for _, v := range broken {
						fmt.Fprintf(c.stdout, "BROKEN %s: %s\n", v.Name, v.Broken)
					}
				}
				return nil
			},
		},
		{
			name:    "cron rm",
			args:    "NAME",
			summary: "remove a repeating schedule: it fires no more",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("cron rm takes one schedule name (see jetflow cron ls)")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				if err := schedule.New(s.cl).Remove(ctx, args[0]); err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"name": args[0], "removed": true})
				}
				fmt.Fprintf(c.stdout, "removed schedule %s\n", args[0])
				return nil
			},
		},
	}
}

func controlCommands() []*command {
	var pause struct {
		prios priorityList
		dur   time.Duration
	}
	var resume struct{ prios priorityList }
	return []*command{
		{
			name:    "pause",
			args:    "TYPE",
			summary: "stop delivering a task type to every worker in the cluster (running tasks finish)",
			flags: func(fs *flag.FlagSet, c *cli) {
				pause.prios = nil
				fs.Var(&pause.prios, "priority", "only these priorities (repeatable); creates the consumer if no worker did yet")
				fs.DurationVar(&pause.dur, "for", 0, "resume by itself after this long (default: until jetflow resume)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("pause takes one task type")
				}
				if pause.dur < 0 {
					return usagef("--for %v: want a positive duration", pause.dur)
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				var until time.Time
				if pause.dur > 0 {
					until = time.Now().Add(pause.dur)
				}
				names, err := s.op.PauseType(ctx, args[0], until, pause.prios...)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"type": args[0], "paused": names, "until": until})
				}
				how := "until jetflow resume " + args[0]
				if !until.IsZero() {
					how = "until " + until.Local().Format(time.DateTime)
				}
				fmt.Fprintf(c.stdout, "paused %s (%s) %s\n", args[0], strings.Join(names, ", "), how)
				return nil
			},
		},
		{
			name:    "resume",
			args:    "TYPE",
			summary: "resume a paused task type",
			flags: func(fs *flag.FlagSet, c *cli) {
				resume.prios = nil
				fs.Var(&resume.prios, "priority", "only these priorities (repeatable)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("resume takes one task type")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				names, err := s.op.ResumeType(ctx, args[0], resume.prios...)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"type": args[0], "resumed": names})
				}
				fmt.Fprintf(c.stdout, "resumed %s (%s)\n", args[0], strings.Join(names, ", "))
				return nil
			},
		},
		{
			name:    "breakers",
			summary: "circuit breaker state per dependency, as the workers last reported it",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("breakers takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				bs, err := s.op.BreakerRecords(ctx)
				if err != nil {
					return err
				}
				if c.json {
					if bs == nil {
						bs = []breaker.Record{}
					}
					return c.printJSON(bs)
				}
				if len(bs) == 0 {
					fmt.Fprintln(c.stdout, "no breaker has changed state yet")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "DEPENDENCY", "STATE", "SINCE", "UNTIL", "FAILURES", "TASK TYPES", "REPORTED BY")
				for _, b := range bs {
					state := b.State.String()
					if b.State == breaker.StateOpen && !b.Until.IsZero() && b.Until.Before(now) {
						state += " (probing)"
					}
					t.row(b.Dependency, state, when(b.Since, now), when(b.Until, now), b.Failures, strings.Join(b.TaskTypes, ","), b.Worker)
				}
				return t.flush()
			},
		},
	}
}

func workflowCommands() []*command {
	var ls struct {
		name, status string
		limit        int
	}
	wfClient := func(s *session) (*workflow.Client, error) { return workflow.NewClient(s.cl) }
	return append([]*command{
		{
			name:    "workflows ls",
			summary: "list workflow runs, most recently updated first",
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&ls.name, "workflow", "", "workflow name")
				fs.StringVar(&ls.status, "status", "", "running, compensating, completed, failed or cancelled")
				fs.IntVar(&ls.limit, "limit", workflow.DefaultListLimit, "most runs listed")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("workflows ls takes no arguments")
				}
				switch workflow.RunStatus(ls.status) {
				case "", workflow.RunRunning, workflow.RunCompensating, workflow.RunCompleted, workflow.RunFailed, workflow.RunCancelled:
				default:
					return usagef("--status %q: want running, compensating, completed, failed or cancelled", ls.status)
				}
				s, err := c.connect()
				if err != nil {
					return err
				}
				defer s.Close()
				wc, err := wfClient(s)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
				defer cancel()
				runs, truncated, err := wc.List(ctx, workflow.RunFilter{Workflow: ls.name, Status: workflow.RunStatus(ls.status), Limit: ls.limit})
				if err != nil {
					return err
				}
				if c.json {
					if runs == nil {
						runs = []*workflow.Run{}
					}
					return c.printJSON(runs)
				}
				if len(runs) == 0 {
					fmt.Fprintln(c.stdout, "no workflow runs")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "RUN", "WORKFLOW", "STATUS", "STEPS DONE", "WAITS", "CREATED", "UPDATED", "ERROR")
				for _, r := range runs {
					done := 0
					for _, st := range r.Steps {
						if st.State == workflow.StepDone {
							done++
						}
					}
					t.row(r.ID, r.Workflow, r.Status, fmt.Sprintf("%d/%d", done, len(r.Steps)), runWaits(r, now), age(r.CreatedAt, now)+" ago", age(r.UpdatedAt, now)+" ago", cut(r.Error, 50))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if truncated {
					fmt.Fprintf(c.stdout, "(more than %d runs: only some were read)\n", workflow.MaxListScan)
				}
				return nil
			},
		},
		{
			name:    "workflows get",
			args:    "RUN",
			summary: "show one workflow run: its parent, its steps, their dependencies and states, what sleeping, waiting and child steps wait for",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("workflows get takes one run ID")
				}
				s, err := c.connect()
				if err != nil {
					return err
				}
				defer s.Close()
				wc, err := wfClient(s)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
				defer cancel()
				r, err := wc.Status(ctx, args[0])
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(r)
				}
				now := time.Now()
				fmt.Fprintf(c.stdout, "run %s of %s: %s, created %s, updated %s\n", r.ID, r.Workflow, r.Status, when(r.CreatedAt, now), when(r.UpdatedAt, now))
				if r.Error != "" {
					fmt.Fprintf(c.stdout, "error: %s\n", r.Error)
				}
				if p := r.Parent; p != nil {
					fmt.Fprintf(c.stdout, "child of run %s of %s, step %s\n", p.Run, p.Workflow, p.Step)
				}
				fmt.Fprintln(c.stdout)
				t := newTable(c.stdout, "STEP", "AFTER", "STATE", "ATTEMPTS", "WAITS", "ENDED", "ERROR")
				for _, st := range r.Steps {
					after := strings.Join(st.After, ",")
					if after == "" {
						after = "-"
					}
					errText := st.Error
					if st.CompensationError != "" {
						errText += " (compensation: " + st.CompensationError + ")"
					}
					t.row(st.Name, after, st.State, st.Attempts, stepWaits(st, now), age(st.EndedAt, now), cut(errText, 60))
				}
				return t.flush()
			},
		},
	}, workflowEventCommands(wfClient)...)
}
