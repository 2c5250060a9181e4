package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// tenantCommands lists what flow control knows of each task key
// (inspect.Operator.Keys): running tasks, concurrency override, rate
// limit, debounced burst.
func tenantCommands() []*command {
	var typ string
	return []*command{
		{
			name: "keys",
			summary: "each task key (framework.WithKey) flow control knows: its running tasks and concurrency override (keylimit), " +
				"its rate limit's use (ratelimit.WithKeyLimit) and its debounced burst (debounce), the busiest first",
			flags: func(fs *flag.FlagSet, _ *cli) {
				typ = ""
				fs.StringVar(&typ, "type", "", "only the keys of this task type")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("keys takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				keys, err := s.op.Keys(ctx, typ)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(keys)
				}
				if len(keys) == 0 {
					fmt.Fprintln(c.stdout, "no key in use: keys appear while a key's tasks run under keylimit or in a lane, or wait for their fair share, once a per-key rate limit or override was used, and while a burst is debounced")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "TYPE", "KEY", "RUNNING", "QUEUED", "STAGED", "LIMIT", "RATE LAST SECOND", "THROTTLED", "DEBOUNCED")
				for _, k := range keys {
					limit, rate, thr, deb := "-", "-", "-", "-"
					if k.Limit > 0 {
						limit = fmt.Sprint(k.Limit)
					}
					if k.RatePerSecond > 0 {
						rate = fmt.Sprintf("%d of %.4g/s", k.RateLastSecond, k.RatePerSecond)
					}
					if k.Throttled {
						thr = "yes"
					}
					if !k.DebouncedSince.IsZero() {
						deb = fmt.Sprintf("%d enqueues in %s", k.DebouncedEnqueues, age(k.DebouncedSince, now))
					}
					t.row(k.Type, fmt.Sprintf("%q", k.Key), k.Running, k.Queued, k.Staged, limit, rate, thr, deb)
				}
				return t.flush()
			},
		},
	}
}
