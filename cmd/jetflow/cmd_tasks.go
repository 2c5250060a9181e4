package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// priorityList is a repeatable --priority flag.
type priorityList []framework.Priority

func (p *priorityList) String() string {
	var s []string
	for _, v := range *p {
		s = append(s, v.String())
	}
	return strings.Join(s, ",")
}

func (p *priorityList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		pr, err := streams.ParsePriority(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		if !slices.Contains(*p, pr) {
			*p = append(*p, pr)
		}
	}
	return nil
}

// listStates maps the CLI's --state values to task states.
var listStates = map[string]framework.TaskState{
	"waiting":   framework.StatePending,
	"pending":   framework.StatePending,
	"scheduled": framework.StateScheduled,
	"running":   framework.StateRunning,
	"retrying":  framework.StateRetrying,
}

// taskView is a task as the CLI prints it in JSON.
type taskView struct {
	inspect.TaskSummary
	Payload       json.RawMessage       `json:"payload,omitempty"`
	PayloadBase64 []byte                `json:"payload_base64,omitempty"`
	Headers       map[string][]string   `json:"headers,omitempty"`
	Record        *framework.TaskRecord `json:"record,omitempty"`
}

func taskCommands() []*command {
	var ls struct {
		typ   string
		prios priorityList
		state string
		limit int
	}
	var enq struct {
		prios   priorityList
		in      time.Duration
		at      string
		id      string
		headers headerList
		raw     bool
	}
	return []*command{
		{
			name:    "tasks ls",
			summary: "list tasks waiting, scheduled (with type and due time), running (with progress) or retrying (with last error)",
			flags: func(fs *flag.FlagSet, c *cli) {
				ls.prios = nil
				fs.StringVar(&ls.typ, "type", "", "task type")
				fs.Var(&ls.prios, "priority", "priority: critical, high, normal or low (repeatable)")
				fs.StringVar(&ls.state, "state", "waiting", "waiting, scheduled, running or retrying")
				fs.IntVar(&ls.limit, "limit", inspect.DefaultTaskListLimit, "most tasks listed")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("tasks ls takes no arguments (did you mean --type %s?)", args[0])
				}
				st, ok := listStates[ls.state]
				if !ok {
					return usagef("--state %q: want waiting, scheduled, running or retrying", ls.state)
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				tasks, err := s.op.ListTasks(ctx, inspect.TaskFilter{State: st, Type: ls.typ, Priorities: ls.prios, Limit: ls.limit})
				if err != nil {
					return err
				}
				var progress []framework.Progress
				if st == framework.StateRunning {
					if progress, err = progressOf(ctx, s, tasks); err != nil {
						return err
					}
				}
				if c.json {
					return c.printJSON(listViews(tasks, progress))
				}
				if len(tasks) == 0 {
					fmt.Fprintf(c.stdout, "no %s tasks\n", ls.state)
					return nil
				}
				now := time.Now()
				cols := []string{"ID", "TYPE", "PRIORITY", "STATE", "ENQUEUED", "DUE", "ATTEMPT", "LAST ERROR"}
				if progress != nil {
					cols = append(cols, "PROGRESS")
				}
				t := newTable(c.stdout, cols...)
				var broken []inspect.TaskSummary
				for i, k := range tasks {
					attempt := "-"
					if k.Attempt > 0 {
						attempt = fmt.Sprint(k.Attempt)
					}
					state := stateName(k.State)
					if k.Broken != "" {
						state = "BROKEN"
						broken = append(broken, k)
					}
					row := []any{k.ID, k.Type, k.Priority, state, age(k.EnqueuedAt, now) + " ago", when(k.DueAt, now), attempt, cut(k.LastError, 60)}
					if progress != nil {
						p := "-"
						if !progress[i].IsZero() {
							p = cut(progress[i].String(), 60)
						}
						row = append(row, p)
					}
					t.row(row...)
				}
				if err := t.flush(); err != nil {
					return err
				}
				for _, k := range broken {
					fmt.Fprintf(c.stdout, "BROKEN %s: %s\n", k.ID, k.Broken)
				}
				if len(tasks) == ls.limit {
					fmt.Fprintf(c.stdout, "(first %d; raise --limit for more)\n", ls.limit)
				}
				return nil
			},
		},
		{
			name:    "tasks get",
			args:    "ID",
			summary: "show one task: state, headers, payload, attempts, last error, due time, progress, result",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("tasks get takes one task ID")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				d, err := s.op.FindTask(ctx, args[0])
				if errors.Is(err, framework.ErrNotFound) {
					// Gone from the task stream: dead-lettered, perhaps.
					dead, derr := deadLettersOf(ctx, s, args[0])
					if derr != nil || len(dead) == 0 {
						return err
					}
					return printDeadPointer(c, args[0], dead)
				}
				if err != nil {
					return err
				}
				v := taskView{TaskSummary: d.TaskSummary, Headers: d.Headers, Record: d.Record}
				if v.Payload = payloadJSON(d.Payload); v.Payload == nil {
					v.PayloadBase64 = d.Payload
				}
				if c.json {
					return c.printJSON(v)
				}
				now := time.Now()
				t := newTable(c.stdout, "FIELD", "VALUE")
				t.row("id", d.ID)
				t.row("type", d.Type)
				t.row("priority", d.Priority)
				t.row("state", stateName(d.State))
				if d.Broken != "" {
					t.row("BROKEN", d.Broken)
				}
				if d.Subject != "" {
					t.row("subject", fmt.Sprintf("%s (seq %d)", d.Subject, d.Sequence))
				}
				t.row("enqueued", when(d.EnqueuedAt, now))
				if !d.DueAt.IsZero() {
					t.row("due", when(d.DueAt, now))
				}
				if d.Attempt > 0 {
					t.row("attempt", d.Attempt)
					t.row("last error", d.LastError)
				}
				if r := d.Record; r != nil {
					t.row("record", fmt.Sprintf("%s, attempt %d/%d, updated %s", r.State, r.Attempt, r.MaxAttempts, when(r.UpdatedAt, now)))
					if r.Error != "" {
						t.row("record error", r.Error)
					}
					if !r.Progress.IsZero() {
						t.row("progress", r.Progress.String())
					}
					if len(r.Result) > 0 {
						t.row("result", cut(string(r.Result), 200))
					}
				}
				var keys []string
				for k := range d.Headers {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				for _, k := range keys {
					t.row("header "+k, strings.Join(d.Headers[k], ", "))
				}
				if d.State == framework.StateDead {
					if dead, err := deadLettersOf(ctx, s, d.ID); err == nil {
						for _, r := range dead {
							t.row("dead letter", fmt.Sprintf("seq %d, %s (jetflow dlq get %d)", r.Seq, r.Reason, r.Seq))
						}
					}
				}
				if err := t.flush(); err != nil {
					return err
				}
				if len(d.Payload) > 0 {
					fmt.Fprintf(c.stdout, "\npayload (%d bytes):\n%s\n", len(d.Payload), printable(d.Payload))
				}
				return nil
			},
		},
		{
			name:    "tasks cancel",
			args:    "ID",
			summary: "cancel a delayed task still waiting in its schedule",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return usagef("tasks cancel takes one task ID")
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				if err := s.in.CancelTask(ctx, args[0]); err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"id": args[0], "cancelled": true})
				}
				fmt.Fprintf(c.stdout, "cancelled %s\n", args[0])
				return nil
			},
		},
		{
			name:    "enqueue",
			args:    "TYPE PAYLOAD",
			summary: "enqueue a task; PAYLOAD is JSON, @FILE, or - for standard input",
			flags: func(fs *flag.FlagSet, c *cli) {
				enq.prios, enq.headers = nil, nil
				fs.Var(&enq.prios, "priority", "priority: critical, high, normal (default) or low")
				fs.DurationVar(&enq.in, "in", 0, "run after this delay")
				fs.StringVar(&enq.at, "at", "", "run at this time (RFC 3339)")
				fs.StringVar(&enq.id, "id", "", "task ID (deduplicates within the stream's window)")
				fs.Var(&enq.headers, "header", "custom header KEY=VALUE (repeatable)")
				fs.BoolVar(&enq.raw, "raw", false, "send PAYLOAD as raw bytes, not JSON")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 2 {
					return usagef("enqueue takes a task type and a payload")
				}
				payload, err := readPayload(args[1], os.Stdin)
				if err != nil {
					return usagef("payload: %v", err)
				}
				var body any = json.RawMessage(payload)
				if enq.raw {
					body = payload
				} else if !json.Valid(payload) {
					return usagef("payload is not valid JSON (quote strings: '\"text\"'), or pass --raw")
				}
				var opts []framework.EnqueueOption
				switch len(enq.prios) {
				case 0:
				case 1:
					opts = append(opts, framework.WithPriority(enq.prios[0]))
				default:
					return usagef("one --priority only")
				}
				if enq.in != 0 && enq.at != "" {
					return usagef("--in and --at exclude each other")
				}
				if enq.in < 0 {
					return usagef("--in %v: want a positive delay", enq.in)
				}
				if enq.in > 0 {
					opts = append(opts, framework.In(enq.in))
				}
				if enq.at != "" {
					at, err := time.Parse(time.RFC3339, enq.at)
					if err != nil {
						return usagef("--at %q: want RFC 3339, like 2026-01-02T15:04:05Z", enq.at)
					}
					opts = append(opts, framework.At(at))
				}
				if enq.id != "" {
					opts = append(opts, framework.WithID(enq.id))
				}
				for _, h := range enq.headers {
					opts = append(opts, framework.WithHeader(h[0], h[1]))
				}
				s, ctx, done, err := c.open(ctx)
				if err != nil {
					return err
				}
				defer done()
				info, err := s.cl.Enqueue(ctx, args[0], body, opts...)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(map[string]any{"id": info.ID, "type": info.Type, "priority": info.Priority,
						"subject": info.Subject, "seq": info.Sequence, "duplicate": info.Duplicate, "due_at": info.ScheduledFor})
				}
				msg := fmt.Sprintf("enqueued %s %s (%s) as %s", info.Type, info.ID, info.Priority, info.Subject)
				if !info.ScheduledFor.IsZero() {
					msg += ", due " + when(info.ScheduledFor, time.Now())
				}
				if info.Duplicate {
					msg += " (duplicate: a task with this ID was enqueued recently; nothing new stored)"
				}
				fmt.Fprintln(c.stdout, msg)
				return nil
			},
		},
	}
}

