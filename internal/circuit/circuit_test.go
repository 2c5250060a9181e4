package circuit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/testutil"
)

var errDown = errors.New("dependency down")

// events collects a breaker's state changes.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) deliver(_ context.Context, ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) transitions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		out = append(out, ev.From.String()+">"+ev.To.String())
	}
	return out
}

func (e *events) last() Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evs[len(e.evs)-1]
}

// classifyAll counts errDown as a failure, context.Canceled as excluded and
// every other error as a success.
func classifyAll(_ context.Context, err error) Outcome {
	switch {
	case errors.Is(err, errDown):
		return Failure
	case errors.Is(err, context.Canceled):
		return Excluded
	}
	return Success
}

func newBreaker(s Settings) (*Breaker, *events) {
	ev := &events{}
	return New("dep", s, classifyAll, ev.deliver), ev
}

func fail(context.Context) error { return errDown }

// A breaker trips after ConsecutiveFailures failures: the tripping call
// returns an *OpenError wrapping its own error, later calls are refused
// without running, and the Closed→Open event carries the failures.
func TestBreakerTrips(t *testing.T) {
	t.Parallel()
	b, ev := newBreaker(Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1})
	for i := range 2 {
		if err := b.Call(t.Context(), fail); err != errDown {
			t.Fatalf("failure %d: %v; want the call's error", i+1, err)
		}
	}
	var oe *OpenError
	if err := b.Call(t.Context(), fail); !errors.As(err, &oe) || !errors.Is(oe.Err, errDown) {
		t.Fatalf("third failure: %v; want an OpenError wrapping errDown", err)
	}
	if time.Until(oe.Until) < 50*time.Minute {
		t.Errorf("open until %v; want about an hour ahead", oe.Until)
	}
	ran := false
	err := b.Call(t.Context(), func(context.Context) error { ran = true; return nil })
	if !errors.As(err, &oe) || ran {
		t.Errorf("call on an open breaker: ran %v, err %v; want refused", ran, err)
	}
	if got := ev.transitions(); len(got) != 1 || got[0] != "closed>open" {
		t.Fatalf("events %v; want [closed>open]", got)
	}
	if last := ev.last(); last.Failures != 3 || last.Remote || last.Until.IsZero() {
		t.Errorf("open event %+v; want 3 failures, local, with Until", last)
	}
	in := b.Info()
	if in.State != Open || in.OpenedAt.IsZero() || !in.OpenUntil.Equal(oe.Until) || in.Remote {
		t.Errorf("Info %+v", in)
	}
}

// Errors that are not the dependency's fault, and cancelled calls, do not
// trip the breaker; a success resets the consecutive count.
func TestBreakerCountsOnlyFailures(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1})
	other := errors.New("bad request")
	seq := []error{errDown, other, errDown, context.Canceled, nil, errDown, context.Canceled}
	for i, e := range seq {
		err := b.Call(t.Context(), func(context.Context) error { return e })
		if err != e {
			t.Fatalf("call %d: %v; want %v", i, err, e)
		}
	}
	if in := b.Info(); in.State != Closed {
		t.Errorf("state %v; want closed", in.State)
	}
	if err := b.Call(t.Context(), fail); err == errDown {
		t.Error("two consecutive failures (a cancelled call between) did not trip it")
	}
}

// With FailureRatio set, the breaker trips once MinRequests calls were
// counted and the share of failures reaches the ratio.
func TestBreakerFailureRatio(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(Settings{FailureRatio: 0.5, MinRequests: 4, Interval: time.Hour, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1})
	// Below MinRequests nothing trips it, whatever the share of failures.
	for i, e := range []error{nil, errDown, errDown} {
		if err := b.Call(t.Context(), func(context.Context) error { return e }); err != e {
			t.Fatalf("call %d: %v; want %v", i, err, e)
		}
	}
	var oe *OpenError
	if err := b.Call(t.Context(), fail); !errors.As(err, &oe) {
		t.Errorf("3 failures in 4 calls: %v; want an OpenError", err)
	}
	if in := b.Info(); in.State != Open {
		t.Errorf("after 3 failures in 4 calls: %v; want open", in.State)
	}
}

