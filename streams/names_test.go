package streams_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Reference grammars, written independently of the hand-rolled validators.
var (
	taskTypeRE = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)
	idRE       = regexp.MustCompile(`^[A-Za-z0-9_=:-]+$`)
)

func TestNames(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	checks := []struct{ got, want string }{
		{n.Prefix(), "jetflow"},
		{n.TaskStream(), "JETFLOW_TASKS"},
		{n.DLQStream(), "JETFLOW_DLQ"},
		{n.AdvisoryStream(), "JETFLOW_ADVISORIES"},
		{n.StateBucket(), "JETFLOW_STATE"},
		{n.TaskSubject(streams.PriorityCritical, "payments.charge"), "jetflow.task.critical.payments.charge"},
		{n.TaskWildcard(), "jetflow.task.>"},
		{n.ScheduleSubject("abc"), "jetflow.sched.abc"},
		{n.CronSubject("nightly"), "jetflow.cron.nightly"},
		{n.DLQSubject("payments.charge"), "jetflow.dlq.payments.charge"},
		{n.ConsumerName("payments.charge", streams.PriorityLow), "payments_charge-low"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	app := streams.MustNames("billing")
	if app.TaskStream() != "BILLING_TASKS" || app.TaskSubject(streams.PriorityNormal, "x") != "billing.task.normal.x" {
		t.Errorf("prefix billing: %s %s", app.TaskStream(), app.TaskSubject(streams.PriorityNormal, "x"))
	}
}

func TestNewNamesRejectsInvalidPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"Jetflow", "a.b", "a b", "*", ">", "é"} {
		if _, err := streams.NewNames(p); !errors.Is(err, streams.ErrInvalidPrefix) {
			t.Errorf("NewNames(%q) = %v, want ErrInvalidPrefix", p, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustNames of an invalid prefix did not panic")
		}
	}()
	streams.MustNames("A.B")
}

func TestPriority(t *testing.T) {
	t.Parallel()
	var zero streams.Priority
	if zero != streams.PriorityNormal {
		t.Errorf("zero value is %v, want normal", zero)
	}
	for i, p := range streams.Priorities {
		if p.Rank() != i {
			t.Errorf("%v: rank %d, want %d", p, p.Rank(), i)
		}
		got, err := streams.ParsePriority(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %v, %v", p.String(), got, err)
		}
		b, err := p.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var q streams.Priority
		if err := q.UnmarshalText(b); err != nil || q != p {
			t.Errorf("text round trip of %v: %v, %v", p, q, err)
		}
	}
	bad := streams.Priority(4)
	if bad.Valid() {
		t.Error("Priority(4) is valid")
	}
	if _, err := bad.MarshalText(); !errors.Is(err, streams.ErrInvalidPriority) {
		t.Errorf("MarshalText(4) = %v", err)
	}
	for _, s := range []string{"", "Critical", "urgent", "0"} {
		if _, err := streams.ParsePriority(s); !errors.Is(err, streams.ErrInvalidPriority) {
			t.Errorf("ParsePriority(%q) = %v", s, err)
		}
	}
}

func TestValidateTaskType(t *testing.T) {
	t.Parallel()
	valid := []string{"a", "payments.charge", "a-b_c.0.9", strings.Repeat("a", streamdefs.MaxTaskTypeLen)}
	for _, s := range valid {
		if err := streams.ValidateTaskType(s); err != nil {
			t.Errorf("ValidateTaskType(%q) = %v", s, err)
		}
	}
	invalid := []string{"", ".", "a.", ".a", "a..b", "A", "a b", "a*", "a>", "a\x00", "a/b", "é",
		strings.Repeat("a", streamdefs.MaxTaskTypeLen+1)}
	for _, s := range invalid {
		if err := streams.ValidateTaskType(s); !errors.Is(err, streams.ErrInvalidTaskType) {
			t.Errorf("ValidateTaskType(%q) = %v, want ErrInvalidTaskType", s, err)
		}
	}
}

func TestParseTaskSubjectErrors(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	for _, s := range []string{"", "jetflow", "jetflow.task", "jetflow.task.", "jetflow.task.normal",
		"jetflow.task.normal.", "jetflow.task.urgent.a", "jetflow.task.normal.A", "other.task.normal.a",
		"jetflow.sched.normal.a", "jetflow.task.normal.a..b"} {
		if _, _, err := n.ParseTaskSubject(s); !errors.Is(err, streams.ErrInvalidSubject) {
			t.Errorf("ParseTaskSubject(%q) = %v, want ErrInvalidSubject", s, err)
		}
	}
}

func FuzzValidateTaskType(f *testing.F) {
	for _, s := range []string{"", "a", "payments.charge", "a..b", ".a", "a.", "A", "a b", "a-b_c.d9", "a.>", "é",
		strings.Repeat("ab.", 50)} {
		f.Add(s)
	}
	n := streams.MustNames("")
	f.Fuzz(func(t *testing.T, s string) {
		err := streams.ValidateTaskType(s)
		want := taskTypeRE.MatchString(s) && len(s) <= streamdefs.MaxTaskTypeLen
		if (err == nil) != want {
			t.Fatalf("ValidateTaskType(%q) = %v, reference grammar says valid=%v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, streams.ErrInvalidTaskType) {
				t.Fatalf("error %v does not wrap ErrInvalidTaskType", err)
			}
			return
		}
		// A valid type yields well-formed subjects and a consumer name
		// without subject separators or wildcards.
		for _, p := range streams.Priorities {
			subj := n.TaskSubject(p, s)
			gp, gt, err := n.ParseTaskSubject(subj)
			if err != nil || gp != p || gt != s {
				t.Fatalf("ParseTaskSubject(%q) = %v, %q, %v", subj, gp, gt, err)
			}
			if c := n.ConsumerName(s, p); strings.ContainsAny(c, ".*> \t") {
				t.Fatalf("consumer name %q of %q is not a valid name", c, s)
			}
		}
	})
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"", "abc", "A-Z_09=:", "a.b", "a b", "*", ">", "\x00",
		strings.Repeat("x", taskmsg.MaxIDLen), strings.Repeat("x", taskmsg.MaxIDLen+1)} {
		f.Add(s)
	}
	n := streams.MustNames("")
	f.Fuzz(func(t *testing.T, s string) {
		err := streams.ValidateID(s)
		want := idRE.MatchString(s) && len(s) <= taskmsg.MaxIDLen
		if (err == nil) != want {
			t.Fatalf("ValidateID(%q) = %v, reference grammar says valid=%v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, streams.ErrInvalidID) {
				t.Fatalf("error %v does not wrap ErrInvalidID", err)
			}
			return
		}
		// A valid ID is exactly one token of its schedule subject.
		if toks := strings.Split(n.ScheduleSubject(s), "."); len(toks) != 3 || toks[2] != s {
			t.Fatalf("schedule subject of %q splits into %q", s, toks)
		}
	})
}

