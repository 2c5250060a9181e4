package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/workflow"
)

// workflowEventCommands are the commands that deliver events to waiting
// workflow runs (workflow.WaitEvent).
func workflowEventCommands(wfClient func(s *session) (*workflow.Client, error)) []*command {
	var sig struct {
		run bool
		id  string
	}
	return []*command{{
		name: "workflows signal",
		args: "KEY|RUN [PAYLOAD]",
		summary: "deliver an event to the runs waiting for its key (or, with --run, to the step a run waits with); " +
			"PAYLOAD is JSON, @file or - (stdin)",
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&sig.run, "run", false, "the argument is a run ID: signal the key its waiting step waits for")
			fs.StringVar(&sig.id, "id", "", "event ID: a second event with the same ID within the duplicate window is dropped")
		},
		run: func(ctx context.Context, c *cli, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("workflows signal takes a key (or with --run a run ID) and an optional payload")
			}
			var payload json.RawMessage
			if len(args) == 2 {
				data, err := readPayload(args[1], os.Stdin)
				if err != nil {
					return err
				}
				payload = data
			}
			var opts []workflow.SignalOption
			if sig.id != "" {
				opts = append(opts, workflow.WithEventID(sig.id))
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
			var info workflow.EventInfo
			if sig.run {
				info, err = wc.SignalRun(ctx, args[0], payload, opts...)
			} else {
				info, err = wc.Signal(ctx, args[0], payload, opts...)
			}
			if err != nil {
				return err
			}
			if c.json {
				if info.Waiting == nil {
					info.Waiting = []string{}
				}
				return c.printJSON(info)
			}
			what := fmt.Sprintf("event %s stored (sequence %d)", info.Key, info.Seq)
			if info.Duplicate {
				what = fmt.Sprintf("event %s dropped: a duplicate of the event with ID %s", info.Key, sig.id)
			}
			switch {
			case info.WaitingErr != nil:
				fmt.Fprintf(c.stdout, "%s; the waiting runs could not be listed: %v\n", what, info.WaitingErr)
			case len(info.Waiting) == 0:
				fmt.Fprintf(c.stdout, "%s; no run waits for it now: it is kept for %s for a run that starts waiting\n", what, short(workflow.DefaultEventRetention))
			default:
				fmt.Fprintf(c.stdout, "%s; resuming %d waiting run(s): %s\n", what, len(info.Waiting), strings.Join(info.Waiting, " "))
			}
			return nil
		},
	}}
}

// stepWaits says what a sleeping or waiting step waits for (a wake time, an
// event, a child run), and how far a fan-out got (items done/total), for a
// table cell: "-" for other steps.
func stepWaits(st *workflow.StepStatus, now time.Time) string {
	if st.Items > 0 {
		s := fmt.Sprintf("items %d/%d", st.ItemsDone, st.Items)
		if st.ItemsFailed > 0 {
			s += fmt.Sprintf(" (%d failed)", st.ItemsFailed)
		}
		return s
	}
	switch st.State {
	case workflow.StepSleeping:
		return "wake " + when(st.WakeAt, now)
	case workflow.StepWaiting:
		s := "event " + cut(st.EventKey, 60)
		if !st.Deadline.IsZero() {
			s += " until " + when(st.Deadline, now)
		}
		return s
	case workflow.StepChildRunning:
		return "child " + st.ChildRun
	}
	if st.TimedOut {
		return "timed out"
	}
	return "-"
}

// runWaits says what a run's sleeping and waiting steps (and those waiting
// for a child run) wait for: the first one, and how many more.
func runWaits(r *workflow.Run, now time.Time) string {
	var first string
	n := 0
	for _, st := range r.Steps {
		if st.State != workflow.StepSleeping && st.State != workflow.StepWaiting && st.State != workflow.StepChildRunning {
			continue
		}
		if n == 0 {
			first = stepWaits(st, now)
		}
		n++
	}
	switch n {
	case 0:
		return "-"
	case 1:
		return first
	}
	return fmt.Sprintf("%s (+%d)", first, n-1)
}
