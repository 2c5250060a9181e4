package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/streams"
)

// The commands of per-key limits (package keylimit): the limits set at run
// time, the tasks running per key, and changing a limit.
func keyLimitCommands() []*command {
	var key string
	target := func(args []string, n int, what string) (string, error) {
		if len(args) != n {
			return "", usagef("%s", what)
		}
		if err := streams.ValidateTaskType(args[0]); err != nil {
			return "", usagef("task type: %v", err)
		}
		if key != "" {
			if err := taskmsg.ValidateKey(key); err != nil {
				return "", usagef("--key: %v", err)
			}
		}
		return args[0], nil
	}
	keyFlag := func(fs *flag.FlagSet, _ *cli) {
		key = ""
		fs.StringVar(&key, "key", "", "the task key (framework.WithKey); without it, the type's own limit, for every key without one of its own")
	}
	var anyType bool
	setFlags := func(fs *flag.FlagSet, c *cli) {
		keyFlag(fs, c)
		anyType = false
		fs.BoolVar(&anyType, "any-type", false, "set it even though no live worker serves the type (one about to be deployed)")
	}
	scope := func(typ string) string {
		if key == "" {
			return typ + " (every key without a limit of its own)"
		}
		return fmt.Sprintf("%s key %q", typ, key)
	}
	return []*command{
		{
			name:    "keylimits ls",
			summary: "per-key limits set at run time (keylimit.Set), and the tasks running now per key",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("keylimits ls takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				u, err := keylimit.List(ctx, s.cl)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(u)
				}
				if len(u.Overrides) == 0 {
					fmt.Fprintln(c.stdout, "no limit set at run time: every key has its type's keylimit.PerKey")
				} else {
					t := newTable(c.stdout, "TYPE", "KEY", "LIMIT", "SET")
					for _, o := range u.Overrides {
						k := o.Key
						if k == "" {
							k = "(every key)"
						}
						t.row(o.Type, cut(k, 48), o.Limit, o.Set.Format("2006-01-02 15:04:05Z"))
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if len(u.Running) > 0 {
					fmt.Fprintln(c.stdout)
					t := newTable(c.stdout, "TYPE", "KEY", "RUNNING")
					for _, r := range u.Running {
						t.row(r.Type, cut(r.Key, 48), r.Tasks)
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if u.Invalid > 0 {
					fmt.Fprintf(c.stdout, "\n%d record(s) in the bucket break its rules and are not listed\n", u.Invalid)
				}
				return nil
			},
		},
		{
			name:    "keylimits set",
			args:    "TYPE N",
			summary: "limit the tasks of a key (--key) or of every key of a type running at once to N; workers apply it within a moment",
			flags:   setFlags,
			run: func(ctx context.Context, c *cli, args []string) error {
				typ, err := target(args, 2, "keylimits set takes a task type and a limit")
				if err != nil {
					return err
				}
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 1 || n > keylimit.MaxLimit {
					return usagef("limit %q: want 1 to %d", args[1], keylimit.MaxLimit)
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				var opts []keylimit.SetOption
				if anyType {
					opts = append(opts, keylimit.AnyType())
				}
				if err := keylimit.Set(ctx, s.cl, typ, key, n, opts...); err != nil {
					if errors.Is(err, keylimit.ErrUnknownType) {
						return usagef("%v", err)
					}
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"type": typ, "key": key, "limit": n})
				}
				fmt.Fprintf(c.stdout, "limit of %s: %d running at once\n", scope(typ), n)
				return nil
			},
		},
		{
			name:    "keylimits rm",
			args:    "TYPE",
			summary: "remove the limit set for a key (--key) or for a type; it falls back to the type's, then keylimit.PerKey",
			flags:   keyFlag,
			run: func(ctx context.Context, c *cli, args []string) error {
				typ, err := target(args, 1, "keylimits rm takes a task type")
				if err != nil {
					return err
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				if err := keylimit.Remove(ctx, s.cl, typ, key); err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"type": typ, "key": key, "removed": true})
				}
				fmt.Fprintf(c.stdout, "limit of %s removed\n", scope(typ))
				return nil
			},
		},
	}
}