func FuzzParseTaskSubject(f *testing.F) {
	for _, s := range []string{"jetflow.task.normal.a", "jetflow.task.critical.payments.charge", "jetflow.task.low",
		"jetflow.task.urgent.a", "jetflow.task.normal.a..b", "jetflow.sched.x", "", "jetflow.task.high.A"} {
		f.Add(s, "")
	}
	f.Add("billing.task.high.x.y", "billing")
	f.Add("my-app.task.low.x", "my-app")
	f.Fuzz(func(t *testing.T, subject, prefix string) {
		n, err := streams.NewNames(prefix)
		if err != nil {
			return
		}
		p, typ, err := n.ParseTaskSubject(subject)
		if err != nil {
			if !errors.Is(err, streams.ErrInvalidSubject) {
				t.Fatalf("ParseTaskSubject(%q) error %v does not wrap ErrInvalidSubject", subject, err)
			}
			return
		}
		// Whatever parses is exactly what TaskSubject builds.
		if !p.Valid() || streams.ValidateTaskType(typ) != nil {
			t.Fatalf("ParseTaskSubject(%q) returned invalid parts %v, %q", subject, p, typ)
		}
		if back := n.TaskSubject(p, typ); back != subject {
			t.Fatalf("ParseTaskSubject(%q) = %v, %q; TaskSubject gives %q", subject, p, typ, back)
		}
	})
}

func FuzzTaskSubjectRoundTrip(f *testing.F) {
	f.Add(uint8(0), "a", "")
	f.Add(uint8(1), "payments.charge", "billing")
	f.Add(uint8(3), "x.y-z_1", "my-app")
	f.Add(uint8(7), "a", "")
	f.Fuzz(func(t *testing.T, prio uint8, typ, prefix string) {
		n, err := streams.NewNames(prefix)
		if err != nil {
			return
		}
		p := streams.Priority(prio)
		subj := n.TaskSubject(p, typ)
		gp, gt, err := n.ParseTaskSubject(subj)
		valid := p.Valid() && streams.ValidateTaskType(typ) == nil
		if valid != (err == nil) {
			t.Fatalf("TaskSubject(%v, %q) = %q parses with %v; inputs valid=%v", p, typ, subj, err, valid)
		}
		if valid && (gp != p || gt != typ) {
			t.Fatalf("round trip of (%v, %q) via %q gave (%v, %q)", p, typ, subj, gp, gt)
		}
	})
}
