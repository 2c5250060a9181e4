package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// The commands of task partitions (streams.Config.Partitions, decision
// 046): where each partition is led and what it holds, spreading the
// leaders, and adding partitions to a live deployment.
func partitionCommands() []*command {
	// open connects and returns a JetStream context bounded by --timeout.
	open := func(ctx context.Context, c *cli) (jetstream.JetStream, context.Context, func(), error) {
		s, err := c.connect()
		if err != nil {
			return nil, ctx, func() {}, err
		}
		js, err := jetstream.New(s.nc)
		if err != nil {
			s.Close()
			return nil, ctx, func() {}, err
		}
		octx, cancel := context.WithTimeout(ctx, c.conn.timeout)
		return js, octx, func() { cancel(); s.Close() }, nil
	}
	show := func(ctx context.Context, c *cli, js jetstream.JetStream, leaders []streams.PartitionLeader) error {
		type row struct {
			streams.PartitionLeader
			Messages uint64 `json:"messages"`
		}
		rows := make([]row, 0, len(leaders))
		for _, l := range leaders {
			r := row{PartitionLeader: l}
			if s, err := js.Stream(ctx, l.Stream); err == nil {
				r.Messages = s.CachedInfo().State.Msgs
			}
			rows = append(rows, r)
		}
		if c.json {
			return c.printJSON(rows)
		}
		if l, _, err := streams.DeployedLayout(ctx, js, streams.MustNames(prefixOf(c))); err == nil {
			if l.ByType() {
				fmt.Fprintln(c.stdout, "spread by task type: partition 0 serves every type, each other one the types that hash to it")
			}
			if l.Ordered < l.Partitions {
				fmt.Fprintf(c.stdout, "ordered tasks stay in the first %d partitions (the count before partitions were added)\n", l.Ordered)
			}
			if l.ByType() || l.Ordered < l.Partitions {
				fmt.Fprintln(c.stdout)
			}
		}
		t := newTable(c.stdout, "PARTITION", "STREAM", "LEADER", "PEERS", "MESSAGES")
		for _, r := range rows {
			leader := r.Leader
			if leader == "" {
				leader = "-"
			}
			t.row(r.Partition, r.Stream, leader, strings.Join(r.Peers, ","), r.Messages)
		}
		return t.flush()
	}
	var add struct{ by string }
	return []*command{
		{
			name:    "partitions ls",
			summary: "the task partitions: each one's stream, the server leading it, its peers and the messages it holds",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("partitions ls takes no arguments")
				}
				js, ctx, done, err := open(ctx, c)
				if err != nil {
					return err
				}
				defer done()
				leaders, err := streams.Leaders(ctx, js, c.conn.prefix)
				if err != nil {
					return err
				}
				return show(ctx, c, js, leaders)
			},
		},
		{
			name:    "partitions balance",
			summary: "spread the leaders of replicated task partitions one per server (streams.BalanceLeaders), after a restart moved them",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("partitions balance takes no arguments")
				}
				js, ctx, done, err := open(ctx, c)
				if err != nil {
					return err
				}
				defer done()
				leaders, err := streams.BalanceLeaders(ctx, js, c.conn.prefix)
				if err != nil {
					return err
				}
				return show(ctx, c, js, leaders)
			},
		},
		{
			name: "partitions add",
			args: "N",
			summary: "grow the deployment to N task partitions (streams.Ensure): the new streams are created and their leaders spread; " +
				"running workers and clients use them within a minute, ordered keys keep their partitions (docs/partitions.md)",
			flags: func(fs *flag.FlagSet, c *cli) {
				add.by = ""
				fs.StringVar(&add.by, "by", "", `spread tasks by "task" ID or by "type" (decision 047); chosen with the second partition, kept after (default: the deployed spread, else task)`)
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("partitions add takes the new partition count")
				}
				n, err := strconv.Atoi(args[0])
				if err != nil || streamdefs.ValidatePartitionCount(n) != nil {
					return usagef("partition count %q: want 1 to %d", args[0], streams.MaxPartitions)
				}
				js, ctx, done, err := open(ctx, c)
				if err != nil {
					return err
				}
				defer done()
				cfg, found, err := streams.DeployedConfig(ctx, js, c.conn.prefix)
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("no jetflow deployment with prefix %q: create it with jetflow upgrade", prefixOf(c))
				}
				if n < cfg.Partitions {
					return usagef("the deployment has %d partitions: partitions are added, not removed in place (docs/partitions.md)", cfg.Partitions)
				}
				before := cfg.Partitions
				cfg.Partitions = n
				if add.by != "" {
					if before > 1 && cfg.PartitionBy != streams.PartitionKey(add.by) && !(add.by == string(streams.PartitionByTask) && cfg.PartitionBy == "") {
						return usagef("the deployment's partitions are spread by %s: the spread does not change in place (docs/partitions.md)", cmp.Or(cfg.PartitionBy, streams.PartitionByTask))
					}
					cfg.PartitionBy = streams.PartitionKey(add.by)
				}
				if _, err := streams.Ensure(ctx, js, cfg); err != nil && !errors.Is(err, streams.ErrDrift) {
					return err
				}
				leaders, err := streams.Leaders(ctx, js, c.conn.prefix)
				if err != nil {
					return err
				}
				if !c.json {
					fmt.Fprintf(c.stdout, "%d task partitions (were %d): running workers serve them, and clients spread new tasks over them, within a minute\n\n", n, before)
				}
				return show(ctx, c, js, leaders)
			},
		},
	}
}
