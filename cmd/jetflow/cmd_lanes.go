package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
)

// laneCommands lists the lanes of ordered types (framework.Ordering.Lanes):
// each lane's consumer counts and the worker holding it.
func laneCommands() []*command {
	var ls struct{ typ string }
	return []*command{{
		name:    "lanes ls",
		summary: "lanes of ordered task types: the worker holding each, its tasks running and queued behind their key, tasks waiting",
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&ls.typ, "type", "", "only this task type")
		},
		run: func(ctx context.Context, c *cli, args []string) error {
			if len(args) > 0 {
				return usagef("lanes ls takes no arguments")
			}
			if ls.typ != "" {
				if err := streams.ValidateTaskType(ls.typ); err != nil {
					return usagef("--type: %v", err)
				}
			}
			s, ctx, done, err := c.open(ctx)
			if err != nil {
				return err
			}
			defer done()
			all, err := s.op.Lanes(ctx)
			if err != nil {
				return err
			}
			lanes := []inspect.Lane{}
			for _, l := range all {
				if ls.typ == "" || l.Type == ls.typ {
					lanes = append(lanes, l)
				}
			}
			if c.json {
				return c.printJSON(lanes)
			}
			if len(lanes) == 0 {
				fmt.Fprintln(c.stdout, "no lanes: no worker registered a type WithOrdering(Ordering{Lanes: N})")
				return nil
			}
			t := newTable(c.stdout, "TYPE", "LANE", "OWNER", "SINCE", "RUNNING", "QUEUED", "KEYS", "DELIVERED", "WAITING", "NOTE")
			for _, l := range lanes {
				lane := fmt.Sprintf("%d/%d", l.Lane, l.Lanes)
				if l.Partition > 0 {
					lane = fmt.Sprintf("p%d %s", l.Partition, lane)
				}
				owner, since := "-", "-"
				if l.Owner != "" {
					owner, since = cut(l.Owner, 24), l.PinnedSince.Local().Format(time.TimeOnly)
				}
				note := ""
				switch {
				case l.Paused:
					note = "paused"
				case l.Owner != "" && !l.Open:
					note = "waiting for the former owner's tasks"
				case l.Owner == "" && l.Delivered > 0:
					note = "held by a worker not in the registry"
				}
				if l.Awaited > 0 {
					note = fmt.Sprintf("%d handed back, awaited %s", l.Awaited, note)
				}
				t.row(l.Type, lane, owner, since, l.Running, l.Queued, l.Keys, l.Delivered, l.Waiting, note)
			}
			return t.flush()
		},
	}}
}
