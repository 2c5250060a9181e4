package stranded_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/internal/stranded"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errMissing = errors.New("topology missing")

// unreadNonNormal says the worker reads type "a" at normal priority only,
// and no ordered tasks of "b".
func unreadNonNormal(names streams.Names) func(string) (string, string) {
	return func(subject string) (string, string) {
		if p, typ, err := names.ParseTaskSubject(subject); err == nil {
			if typ == "a" && p != streams.PriorityNormal {
				return typ, "not served"
			}
			return typ, ""
		}
		if typ, _, err := names.ParseOrderedSubject(subject); err == nil && typ == "b" {
			return typ, "not ordered"
		}
		return "", ""
	}
}

func TestCheckerFindsAndReportsOnce(t *testing.T) {
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	ctx := t.Context()
	names := streams.MustNames("jf")
	if _, err := streams.Ensure(ctx, js, streams.Config{Prefix: "jf"}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	low := names.TaskSubject(streams.PriorityLow, "a")
	high := names.TaskSubject(streams.PriorityHigh, "a")
	publish(names.TaskSubject(streams.PriorityNormal, "a"), 2) // read: not stranded
	publish(low, 3)
	publish(names.OrderedSubject("b", 7), 1)
	publish(names.LegacyOrderedSubject("b", 7), 1)
	publish(names.TaskSubject(streams.PriorityLow, "other"), 1) // not the worker's type

	var reported []string
	c := &stranded.Checker{JS: js, NC: nc, Streams: func() []streams.Names { return []streams.Names{names} },
		Unread: unreadNonNormal(names), Missing: errMissing,
		Stranded: func(s stranded.Subject) { reported = append(reported, s.Subject) },
		Failed:   func(err error) { t.Errorf("check failed: %v", err) }}
	if c.Found() != nil || stranded.FoundAs(c, func(s stranded.Subject) stranded.Subject { return s }) != nil {
		t.Fatal("findings before the first check")
	}
	c.Check(ctx)
	found := c.Found()
	type public stranded.Subject
	if as := stranded.FoundAs(c, func(s stranded.Subject) public { return public(s) }); len(as) != len(found) || as[0].Subject != found[0].Subject {
		t.Errorf("FoundAs = %+v, want %+v", as, found)
	}
	if len(found) != 3 || len(reported) != 3 {
		t.Fatalf("found %+v, reported %v, want the low subject of a and the ordered subjects of b", found, reported)
	}
	for _, s := range found {
		if s.Subject == low && (s.Tasks != 3 || s.Why != "not served" || s.Type != "a" || s.Oldest.IsZero()) {
			t.Errorf("low subject: %+v", s)
		}
	}

	// Another worker's consumer reads the low subject: no longer stranded.
	if _, err := js.CreateConsumer(ctx, names.TaskStream(), jetstream.ConsumerConfig{Durable: "other-worker",
		FilterSubject: low, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	// A new stranded subject is reported; the one still stranded is not
	// reported again.
	publish(high, 1)
	reported = nil
	c.Check(ctx)
	if len(c.Found()) != 3 || len(reported) != 1 || reported[0] != high {
		t.Fatalf("found %+v, reported %v, want the ordered subjects and the high one, reporting only the high one", c.Found(), reported)
	}
}

func TestCheckerWithoutStream(t *testing.T) {
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	var failed error
	c := &stranded.Checker{JS: js, NC: nc, Streams: func() []streams.Names { return []streams.Names{streams.MustNames("jf")} },
		Unread: unreadNonNormal(streams.MustNames("jf")), Missing: errMissing, Failed: func(err error) { failed = err }}
	c.Check(context.Background())
	if !errors.Is(failed, errMissing) || c.Found() != nil {
		t.Fatalf("failed %v, found %v; want %v and nothing", failed, c.Found(), errMissing)
	}
}

// A checker that logs warns once per stranded subject, and of a failed
// check.
func TestCheckerLogs(t *testing.T) {
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	ctx := t.Context()
	names := streams.MustNames("jf")
	var logs bytes.Buffer
	c := &stranded.Checker{JS: js, NC: nc, Streams: func() []streams.Names { return []streams.Names{names} },
		Unread: unreadNonNormal(names), Missing: errMissing}
	c.LogTo(slog.New(slog.NewTextHandler(&logs, nil)))
	c.Check(ctx)
	if !strings.Contains(logs.String(), "could not look for stranded tasks") {
		t.Errorf("no warning of the failed check: %s", logs.String())
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{Prefix: "jf"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, names.TaskSubject(streams.PriorityLow, "a"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	c.Check(ctx)
	c.Check(ctx)
	if out := logs.String(); strings.Count(out, "wait on a subject no consumer reads") != 1 ||
		!strings.Contains(out, "task_type=a") || !strings.Contains(out, "why=\"not served\"") {
		t.Errorf("logs: %s", out)
	}
}
