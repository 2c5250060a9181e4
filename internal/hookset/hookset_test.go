package hookset_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/hookset"
	"github.com/jetflow-io/jetflow/streams"
)

type task struct{ id string }

type outcome struct{ ok bool }

type set = hookset.Set[*task, outcome]

// newSet returns an empty set logging to the returned buffer and counting
// panics in the returned counter.
func newSet() (*set, *bytes.Buffer, *atomic.Uint64) {
	var buf bytes.Buffer
	var panics atomic.Uint64
	return &set{Log: slog.New(slog.NewTextHandler(&buf, nil)), Panics: &panics}, &buf, &panics
}

// recorder returns hooks and a plugin that append name:event to heard.
func recorder(heard *[]string, name string) (hookset.Hooks[*task, outcome], hookset.Plugin[*task, outcome]) {
	note := func(ev string) { *heard = append(*heard, name+":"+ev) }
	return hookset.Hooks[*task, outcome]{
			Started:   func(context.Context, *task) { note("started") },
			Finished:  func(context.Context, *task, outcome) { note("finished") },
			AckFailed: func(_ context.Context, _ *task, op string, _ error) { note("ackfailed " + op) },
			Event:     func(context.Context, any) { note("event") },
			PullLost:  func(context.Context, string, streams.Priority) { note("pulllost") },
		}, hookset.Plugin[*task, outcome]{
			Started:  func(context.Context, *task) { note("started") },
			Finished: func(context.Context, *task, outcome) { note("finished") },
		}
}

// TestOrder: plugins run first, in the order they were added; then the
// inserted hook sets in the order inserted, whenever the added ones came;
// then the added ones in the order added. Nil callbacks are skipped.
func TestOrder(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet()
	var heard []string
	add1, plug1 := recorder(&heard, "add1")
	ins1, plug2 := recorder(&heard, "ins1")
	add2, _ := recorder(&heard, "add2")
	ins2, _ := recorder(&heard, "ins2")
	s.Use(plug1)
	s.Use(hookset.Plugin[*task, outcome]{})
	s.Add(add1)
	s.Add(hookset.Hooks[*task, outcome]{})
	s.Insert(ins1)
	s.Add(add2)
	s.Insert(ins2)
	s.Use(plug2)
	ctx := context.Background()
	tests := []struct {
		name string
		emit func()
		want []string
	}{
		{"started", func() { s.Started(ctx, &task{}) },
			[]string{"add1:started", "ins1:started", "ins1:started", "ins2:started", "add1:started", "add2:started"}},
		{"finished", func() { s.Finished(ctx, &task{}, outcome{}) },
			[]string{"add1:finished", "ins1:finished", "ins1:finished", "ins2:finished", "add1:finished", "add2:finished"}},
		{"ack failed", func() { s.AckFailed(ctx, &task{}, "nak", errors.New("closed")) },
			[]string{"ins1:ackfailed nak", "ins2:ackfailed nak", "add1:ackfailed nak", "add2:ackfailed nak"}},
		{"event", func() { s.Event(ctx, 7) },
			[]string{"ins1:event", "ins2:event", "add1:event", "add2:event"}},
		{"pull lost", func() { s.PullLost("mail", streams.PriorityHigh) },
			[]string{"ins1:pulllost", "ins2:pulllost", "add1:pulllost", "add2:pulllost"}},
	}
	for _, tt := range tests {
		heard = heard[:0]
		tt.emit()
		if !slices.Equal(heard, tt.want) {
			t.Errorf("%s: heard %v, want %v", tt.name, heard, tt.want)
		}
	}
}

// TestArguments: each hook gets the call's ctx and arguments; PullLost's
// ctx is a background one.
func TestArguments(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet()
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "c")
	tk, o, cause := &task{id: "t1"}, outcome{ok: true}, errors.New("closed")
	var got []string
	check := func(name string, c context.Context, ok bool) {
		if c.Value(key{}) != "c" || !ok {
			t.Errorf("%s: ctx value %v, arguments ok %v", name, c.Value(key{}), ok)
		}
		got = append(got, name)
	}
	s.Add(hookset.Hooks[*task, outcome]{
		Started:  func(c context.Context, x *task) { check("started", c, x == tk) },
		Finished: func(c context.Context, x *task, y outcome) { check("finished", c, x == tk && y == o) },
		AckFailed: func(c context.Context, x *task, op string, err error) {
			check("ackfailed", c, x == tk && op == "ack" && err == cause)
		},
		Event: func(c context.Context, ev any) { check("event", c, ev == 7) },
		PullLost: func(c context.Context, typ string, p streams.Priority) {
			if c.Value(key{}) != nil || typ != "mail" || p != streams.PriorityLow {
				t.Errorf("PullLost(%v, %s, %v)", c.Value(key{}), typ, p)
			}
			got = append(got, "pulllost")
		},
	})
	s.Started(ctx, tk)
	s.Finished(ctx, tk, o)
	s.AckFailed(ctx, tk, "ack", cause)
	s.Event(ctx, 7)
	s.PullLost("mail", streams.PriorityLow)
	if want := []string{"started", "finished", "ackfailed", "event", "pulllost"}; !slices.Equal(got, want) {
		t.Errorf("called %v, want %v", got, want)
	}
}