// listView is a listed task as the CLI prints it in JSON: with its
// progress when running tasks are listed and it reported one.
type listView struct {
	inspect.TaskSummary
	Progress *framework.Progress `json:"progress,omitempty"`
}

func listViews(tasks []inspect.TaskSummary, progress []framework.Progress) []listView {
	out := make([]listView, len(tasks))
	for i := range tasks {
		out[i].TaskSummary = tasks[i]
		if progress != nil && !progress[i].IsZero() {
			out[i].Progress = &progress[i]
		}
	}
	return out
}

// progressOf reads the progress of each running task from its state
// record (one request per task: a listing holds at most --limit); a task
// without a record has none.
func progressOf(ctx context.Context, s *session, tasks []inspect.TaskSummary) ([]framework.Progress, error) {
	out := make([]framework.Progress, len(tasks))
	kv, err := s.cl.JetStream().KeyValue(ctx, s.cl.Names().StateBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("progress: %w", err)
	}
	for i, k := range tasks {
		e, err := kv.Get(ctx, staterec.Key(k.ID))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("progress of task %s: %w", k.ID, err)
		}
		var rec framework.TaskRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.ID == k.ID && rec.State == framework.StateRunning {
			out[i] = rec.Progress
		}
	}
	return out, nil
}

// deadLettersOf returns the dead-letter records of task id, oldest first
// (at most one page).
func deadLettersOf(ctx context.Context, s *session, id string) ([]dlq.Record, error) {
	dls, _, err := dlq.New(s.cl).List(ctx, dlq.Filter{TaskID: id}, dlq.Page{Limit: dlq.MaxPageLimit})
	return dls, err
}

