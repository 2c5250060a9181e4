package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
)

// dlqFilterFlags are the filters of the dead-letter API as flags.
type dlqFilterFlags struct {
	typ, reason, errContains string
	since, until             string
	task                     string
}

// reasons are the values --reason accepts.
var reasons = []dlq.Reason{dlq.ReasonPermanent, dlq.ReasonDecode, dlq.ReasonMaxDeliveries, dlq.ReasonInvalid, dlq.ReasonStranded, dlq.ReasonConflict, dlq.ReasonVersion}

func reasonList() string {
	var s []string
	for _, r := range reasons {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

func (f *dlqFilterFlags) register(fs *flag.FlagSet) {
	*f = dlqFilterFlags{}
	fs.StringVar(&f.typ, "type", "", "task type")
	fs.StringVar(&f.task, "task", "", "task ID: the records of one task")
	fs.StringVar(&f.reason, "reason", "", "one of "+reasonList())
	fs.StringVar(&f.errContains, "error", "", "last error contains this text (any case)")
	fs.StringVar(&f.since, "since", "", "stored at or after: RFC 3339 time or a duration ago (1h)")
	fs.StringVar(&f.until, "until", "", "stored at or before: RFC 3339 time or a duration ago")
}

func (f *dlqFilterFlags) filter(now time.Time) (dlq.Filter, error) {
	out := dlq.Filter{Type: f.typ, ErrorContains: f.errContains, TaskID: f.task}
	if r := dlq.Reason(f.reason); r != "" && !slices.Contains(reasons, r) {
		return out, usagef("--reason %q: want one of %s", f.reason, reasonList())
	}
	out.Reason = dlq.Reason(f.reason)
	var err error
	if out.From, err = pointInTime(f.since, now); err != nil {
		return out, usagef("--since: %v", err)
	}
	if out.To, err = pointInTime(f.until, now); err != nil {
		return out, usagef("--until: %v", err)
	}
	return out, nil
}

func (f *dlqFilterFlags) empty() bool { return *f == dlqFilterFlags{} }

// args returns the flags that give the same filter again, for a hint the
// operator can paste: relative times become the absolute times they meant.
func (f *dlqFilterFlags) args(resolved dlq.Filter) string {
	var b strings.Builder
	add := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, " --%s %s", name, shellQuote(v))
		}
	}
	add("type", f.typ)
	add("task", f.task)
	add("reason", f.reason)
	add("error", f.errContains)
	if f.since != "" {
		add("since", resolved.From.UTC().Format(time.RFC3339))
	}
	if f.until != "" {
		add("until", resolved.To.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell unless it needs no quoting.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:=+/@", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pointInTime parses an RFC 3339 time or a duration before now.
func pointInTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time or a duration like 2h", s)
	}
	return t, nil
}

// deadView is a dead letter as the CLI prints it in JSON.
type deadView struct {
	Seq              uint64              `json:"seq"`
	TaskID           string              `json:"task_id"`
	Type             string              `json:"type"`
	Priority         framework.Priority  `json:"priority"`
	Reason           string              `json:"reason"`
	Deliveries       int                 `json:"deliveries"`
	LastError        string              `json:"last_error,omitempty"`
	LastErrorAttempt int                 `json:"last_error_attempt,omitempty"`
	FirstFailure     time.Time           `json:"first_failure,omitzero"`
	LastFailure      time.Time           `json:"last_failure,omitzero"`
	DeadAt           time.Time           `json:"dead_at,omitzero"`
	DeadCount        int                 `json:"dead_count,omitempty"`
	RoutedBy         string              `json:"routed_by,omitempty"`
	OriginalSubject  string              `json:"original_subject,omitempty"`
	OriginalSeq      uint64              `json:"original_seq,omitempty"`
	Stored           time.Time           `json:"stored"`
	PayloadOmitted   bool                `json:"payload_omitted,omitempty"`
	Payload          json.RawMessage     `json:"payload,omitempty"`
	PayloadBase64    []byte              `json:"payload_base64,omitempty"`
	Headers          map[string][]string `json:"headers,omitempty"`
}

