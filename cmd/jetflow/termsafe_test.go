package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestTermSafe(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text, ünïcode\tand\nlines", "plain text, ünïcode\tand\nlines"},
		{"\x1b]0;owned\x07\x1b[2J", `\x1b]0;owned\x07\x1b[2J`},
		{"amount=100\rAMOUNT=999999", `amount=100\x0dAMOUNT=999999`},
		{"del\x7f nul\x00", `del\x7f nul\x00`},
		{"\u009b2J \u009d0;t\u009c", `\u009b2J \u009d0;t\u009c`},
		{"bad \xff\xc3 utf-8", `bad \xff\xc3 utf-8`},
	}
	for _, c := range cases {
		var b bytes.Buffer
		ts := &termSafe{w: &b}
		if _, err := ts.Write([]byte(c.in)); err != nil {
			t.Fatal(err)
		}
		ts.flush()
		if b.String() != c.want {
			t.Errorf("termSafe(%q) = %q, want %q", c.in, b.String(), c.want)
		}
	}
	// A rune split between two writes is kept whole.
	var b bytes.Buffer
	ts := &termSafe{w: &b}
	in := []byte("é\u009b")
	for i := range in {
		_, _ = ts.Write(in[i : i+1])
	}
	ts.flush()
	if b.String() != `é\u009b` {
		t.Errorf("split writes gave %q", b.String())
	}
	// JSON keeps its meaning.
	var s string
	if err := json.Unmarshal([]byte(`"\u009b"`), &s); err != nil || s != "\u009b" {
		t.Errorf("escaped C1 in JSON decodes to %q, %v", s, err)
	}
}

// Control characters a producer put in a task's headers, payload or error
// reach no terminal raw: not from tasks get, dlq get, dlq ls, and not in
// --json output either.
func TestCommandsPrintNoControlCharacters(t *testing.T) {
	e := newEnv(t)
	const evil = "\x1b]0;owned\x07\x1b[2J\u009b31m\rX"
	ran := make(chan struct{}, 4)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("evil.dead", func(context.Context, *framework.Task) error {
			ran <- struct{}{}
			return framework.Permanent(errors.New("failed: " + evil))
		})
	})
	js, err := e.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	for subject, id := range map[string]string{"jetflow.task.normal.evil.wait": "evil-1", "jetflow.task.normal.evil.dead": "evil-2"} {
		msg := nats.NewMsg(subject)
		msg.Header.Set(framework.HeaderTaskID, id)
		msg.Header.Set(nats.MsgIdHdr, id) // a task claims only the ID it is deduplicated by
		msg.Header.Set("X-Evil", evil)
		msg.Data = []byte("payload " + evil)
		if _, err := js.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Recv(t, ran, waitLong, "the failing task")
	var ls struct {
		DeadLetters []struct{ Seq uint64 } `json:"dead_letters"`
	}
	testutil.Wait(t, waitLong, "its dead letter", func() bool {
		e.ok(t, &ls, "dlq", "ls", "--json")
		return len(ls.DeadLetters) == 1
	})
	for _, args := range [][]string{
		{"tasks", "get", "evil-1"}, {"tasks", "get", "evil-1", "--json"}, {"tasks", "ls"},
		{"dlq", "get", "1"}, {"dlq", "get", "1", "--json"}, {"dlq", "ls"},
	} {
		r := e.ok(t, nil, args...)
		if i := strings.IndexFunc(r.stdout, func(r rune) bool {
			return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f)
		}); i >= 0 {
			t.Errorf("jetflow %v printed control character %q:\n%q", args, r.stdout[i], r.stdout)
		}
		want := `\x1b]0;owned` // text: the escaped header
		if args[len(args)-1] == "--json" {
			want = `\u001b]0;owned` // JSON: the encoder's escape
		}
		if args[1] == "get" && !strings.Contains(r.stdout, want) {
			t.Errorf("jetflow %v does not show the header, escaped (%s):\n%s", args, want, r.stdout)
		}
	}
}