// TestHookPanicsRecovered: a hook that panics is recovered, logged under
// its event's name and counted, and the hooks after it still run; a
// plugin's panic is not recovered.
func TestHookPanicsRecovered(t *testing.T) {
	t.Parallel()
	s, logs, panics := newSet()
	var after int
	s.Add(hookset.Hooks[*task, outcome]{
		Started:   func(context.Context, *task) { panic("started boom") },
		Finished:  func(context.Context, *task, outcome) { panic("finished boom") },
		AckFailed: func(context.Context, *task, string, error) { panic("ackfailed boom") },
		Event:     func(context.Context, any) { panic("event boom") },
		PullLost:  func(context.Context, string, streams.Priority) { panic("pulllost boom") },
	})
	s.Add(hookset.Hooks[*task, outcome]{
		Started:   func(context.Context, *task) { after++ },
		Finished:  func(context.Context, *task, outcome) { after++ },
		AckFailed: func(context.Context, *task, string, error) { after++ },
		Event:     func(context.Context, any) { after++ },
		PullLost:  func(context.Context, string, streams.Priority) { after++ },
	})
	ctx := context.Background()
	s.Started(ctx, &task{})
	s.Finished(ctx, &task{}, outcome{})
	s.AckFailed(ctx, &task{}, "term", errors.New("closed"))
	s.Event(ctx, "ev")
	s.PullLost("mail", streams.PriorityNormal)
	if n := panics.Load(); n != 5 || after != 5 {
		t.Errorf("%d panics counted, %d hooks ran after them; want 5, 5", n, after)
	}
	for _, name := range []string{"Started", "Finished", "AckFailed", "Event", "PullLost"} {
		if !strings.Contains(logs.String(), "hook="+name+" panic=\""+strings.ToLower(name)+" boom\"") {
			t.Errorf("no log of the %s hook's panic in\n%s", name, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "jetflow hook panicked; ignored") || !strings.Contains(logs.String(), "goroutine") {
		t.Errorf("the log lacks the message or the stack:\n%s", logs.String())
	}

	s.Use(hookset.Plugin[*task, outcome]{Started: func(context.Context, *task) { panic("plugin") }})
	defer func() {
		if r := recover(); r != "plugin" {
			t.Errorf("a plugin's panic: recovered %v, want it to reach the caller", r)
		}
	}()
	s.Started(ctx, &task{})
}

// TestCall: Call recovers a panic with or without a counter, and runs fn.
func TestCall(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var panics atomic.Uint64
	ran := false
	hookset.Call(log, &panics, "Enqueued", func() { ran = true })
	hookset.Call(log, &panics, "Enqueued", func() { panic("boom") })
	hookset.Call(log, nil, "Enqueuing", func() { panic("boom") })
	if !ran || panics.Load() != 1 {
		t.Errorf("ran %v, %d panics counted; want true, 1", ran, panics.Load())
	}
	if strings.Count(buf.String(), "jetflow hook panicked") != 2 || !strings.Contains(buf.String(), "hook=Enqueuing") {
		t.Errorf("logs:\n%s", buf.String())
	}
}

// TestHold: the first plugin that holds wins; none holding is no hold.
func TestHold(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet()
	if d, ok := s.Hold(&task{}, errors.New("x")); ok || d != 0 {
		t.Errorf("no plugins: Hold = %v, %v", d, ok)
	}
	var asked []string
	hold := func(name string, d time.Duration, ok bool) hookset.Plugin[*task, outcome] {
		return hookset.Plugin[*task, outcome]{Hold: func(*task, error) (time.Duration, bool) {
			asked = append(asked, name)
			return d, ok
		}}
	}
	s.Use(hold("no", time.Hour, false))
	s.Use(hookset.Plugin[*task, outcome]{})
	s.Use(hold("first", time.Second, true))
	s.Use(hold("second", time.Minute, true))
	if d, ok := s.Hold(&task{}, errors.New("x")); !ok || d != time.Second || !slices.Equal(asked, []string{"no", "first"}) {
		t.Errorf("Hold = %v, %v after asking %v; want 1s, true after no, first", d, ok, asked)
	}
}

// TestStartedFinishedAllocs: Started and Finished run for every task and
// allocate nothing. Not parallel: AllocsPerRun counts the process's
// allocations.
func TestStartedFinishedAllocs(t *testing.T) {
	s, _, _ := newSet()
	h, p := recorder(new([]string), "x")
	h.Started = func(context.Context, *task) {}
	h.Finished = func(context.Context, *task, outcome) {}
	p.Started, p.Finished = h.Started, h.Finished
	s.Use(p)
	s.Add(h)
	s.Insert(h)
	ctx, tk := context.Background(), &task{}
	if a := testing.AllocsPerRun(100, func() {
		s.Started(ctx, tk)
		s.Finished(ctx, tk, outcome{ok: true})
	}); a != 0 {
		t.Errorf("Started and Finished allocate %v times", a)
	}
}
