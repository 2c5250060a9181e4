package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// explain turns an error into a message that says what to do, and an exit
// status.
func explain(err error, c *cli) (string, int) {
	var ce *connectError
	if refused := c.refused.list(); len(refused) > 0 && !errors.As(err, &ce) {
		// Whatever the command reports (most often a timeout), the
		// server's refusal is the cause.
		return fmt.Sprintf("%v\n  the server refused this user: %s\n  grant the permission (the operator role of docs/security.md covers every read command), or set --inbox-prefix to the prefix the user may subscribe to",
			err, strings.Join(refused, "; ")), exitFailed
	}
	switch {
	case errors.As(err, &ce):
		hint := "is the server running? Pass -s URL, set NATS_URL, or use --context NAME"
		if isAuthErr(err) {
			hint = "the server refused the credentials: check --creds, --nkey, --user/--password or the context"
		} else if strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "x509") {
			hint = "TLS failed: check --tlsca, --tlscert/--tlskey, or --tlsfirst"
		}
		return fmt.Sprintf("%v\n  %s", err, hint), exitConnect
	case errors.Is(err, framework.ErrTopologyMissing):
		return fmt.Sprintf("%v\n  no jetflow streams under prefix %q on %s: run jetflow upgrade (or start a worker: it creates them), or pass the right --prefix",
			err, prefixOf(c), c.conn.resolvedURL), exitFailed
	case errors.Is(err, framework.ErrNotFound), errors.Is(err, workflow.ErrRunNotFound):
		return err.Error(), exitFailed
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Sprintf("%v\n  the server did not answer within --timeout %v: is JetStream enabled, and is the cluster healthy? Raise --timeout for large queues", err, c.conn.timeout), exitFailed
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrJetStreamNotEnabled):
		return fmt.Sprintf("%v\n  enable JetStream on the server (nats-server -js)", err), exitFailed
	case errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation"):
		return fmt.Sprintf("%v\n  the user lacks a permission jetflow needs ($JS.API.> requests for reads; see docs/security.md)", err), exitFailed
	}
	return err.Error(), exitFailed
}

func prefixOf(c *cli) string {
	if c.conn.prefix != "" {
		return c.conn.prefix
	}
	return streams.DefaultPrefix
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func marshalCompact(v any) ([]byte, error) { return json.Marshal(v) }

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(toAny(header)...)
	return t
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func (t *table) row(cols ...any) {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = strings.ReplaceAll(fmt.Sprint(c), "\t", " ")
	}
	fmt.Fprintln(t.w, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// when formats a time for tables: local time with the distance from now.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	rel := "in " + short(d)
	if d < 0 {
		rel = short(-d) + " ago"
	}
	return t.Local().Format("2006-01-02 15:04:05") + " (" + rel + ")"
}

// short formats a duration to about three significant figures.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%s", d/(24*time.Hour), (d % (24 * time.Hour)).Round(time.Hour))
}

// age formats how long ago t was, or "-".
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return short(now.Sub(t))
}

// cut shortens s to n runes for a table cell.
func cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// payloadJSON returns data as a JSON value when it is one, else nil.
func payloadJSON(data []byte) json.RawMessage {
	if len(data) > 0 && json.Valid(data) {
		return json.RawMessage(data)
	}
	return nil
}

// progress reports a long operation's advance on stderr: one redrawn line on
// a terminal, a line per step otherwise.
type progress struct {
	c    *cli
	verb string
	last time.Time
	any  bool
}

func (p *progress) update(done, total int) {
	now := time.Now()
	if p.c.stderrTerminal && now.Sub(p.last) < 100*time.Millisecond && done < total {
		return
	}
	p.last = now
	bar := ""
	if total > 0 {
		const width = 30
		fill := min(width, done*width/total)
		bar = "[" + strings.Repeat("#", fill) + strings.Repeat(".", width-fill) + "] "
	}
	line := fmt.Sprintf("%s%s %d/%d", bar, p.verb, done, total)
	if p.c.stderrTerminal {
		fmt.Fprintf(p.c.rawStderr, "\r%s", line) // the CLI's own text; \r redraws the line
	} else {
		fmt.Fprintln(p.c.stderr, line)
	}
	p.any = true
}

func (p *progress) end() {
	if p.any && p.c.stderrTerminal {
		fmt.Fprintln(p.c.stderr)
	}
}
