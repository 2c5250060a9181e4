package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
)

// The commands of ordered tasks, rate limits and unique tasks: partitions
// and blocked keys, limits against their use, uniqueness reservations.

// partitionView is a partition of an ordered type as the CLI prints it in
// JSON.
type partitionView struct {
	Type        string                `json:"type"`
	Partition   int                   `json:"partition"`
	Partitions  int                   `json:"partitions"`
	Pending     uint64                `json:"pending"`
	Head        *inspect.OrderingHead `json:"head,omitempty"`
	PausedUntil string                `json:"paused_until,omitempty"`
}

// blockedView is a key held up, with the reason: "failed" (a task failed
// for good and blocks its key until resolved), "retrying" (the head of a
// partition waits for its retry) or "paused" (a breaker paused the
// partition).
type blockedView struct {
	Reason    string    `json:"reason"`
	Type      string    `json:"type"`
	Key       string    `json:"key,omitempty"`
	TaskID    string    `json:"id,omitempty"`
	Partition *int      `json:"partition,omitempty"`
	Pending   uint64    `json:"pending,omitempty"`
	Error     string    `json:"error,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Attempts  int       `json:"attempts,omitempty"`
	// Resolution is "retry" or "skip" once an operator resolved a failed
	// task, until its worker acts on it.
	Resolution  string `json:"resolution,omitempty"`
	PausedUntil string `json:"paused_until,omitempty"`
}

// limitView is a rate limit as the CLI prints it in JSON.
type limitView struct {
	Name            string    `json:"name"`
	Key             string    `json:"key,omitempty"` // the task key of a per-key limit
	Limit           int       `json:"limit"`
	Interval        string    `json:"interval"`
	IntervalSeconds float64   `json:"interval_seconds"`
	Burst           int       `json:"burst"`
	LastSecond      int       `json:"last_second"`
	PerSecond       float64   `json:"limit_per_second"`
	Next            time.Time `json:"next,omitzero"`
	ThrottledUntil  time.Time `json:"throttled_until,omitzero"`
	Throttled       bool      `json:"throttled"`
}

// reservationView is a uniqueness reservation as the CLI prints it in JSON.
type reservationView struct {
	Type      string    `json:"type"`
	Hash      string    `json:"hash"`
	TaskID    string    `json:"id"`
	Until     time.Time `json:"until"`
	UntilDone bool      `json:"until_done"`
}

func keyCommands() []*command {
	var ordLs struct{ typ string }
	var resolve struct{ retry, skip bool }
	var uniq struct{ typ string }
	return []*command{
		{
			name:    "ordering ls",
			summary: "partitions of ordered task types: head task and key, retry state, tasks waiting behind it",
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&ordLs.typ, "type", "", "only this task type")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("ordering ls takes no arguments")
				}
				if ordLs.typ != "" {
					if err := streams.ValidateTaskType(ordLs.typ); err != nil {
						return usagef("--type: %v", err)
					}
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				parts, err := s.op.OrderingPartitions(ctx)
				if err != nil {
					return err
				}
				views := []partitionView{}
				for _, p := range parts {
					if ordLs.typ != "" && p.Type != ordLs.typ {
						continue
					}
					views = append(views, partitionView{Type: p.Type, Partition: p.Partition, Partitions: p.Partitions,
						Pending: p.Pending, Head: p.Head, PausedUntil: p.PausedUntil})
				}
				slices.SortFunc(views, func(a, b partitionView) int {
					if c := strings.Compare(a.Type, b.Type); c != 0 {
						return c
					}
					return a.Partition - b.Partition
				})
				if c.json {
					return c.printJSON(views)
				}
				if len(views) == 0 {
					fmt.Fprintln(c.stdout, "no ordered task types: no worker registered a type WithOrdering")
					return nil
				}
				t := newTable(c.stdout, "TYPE", "PARTITION", "HEAD TASK", "KEY", "STATE", "WAITING", "NOTE")
				for _, v := range views {
					id, key, state := "-", "-", "idle"
					if v.Head != nil {
						id, key, state = v.Head.TaskID, cut(v.Head.Key, 40), "running"
						if v.Head.Retrying {
							state = "RETRYING"
						}
					}
					note := ""
					if v.PausedUntil != "" {
						note = "paused by a breaker until " + v.PausedUntil
					}
					t.row(v.Type, fmt.Sprintf("%d/%d", v.Partition, v.Partitions), id, key, state, v.Pending, note)
				}
				return t.flush()
			},
		},
		{
			name:    "ordering blocked",
			summary: "ordering keys held up and why: failed for good (until resolved), head retrying, partition paused",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("ordering blocked takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				views, err := blockedViews(ctx, s.op)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(views)
				}
				if len(views) == 0 {
					fmt.Fprintln(c.stdout, "no ordering key is blocked")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "REASON", "TYPE", "KEY", "TASK", "SINCE", "ATTEMPTS", "WAITING", "WHY")
				var failed int
				for _, v := range views {
					why := ""
					waiting := "-"
					switch v.Reason {
					case "failed":
						failed++
						why = cut(v.Error, 60)
						if v.Resolution != "" {
							why = "resolved (" + v.Resolution + "), waiting for its worker: " + why
						}
					case "retrying":
						why = "head task failed, the partition's keys wait for its retry"
						waiting = fmt.Sprint(v.Pending)
					case "paused":
						why = "a circuit breaker paused the partition until " + v.PausedUntil
						waiting = fmt.Sprint(v.Pending)
					}
					attempts := "-"
					if v.Attempts > 0 {
						attempts = fmt.Sprint(v.Attempts)
					}
					t.row(strings.ToUpper(v.Reason), v.Type, orDash(cut(v.Key, 40)), orDash(v.TaskID), age(v.Since, now), attempts, waiting, why)
				}
				if err := t.flush(); err != nil {
					return err
				}
				if failed > 0 {
					fmt.Fprintln(c.stdout, "\nresolve a failed task with: jetflow ordering resolve TASK --retry|--skip")
				}
				return nil
			},
		},
		{
			name:    "ordering resolve",
			args:    "TASK",
			summary: "unblock the key of a task that failed for good: --retry runs it again, --skip dead-letters it",
			flags: func(fs *flag.FlagSet, c *cli) {
				resolve.retry, resolve.skip = false, false
				fs.BoolVar(&resolve.retry, "retry", false, "run the task once more (it blocks again if it fails)")
				fs.BoolVar(&resolve.skip, "skip", false, "dead-letter the task; its key moves on")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("ordering resolve takes one task ID (see jetflow ordering blocked)")
				}
				if resolve.retry == resolve.skip {
					return usagef("pass exactly one of --retry and --skip")
				}
				id := args[0]
				if err := streams.ValidateID(id); err != nil {
					return usagef("task ID: %v", err)
				}
				resolution := inspect.ResolveRetry
				if resolve.skip {
					resolution = inspect.ResolveSkip
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				bs, err := s.op.BlockedTasks(ctx)
				if err != nil {
					return err
				}
				i := slices.IndexFunc(bs, func(b inspect.BlockedTask) bool { return b.TaskID == id })
				if i < 0 {
					return fmt.Errorf("%w: task %s is not blocked (see jetflow ordering blocked)", framework.ErrNotFound, id)
				}
				b := bs[i]
				if err := s.op.ResolveBlocked(ctx, b.Type, id, resolution); err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"id": id, "type": b.Type, "key": b.Key, "resolution": resolution})
				}
				fmt.Fprintf(c.stdout, "resolved task %s (%s, key %s) with %s: its worker acts within a few seconds\n", id, b.Type, b.Key, resolution)
				return nil
			},
		},
		{
			name:    "limits",
			summary: "cluster-wide rate limits: limit, interval, burst, permits used in the last second, throttle",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("limits takes no arguments")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				infos, err := s.op.RateLimits(ctx)
				if err != nil {
					return err
				}
				now := time.Now()
				views := []limitView{}
				for _, in := range infos {
					v := limitView{Name: in.Name, Key: in.Key, Limit: in.Limit.Limit, Interval: in.Limit.Interval.String(),
						IntervalSeconds: in.Limit.Interval.Seconds(), Burst: in.Limit.Burst, LastSecond: in.LastSecond,
						Next: in.Next, ThrottledUntil: in.ThrottledUntil, Throttled: in.ThrottledUntil.After(now)}
					if in.Limit.Interval > 0 {
						v.PerSecond = float64(in.Limit.Limit) / in.Limit.Interval.Seconds()
					}
					views = append(views, v)
				}
				slices.SortFunc(views, func(a, b limitView) int { return strings.Compare(a.Name, b.Name) })
				if c.json {
					return c.printJSON(views)
				}
				if len(views) == 0 {
					fmt.Fprintln(c.stdout, "no rate limit used yet: limits appear once a worker with ratelimit.WithLimit or ratelimit.WithDependency reserved a permit")
					return nil
				}
				t := newTable(c.stdout, "LIMIT", "PER", "BURST", "LAST SECOND", "OF PER SECOND", "THROTTLED UNTIL")
				for _, v := range views {
					thr := "-"
					if v.Throttled {
						thr = when(v.ThrottledUntil, now)
					}
					name := v.Name
					if typ, key, ok := ratelimit.ParseKey(v.Name); ok {
						name = fmt.Sprintf("key.%s %q", typ, key) // the key as given, not its bucket encoding
					}
					t.row(name, fmt.Sprintf("%d / %s", v.Limit, v.Interval), v.Burst, v.LastSecond,
						fmt.Sprintf("%.4g", v.PerSecond), thr)
				}
				return t.flush()
			},
		},
		{
			name:    "unique ls",
			summary: "reservations of unique tasks: type, key hash, holding task, end of the period",
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&uniq.typ, "type", "", "only this task type")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("unique ls takes no arguments")
				}
				if uniq.typ != "" {
					if err := streams.ValidateTaskType(uniq.typ); err != nil {
						return usagef("--type: %v", err)
					}
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				rs, err := s.op.UniqueReservations(ctx, uniq.typ)
				if err != nil {
					return err
				}
				views := []reservationView{}
				for _, r := range rs {
					views = append(views, reservationView{Type: r.Type, Hash: strings.TrimPrefix(r.Key, r.Type+"."),
						TaskID: r.TaskID, Until: r.Until, UntilDone: r.UntilDone})
				}
				slices.SortFunc(views, func(a, b reservationView) int { return a.Until.Compare(b.Until) })
				if c.json {
					return c.printJSON(views)
				}
				if len(views) == 0 {
					fmt.Fprintln(c.stdout, "no uniqueness reservations")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "TYPE", "KEY HASH", "TASK", "UNTIL", "RELEASED")
				for _, v := range views {
					rel := "at the end of the period"
					if v.UntilDone {
						rel = "when the task succeeds"
					}
					t.row(v.Type, v.Hash, v.TaskID, when(v.Until, now), rel)
				}
				return t.flush()
			},
		},
	}
}

// blockedViews lists the keys held up: tasks that failed for good, heads
// waiting for a retry, partitions a breaker paused.
func blockedViews(ctx context.Context, op *inspect.Operator) ([]blockedView, error) {
	bs, err := op.BlockedTasks(ctx)
	if err != nil {
		return nil, err
	}
	parts, err := op.OrderingPartitions(ctx)
	if err != nil {
		return nil, err
	}
	views := []blockedView{}
	held := map[string]bool{}
	for _, b := range bs {
		held[b.TaskID] = true
		views = append(views, blockedView{Reason: "failed", Type: b.Type, Key: b.Key, TaskID: b.TaskID, Error: b.Error,
			Since: b.Since, Attempts: b.Attempts, Resolution: b.Resolution})
	}
	for _, p := range parts {
		switch {
		case p.Head != nil && p.Head.Retrying && !held[p.Head.TaskID]:
			views = append(views, blockedView{Reason: "retrying", Type: p.Type, Key: p.Head.Key, TaskID: p.Head.TaskID,
				Partition: &p.Partition, Pending: p.Pending})
		case p.PausedUntil != "":
			views = append(views, blockedView{Reason: "paused", Type: p.Type, Partition: &p.Partition, Pending: p.Pending,
				PausedUntil: p.PausedUntil})
		}
	}
	return views, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
