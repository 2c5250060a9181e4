package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
)

type statusFlags struct {
	watch    bool
	interval time.Duration
	typ      string
}

func statusCommands() []*command {
	var f statusFlags
	return []*command{{
		name:    "status",
		summary: "queues per type and priority: waiting, scheduled, running, retrying, backlog age, dead letters, paused, pulls, live workers; stranded subjects; cluster leaders",
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&f.watch, "watch", false, "refresh until interrupted (with --json: one JSON document per line)")
			fs.DurationVar(&f.interval, "interval", 2*time.Second, "refresh interval of --watch")
			fs.StringVar(&f.typ, "type", "", "only the queues of this task type")
		},
		run: func(ctx context.Context, c *cli, args []string) error {
			if len(args) > 0 {
				return usagef("status takes no arguments")
			}
			if f.interval < 100*time.Millisecond {
				return usagef("--interval %v: at least 100ms", f.interval)
			}
			if f.typ != "" {
				if err := streams.ValidateTaskType(f.typ); err != nil {
					return usagef("--type: %v", err)
				}
			}
			s, err := c.connect()
			if err != nil {
				return err
			}
			defer s.Close()
			var topo topologyCheck
			for {
				octx, cancel := context.WithTimeout(ctx, c.conn.timeout)
				o, err := s.op.Overview(octx)
				cancel()
				if err != nil {
					if f.watch && ctx.Err() != nil {
						return nil
					}
					return err
				}
				st := topo.check(ctx, c, s)
				if f.typ != "" {
					o.Queues = slices.DeleteFunc(o.Queues, func(q inspect.QueueOverview) bool { return q.Type != f.typ })
				}
				if f.watch && !c.json {
					fmt.Fprint(c.rawStdout, "\x1b[H\x1b[2J") // home, clear screen
				}
				if c.json {
					if f.watch {
						if err := jsonLine(c, statusWithTopology{o, st}); err != nil {
							return err
						}
					} else if err := c.printJSON(statusWithTopology{o, st}); err != nil {
						return err
					}
				} else if err := printStatus(c, o, s.nc.ConnectedUrlRedacted()); err != nil {
					return err
				} else {
					st.print(c.stdout)
				}
				if !f.watch {
					return nil
				}
				t := time.NewTimer(f.interval)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		},
	}}
}

func printStatus(c *cli, o *inspect.Overview, url string) error {
	now := o.Taken
	fmt.Fprintf(c.stdout, "jetflow on %s at %s: %d delayed, %d repeating schedules, %d dead letters\n\n",
		url, o.Taken.Local().Format(time.TimeOnly), o.Scheduled, o.Cron, o.DeadTotal)
	if o.BrokenCron > 0 {
		fmt.Fprintf(c.stdout, "%d repeating schedule(s) BROKEN: they never fire; jetflow cron ls says why, registering them again restores them\n\n", o.BrokenCron)
	}
	if o.BrokenScheduled > 0 {
		fmt.Fprintf(c.stdout, "%d delayed task(s) BROKEN: their schedule was replaced and they never fire; jetflow tasks ls --state scheduled lists them\n\n", o.BrokenScheduled)
	}
	if len(o.Queues) == 0 {
		fmt.Fprintln(c.stdout, "no queues yet: no worker has registered a task type and no task waits")
	} else {
		t := newTable(c.stdout, "TYPE", "PRIORITY", "WAITING", "SCHEDULED", "RUNNING", "RETRYING", "OLDEST", "DEAD", "PAUSED", "PULLS", "WORKERS", "NOTE")
		var stranded, idle, noWorker int
		lastType := ""
		for _, q := range o.Queues {
			paused := "-"
			if q.Paused {
				paused = "until " + q.PausedUntil.Local().Format("01-02 15:04")
				if q.PausedUntil.Sub(now) > 10*365*24*time.Hour {
					paused = "yes"
				}
			}
			var note []string
			if q.Stranded {
				note = append(note, "STRANDED: no consumer serves this subject")
				stranded++
			}
			workers := "-" // unknown without the worker registry
			if o.Registry {
				workers = fmt.Sprint(q.Workers)
			}
			if q.NoWorker {
				note = append(note, "NO LIVE WORKER")
				noWorker++
			}
			if !q.Stranded && q.Waiting > 0 && q.Pulls == 0 && !q.Paused {
				note = append(note, "no worker pulling")
				idle++
			}
			if q.Leader != "" {
				note = append(note, "leader "+q.Leader)
			}
			if !q.ReplicasCurrent {
				note = append(note, "REPLICA BEHIND")
			}
			// Dead letters are counted per type: shown on the type's first
			// row only, so that a column sum is the type's count.
			dead := ""
			if q.Type != lastType {
				dead = fmt.Sprint(q.Dead)
			}
			lastType = q.Type
			t.row(q.Type, q.Priority, q.Waiting, q.Scheduled, q.Running, q.Retrying, age(q.OldestWaiting, now), dead, paused, q.Pulls, workers, strings.Join(note, "; "))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if stranded > 0 {
			fmt.Fprintf(c.stdout, "\n%d stranded queue(s): tasks on a work subject that no consumer serves never run; start a worker that registers the type at that priority\n", stranded)
		}
		if o.StrandedOmitted > 0 {
			fmt.Fprintf(c.stdout, "%d more stranded subject(s) not listed (at most %d are)\n", o.StrandedOmitted, inspect.MaxStrandedSubjects)
		}
		if noWorker > 0 {
			fmt.Fprintf(c.stdout, "\n%d queue(s) with waiting tasks and NO LIVE WORKER in the registry: start a worker serving the type at that priority (jetflow workers lists the live ones)\n", noWorker)
		}
		printUnserved(c, &inspect.Fleet{Unserved: o.Unserved, Taken: o.Taken}) // cmd_workers.go
		if idle > 0 {
			fmt.Fprintf(c.stdout, "\n%d queue(s) with waiting tasks and no pull request: are the workers running and connected?\n", idle)
		}
	}
	var (
		clustered bool
		parts     []string
	)
	names, _ := streams.NewNames(prefixOf(c)) // (validated when the command connected)
	tasks := names.TaskStream()
	for _, s := range o.Streams {
		clustered = clustered || s.Cluster != ""
		if s.Name == tasks || strings.HasPrefix(s.Name, tasks+"_P") {
			leader := ""
			if s.Leader != "" {
				leader = ", led by " + s.Leader
			}
			parts = append(parts, fmt.Sprintf("%s (%d messages%s)", s.Name, s.Messages, leader))
		}
	}
	if len(parts) > 1 {
		// Task partitions (jetflow partitions ls has their peers).
		fmt.Fprintf(c.stdout, "\nTASK PARTITIONS %d: %s\n", len(parts), strings.Join(parts, "; "))
	}
	if clustered {
		fmt.Fprintln(c.stdout)
		t := newTable(c.stdout, "STREAM", "MESSAGES", "LEADER", "REPLICAS")
		for _, s := range o.Streams {
			var reps []string
			for _, r := range s.Replicas {
				st := "current"
				switch {
				case r.Offline:
					st = "OFFLINE"
				case !r.Current:
					st = fmt.Sprintf("BEHIND by %d", r.Lag)
				}
				reps = append(reps, r.Name+" "+st)
			}
			t.row(s.Name, s.Messages, s.Leader, strings.Join(reps, ", "))
		}
		return t.flush()
	}
	return nil
}

// jsonLine writes v as one line of JSON.
func jsonLine(c *cli, v any) error {
	b, err := marshalCompact(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, string(b))
	return err
}