func viewDead(d *dlq.Record, full bool) deadView {
	v := deadView{Seq: d.Seq, TaskID: d.TaskID, Type: d.Type, Priority: d.Priority, Reason: string(d.Reason),
		Deliveries: d.Deliveries, LastError: d.LastError, LastErrorAttempt: d.LastErrorAttempt,
		FirstFailure: d.FirstFailure, LastFailure: d.LastFailure, DeadAt: d.DeadAt, DeadCount: d.DeadCount,
		RoutedBy: d.RoutedBy, OriginalSubject: d.OriginalSubject, OriginalSeq: d.OriginalSeq, Stored: d.Time,
		PayloadOmitted: d.PayloadOmitted}
	if full {
		v.Headers = d.Headers
		if v.Payload = payloadJSON(d.Payload); v.Payload == nil {
			v.PayloadBase64 = d.Payload
		}
	}
	return v
}

func dlqCommands() []*command {
	var ls struct {
		f     dlqFilterFlags
		limit int
		after uint64
	}
	var rp struct {
		f   dlqFilterFlags
		all bool
	}
	var pg struct {
		f   dlqFilterFlags
		all bool
		yes bool
	}
	return []*command{
		{
			name:    "dlq ls",
			summary: "list dead letters, oldest first, with the API's filters",
			flags: func(fs *flag.FlagSet, c *cli) {
				ls.f.register(fs)
				fs.IntVar(&ls.limit, "limit", dlq.DefaultPageLimit, "most records listed (at most 1000)")
				fs.Uint64Var(&ls.after, "after", 0, "start after this sequence (the cursor a previous page printed)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("dlq ls takes no arguments")
				}
				f, err := ls.f.filter(time.Now())
				if err != nil {
					return err
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				dls, next, err := dlq.New(s.cl).List(ctx, f, dlq.Page{Limit: ls.limit, After: ls.after})
				if err != nil {
					return err
				}
				if c.json {
					out := struct {
						DeadLetters []deadView `json:"dead_letters"`
						Next        uint64     `json:"next,omitempty"`
					}{DeadLetters: []deadView{}, Next: next}
					for i := range dls {
						out.DeadLetters = append(out.DeadLetters, viewDead(&dls[i], false))
					}
					return c.printJSON(out)
				}
				if len(dls) == 0 {
					fmt.Fprintln(c.stdout, "no dead letters")
					return nil
				}
				now := time.Now()
				t := newTable(c.stdout, "SEQ", "TYPE", "PRIORITY", "TASK ID", "REASON", "ATTEMPTS", "DIED", "LAST ERROR")
				for _, d := range dls {
					t.row(d.Seq, d.Type, d.Priority, d.TaskID, d.Reason, d.Deliveries, age(d.Time, now)+" ago", cut(d.LastError, 60))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if next > 0 {
					fmt.Fprintf(c.stdout, "more: jetflow dlq ls%s --after %d\n", ls.f.args(f), next)
				}
				return nil
			},
		},
		{
			name:    "dlq get",
			args:    "SEQ",
			summary: "show one dead letter with its headers and payload",
			run: func(ctx context.Context, c *cli, args []string) error {
				seq, err := oneSeq("dlq get", args)
				if err != nil {
					return err
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				d, err := dlq.New(s.cl).Get(ctx, seq)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(viewDead(d, true))
				}
				now := time.Now()
				t := newTable(c.stdout, "FIELD", "VALUE")
				t.row("seq", d.Seq)
				t.row("task", fmt.Sprintf("%s %s (%s)", d.Type, d.TaskID, d.Priority))
				t.row("reason", d.Reason)
				t.row("attempts", d.Deliveries)
				t.row("last error", fmt.Sprintf("%s (attempt %d)", d.LastError, d.LastErrorAttempt))
				t.row("failures", when(d.FirstFailure, now)+" … "+when(d.LastFailure, now))
				t.row("died", when(d.Time, now))
				t.row("died before", d.DeadCount-1)
				t.row("routed by", d.RoutedBy)
				t.row("original", fmt.Sprintf("%s seq %d", d.OriginalSubject, d.OriginalSeq))
				keys := make([]string, 0, len(d.Headers))
				for k := range d.Headers {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				for _, k := range keys {
					t.row("header "+k, strings.Join(d.Headers[k], ", "))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if d.PayloadOmitted {
					fmt.Fprintln(c.stdout, "\npayload omitted (too large for a record): this record cannot be replayed")
				} else if len(d.Payload) > 0 {
					fmt.Fprintf(c.stdout, "\npayload (%d bytes):\n%s\n", len(d.Payload), printable(d.Payload))
				}
				fmt.Fprintf(c.stdout, "\nreplay it: jetflow dlq replay %d\n", d.Seq)
				return nil
			},
		},
		{
			name:    "dlq replay",
			args:    "[SEQ...]",
			summary: "enqueue dead letters again (by sequence, or --all with filters) and delete their records",
			flags: func(fs *flag.FlagSet, c *cli) {
				rp.f.register(fs)
				fs.BoolVar(&rp.all, "all", false, "replay every record matching the filters")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if rp.all == (len(args) > 0) {
					return usagef("give record sequences, or --all (with optional filters)")
				}
				if !rp.all && !rp.f.empty() {
					return usagef("filters go with --all")
				}
				s, err := c.connect()
				if err != nil {
					return err
				}
				defer s.Close()
				dl := dlq.New(s.cl)
				if rp.all {
					f, err := rp.f.filter(time.Now())
					if err != nil {
						return err
					}
					p := &progress{c: c, verb: "examined"}
					n, err := dl.ReplayFilter(ctx, f, p.update)
					p.end()
					if c.json && err == nil {
						return c.printJSON(map[string]any{"replayed": n})
					}
					fmt.Fprintf(c.stdout, "replayed %d task(s)\n", n)
					return err
				}
				var out []map[string]any
				for _, a := range args {
					seq, err := oneSeq("dlq replay", []string{a})
					if err != nil {
						return err
					}
					octx, cancel := context.WithTimeout(ctx, c.conn.timeout)
					info, err := dl.Replay(octx, seq)
					cancel()
					if err != nil {
						return err
					}
					out = append(out, map[string]any{"seq": seq, "id": info.ID, "type": info.Type, "priority": info.Priority, "task_seq": info.Sequence})
					if !c.json {
						fmt.Fprintf(c.stdout, "replayed %d: %s %s (%s) enqueued again\n", seq, info.Type, info.ID, info.Priority)
					}
				}
				if c.json {
					return c.printJSON(out)
				}
				return nil
			},
		},
		{
			name:    "dlq purge",
			summary: "delete dead letters matching the filters (--all for every record); without --yes, a dry run",
			flags: func(fs *flag.FlagSet, c *cli) {
				pg.f.register(fs)
				fs.BoolVar(&pg.all, "all", false, "purge every record (without filters)")
				fs.BoolVar(&pg.yes, "yes", false, "confirm: records are deleted for good")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("dlq purge takes filters, not arguments")
				}
				if pg.f.empty() && !pg.all {
					return usagef("give filters, or --all to purge every record")
				}
				f, err := pg.f.filter(time.Now())
				if err != nil {
					return err
				}
				s, err := c.connect()
				if err != nil {
					return err
				}
				defer s.Close()
				if !pg.yes {
					ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
					defer cancel()
					dls, next, err := dlq.New(s.cl).List(ctx, f, dlq.Page{Limit: dlq.MaxPageLimit})
					if err != nil {
						return err
					}
					// A dry run: it succeeds, and says what --yes would do.
					if c.json {
						return c.printJSON(map[string]any{"would_purge": len(dls), "more": next > 0, "dry_run": true})
					}
					more := ""
					if next > 0 {
						more = " or more"
					}
					fmt.Fprintf(c.stdout, "would delete %d%s dead letter(s) for good: repeat with --yes to confirm (jetflow dlq ls%s shows them)\n",
						len(dls), more, pg.f.args(f))
					return nil
				}
				p := &progress{c: c, verb: "examined"}
				n, err := dlq.New(s.cl).PurgeProgress(ctx, f, p.update)
				p.end()
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"purged": n})
				}
				fmt.Fprintf(c.stdout, "purged %d dead letter(s)\n", n)
				return nil
			},
		},
	}
}

func oneSeq(cmd string, args []string) (uint64, error) {
	if len(args) != 1 {
		return 0, usagef("%s takes one record sequence (see jetflow dlq ls)", cmd)
	}
	seq, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || seq == 0 {
		return 0, usagef("%q is not a record sequence (a positive number from jetflow dlq ls)", args[0])
	}
	return seq, nil
}
