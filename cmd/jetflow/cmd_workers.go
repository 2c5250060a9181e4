package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
)

func workerCommands() []*command {
	var typ string
	return []*command{{
		name:    "workers",
		summary: "running workers from the worker registry: ID, host, PID, version, types and priorities served, busy slots, uptime, last heartbeat",
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&typ, "type", "", "only the workers serving this task type")
		},
		run: func(ctx context.Context, c *cli, args []string) error {
			if len(args) > 0 {
				return usagef("workers takes no arguments")
			}
			if typ != "" {
				if err := streams.ValidateTaskType(typ); err != nil {
					return usagef("--type: %v", err)
				}
			}
			s, err := c.connect()
			if err != nil {
				return err
			}
			defer s.Close()
			octx, cancel := context.WithTimeout(ctx, c.conn.timeout)
			defer cancel()
			f, err := s.op.Workers(octx)
			if err != nil {
				return err
			}
			if typ != "" {
				f.Workers = slices.DeleteFunc(f.Workers, func(w inspect.WorkerInfo) bool {
					return !slices.ContainsFunc(w.Types, func(t inspect.WorkerType) bool { return t.Type == typ })
				})
			}
			if c.json {
				return c.printJSON(f)
			}
			return printWorkers(c, f)
		},
	}}
}

func printWorkers(c *cli, f *inspect.Fleet) error {
	if !f.Registry {
		fmt.Fprintln(c.stdout, "no worker registry: no worker of a jetflow version that announces itself has started (or --prefix is wrong)")
		return nil
	}
	if len(f.Workers) == 0 {
		fmt.Fprintln(c.stdout, "no live workers")
	} else {
		t := newTable(c.stdout, "ID", "HOST", "PID", "VERSION", "TYPES", "BUSY", "UP", "SEEN")
		for _, w := range f.Workers {
			var types []string
			for _, ty := range w.Types {
				ps := make([]string, len(ty.Priorities))
				for i, p := range ty.Priorities {
					ps[i] = p.String()
				}
				s := ty.Type + " (" + strings.Join(ps, ",") + ")"
				if len(ty.Versions) > 0 {
					s += " v" + versionList(ty.Versions)
				}
				types = append(types, s)
			}
			t.row(w.ID, cut(w.Host, 32), w.PID, cut(w.Version, 40), cut(strings.Join(types, " "), 80),
				fmt.Sprintf("%d/%d", w.Busy, w.Concurrency), age(w.Started, f.Taken), age(w.LastSeen, f.Taken)+" ago")
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	printUnserved(c, f)
	if f.Invalid > 0 {
		fmt.Fprintf(c.stdout, "\n%d record(s) in the registry break its rules (written by another tool) and are not listed\n", f.Invalid)
	}
	if f.Omitted > 0 {
		fmt.Fprintf(c.stdout, "%d more worker(s) not listed (at most %d are)\n", f.Omitted, inspect.MaxWorkers)
	}
	return nil
}

// printUnserved names the payload versions that workers hand back and no
// live worker accepts.
func printUnserved(c *cli, f *inspect.Fleet) {
	for _, u := range f.Unserved {
		fmt.Fprintf(c.stdout, "\nPAYLOAD VERSION %d of %s: NO LIVE WORKER ACCEPTS IT; %d task hand-back(s) by %d worker(s), the last %s ago. Start a worker whose handler accepts it; after the workers' grace its tasks are dead-lettered with reason version\n",
			u.Version, u.Type, u.Count, len(u.RefusedBy), age(u.Last, f.Taken))
	}
}

// versionList writes versions compactly: "1-3,5".
func versionList(vs []int) string {
	var b strings.Builder
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", vs[i])
		if j > i {
			fmt.Fprintf(&b, "-%d", vs[j])
		}
		i = j + 1
	}
	return b.String()
}