// printDeadPointer answers "tasks get" for a task that is only in the
// dead-letter stream.
func printDeadPointer(c *cli, id string, dead []dlq.Record) error {
	if c.json {
		out := struct {
			ID          string     `json:"id"`
			State       string     `json:"state"`
			DeadLetters []deadView `json:"dead_letters"`
		}{ID: id, State: string(framework.StateDead)}
		for i := range dead {
			out.DeadLetters = append(out.DeadLetters, viewDead(&dead[i], false))
		}
		return c.printJSON(out)
	}
	fmt.Fprintf(c.stdout, "task %s is not in the task stream: it was dead-lettered\n", id)
	t := newTable(c.stdout, "SEQ", "TYPE", "REASON", "DIED", "LAST ERROR")
	now := time.Now()
	for _, d := range dead {
		t.row(d.Seq, d.Type, d.Reason, age(d.Time, now)+" ago", cut(d.LastError, 60))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "show one: jetflow dlq get %d\n", dead[len(dead)-1].Seq)
	return nil
}

func stateName(s framework.TaskState) string {
	if s == framework.StatePending {
		return "waiting"
	}
	return string(s)
}

// headerList is a repeatable KEY=VALUE flag.
type headerList [][2]string

func (h *headerList) String() string { return fmt.Sprint(*h) }

func (h *headerList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*h = append(*h, [2]string{k, val})
	return nil
}

// readPayload reads a payload argument: literal, @file or - (stdin).
func readPayload(arg string, stdin io.Reader) ([]byte, error) {
	switch {
	case arg == "-":
		return io.ReadAll(io.LimitReader(stdin, 64<<20))
	case strings.HasPrefix(arg, "@"):
		return os.ReadFile(arg[1:])
	}
	return []byte(arg), nil
}

// printable returns data for a terminal: text as is, binary as a note.
func printable(data []byte) string {
	if p := payloadJSON(data); p != nil {
		var v any
		if json.Unmarshal(p, &v) == nil {
			if b, err := json.MarshalIndent(v, "", "  "); err == nil {
				return string(b)
			}
		}
	}
	for _, r := range string(data) {
		if r == '\uFFFD' || (r < 0x20 && r != '\n' && r != '\t' && r != '\r') {
			return fmt.Sprintf("(%d bytes of binary data; use --json for base64)", len(data))
		}
	}
	return string(data)
}