// After OpenTimeout the breaker lets probes through: a failed probe opens
// it again (one failure), a successful one closes it.
func TestBreakerHalfOpen(t *testing.T) {
	t.Parallel()
	b, ev := newBreaker(Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond, HalfOpenMaxRequests: 1})
	waitHalfOpen := func() {
		testutil.Wait(t, 10*time.Second, "half-open", func() bool { return b.Info().State == HalfOpen })
	}
	_ = b.Call(t.Context(), fail)
	waitHalfOpen()
	var oe *OpenError
	if err := b.Call(t.Context(), fail); !errors.As(err, &oe) {
		t.Fatalf("failed probe: %v; want an OpenError", err)
	}
	if last := ev.last(); last.From != HalfOpen || last.To != Open || last.Failures != 1 {
		t.Errorf("failed probe event %+v", last)
	}
	waitHalfOpen()
	// The probe holds the only half-open slot: a concurrent call is refused
	// and told to ask again a little later.
	inProbe, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- b.Call(t.Context(), func(context.Context) error { close(inProbe); <-release; return nil })
	}()
	<-inProbe
	err := b.Call(t.Context(), func(context.Context) error { return nil })
	if !errors.As(err, &oe) || time.Until(oe.Until) > time.Second || time.Until(oe.Until) < 0 {
		t.Errorf("call beside the probe: %v; want refused until probeWait", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if in := b.Info(); in.State != Closed {
		t.Errorf("after a good probe: %v; want closed", in.State)
	}
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if got := ev.transitions(); len(got) != len(want) {
		t.Errorf("events %v; want %v", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("events %v; want %v", got, want)
				break
			}
		}
	}
}

// A panicking call counts as a failure and the panic goes on.
func TestBreakerPanicCounts(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_ = b.Call(t.Context(), func(context.Context) error { panic("boom") })
	}()
	if in := b.Info(); in.State != Open {
		t.Errorf("after a panic: %v; want open", in.State)
	}
}

// ForceOpen opens a closed breaker with a remote event, and does nothing
// to an open one.
func TestBreakerForceOpen(t *testing.T) {
	t.Parallel()
	b, ev := newBreaker(Settings{ConsecutiveFailures: 100, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1})
	if !b.ForceOpen() {
		t.Fatal("ForceOpen of a closed breaker = false")
	}
	if last := ev.last(); !last.Remote || last.To != Open {
		t.Errorf("event %+v; want a remote open", last)
	}
	if in := b.Info(); in.State != Open || !in.Remote {
		t.Errorf("Info %+v; want open by a remote report", in)
	}
	if b.ForceOpen() {
		t.Error("ForceOpen of an open breaker = true")
	}
}

// A delivery callback may query the breaker again without deadlocking,
// and the events it causes are still delivered in order.
func TestBreakerReentrantDeliver(t *testing.T) {
	t.Parallel()
	var got []State
	var b *Breaker
	b = New("dep", Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour, HalfOpenMaxRequests: 1}, classifyAll,
		func(_ context.Context, ev Event) {
			got = append(got, ev.To)
			_ = b.Info()
		})
	_ = b.Call(t.Context(), fail)
	if len(got) != 1 || got[0] != Open {
		t.Errorf("delivered %v; want [open]", got)
	}
}

func TestStateText(t *testing.T) {
	for _, s := range []State{Closed, HalfOpen, Open} {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%v): %v", s, err)
		}
		var back State
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("round trip of %v: %v, %v", s, back, err)
		}
	}
	if _, err := State(7).MarshalText(); err == nil {
		t.Error("MarshalText of an unknown state succeeded")
	}
	if got := State(7).String(); got != "breaker-state(7)" {
		t.Errorf("String of an unknown state = %q", got)
	}
	for _, in := range []string{"", "OPEN", "half_open", "open\n", string(make([]byte, 1<<16))} {
		var s State
		if err := s.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", in)
		}
	}
}

// HoldFor waits until until, plus a spread of at most a tenth (between
// 10 ms and 500 ms); never a negative time.
func TestHoldFor(t *testing.T) {
	cases := []struct {
		name     string
		in       time.Duration
		min, max time.Duration
	}{
		{"past", -time.Hour, 0, 10 * time.Millisecond},
		{"short", 50 * time.Millisecond, 0, 60 * time.Millisecond},
		{"a minute", time.Minute, 59 * time.Second, time.Minute + 500*time.Millisecond},
		{"an hour", time.Hour, 59 * time.Minute, time.Hour + 500*time.Millisecond},
	}
	for _, c := range cases {
		for range 50 {
			got := HoldFor(time.Now().Add(c.in))
			if got < c.min || got > c.max {
				t.Fatalf("%s: HoldFor = %v; want within [%v, %v]", c.name, got, c.min, c.max)
			}
		}
	}
}

func TestProbeWait(t *testing.T) {
	cases := map[time.Duration]time.Duration{
		time.Millisecond: 50 * time.Millisecond,
		time.Second:      250 * time.Millisecond,
		time.Hour:        2 * time.Second,
	}
	for timeout, want := range cases {
		b := &Breaker{settings: Settings{OpenTimeout: timeout}}
		if got := b.probeWait(); got != want {
			t.Errorf("probeWait with OpenTimeout %v = %v; want %v", timeout, got, want)
		}
	}
}
