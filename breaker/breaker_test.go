package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

var errDown = errors.New("dependency down")

// transition is one breaker state change.
type transition struct {
	Dep      string
	From, To breaker.State
}

// transitions records breaker state changes and lets tests wait for one.
type transitions struct {
	mu  sync.Mutex
	all []transition
	ch  chan transition
}

func newTransitions() *transitions { return &transitions{ch: make(chan transition, 1024)} }

func (tr *transitions) hook(_ context.Context, dep string, from, to breaker.State) {
	tr.mu.Lock()
	tr.all = append(tr.all, transition{dep, from, to})
	tr.mu.Unlock()
	select {
	case tr.ch <- transition{dep, from, to}:
	default:
	}
}

// event is a Hooks.Event hook recording the breaker.StateChange events.
func (tr *transitions) event(ctx context.Context, ev any) {
	if c, ok := ev.(breaker.StateChange); ok {
		tr.hook(ctx, c.Dependency, c.From, c.To)
	}
}

func (tr *transitions) count(to breaker.State) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, x := range tr.all {
		if x.To == to {
			n++
		}
	}
	return n
}

func (tr *transitions) list() []transition {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]transition(nil), tr.all...)
}

// waitTo waits for the next transition to state to.
func (tr *transitions) waitTo(t *testing.T, to breaker.State) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case x := <-tr.ch:
			if x.To == to {
				return
			}
		case <-deadline:
			t.Fatalf("no transition to %v; seen %v", to, tr.list())
		}
	}
}

func newBreakers(t *testing.T, s breaker.Settings) (*breaker.Registry, *transitions) {
	t.Helper()
	tr := newTransitions()
	r, err := breaker.New(breaker.WithSettings("dep", s), breaker.WithStateChanged(tr.hook))
	if err != nil {
		t.Fatal(err)
	}
	return r, tr
}

func fail(context.Context) error    { return errDown }
func succeed(context.Context) error { return nil }

// waitHalfOpen waits until the open period of dep passed (reading the state
// moves an expired open breaker to half-open).
func waitHalfOpen(t *testing.T, r *breaker.Registry, dep string) {
	t.Helper()
	testutil.Wait(t, 20*time.Second, dep+" half-open", func() bool {
		in, _ := r.State(dep)
		return in.State == breaker.StateHalfOpen
	})
}

func TestBreakerTripsOnConsecutiveFailures(t *testing.T) {
	t.Parallel()
	r, tr := newBreakers(t, breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: 100 * time.Millisecond})
	ctx := t.Context()
	for i := range 2 {
		if err := r.Call(ctx, "dep", fail); !errors.Is(err, errDown) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("failure %d: err = %v, want the call's own error", i+1, err)
		}
	}
	// A success in between resets the run of failures.
	if err := r.Call(ctx, "dep", succeed); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := r.Call(ctx, "dep", fail); errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("failure %d after a success opened the breaker: %v", i+1, err)
		}
	}
	before := time.Now()
	err := r.Call(ctx, "dep", fail)
	var boe *breaker.OpenError
	if !errors.As(err, &boe) || !errors.Is(err, errDown) {
		t.Fatalf("tripping call: err = %v, want a BreakerOpenError wrapping the failure", err)
	}
	if boe.Dependency != "dep" || boe.Until.Before(before.Add(100*time.Millisecond)) {
		t.Fatalf("open error = %+v, want dependency dep, until ≥ now+100ms", boe)
	}
	in, ok := r.State("dep")
	if !ok || in.State != breaker.StateOpen || in.OpenUntil.IsZero() || in.OpenedAt.IsZero() || in.Remote {
		t.Fatalf("state = %+v, want open, locally", in)
	}
	called := false
	err = r.Call(ctx, "dep", func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("call on open breaker: called = %v, err = %v", called, err)
	}
	if got := tr.list(); len(got) != 1 || got[0] != (transition{"dep", breaker.StateClosed, breaker.StateOpen}) {
		t.Fatalf("transitions = %v", got)
	}
	waitHalfOpen(t, r, "dep")
	if err := r.Call(ctx, "dep", succeed); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if in, _ := r.State("dep"); in.State != breaker.StateClosed {
		t.Fatalf("after a successful probe the state is %v", in.State)
	}
	want := []transition{
		{"dep", breaker.StateClosed, breaker.StateOpen},
		{"dep", breaker.StateOpen, breaker.StateHalfOpen},
		{"dep", breaker.StateHalfOpen, breaker.StateClosed},
	}
	if got := tr.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
}

func TestBreakerClassification(t *testing.T) {
	t.Parallel()
	errClient := errors.New("404 not found")
	errQuota := errors.New("quota exceeded")
	tests := []struct {
		name     string
		settings breaker.Settings
		err      func(ctx context.Context) error
		ctx      func() context.Context
		wantOpen bool
		want     breaker.Counts // after 5 calls
	}{
		{
			name: "plain errors count",
			err:  fail, wantOpen: true,
		},
		{
			name: "permanent errors (4xx) do not count",
			err:  func(context.Context) error { return framework.Permanent(errClient) },
			want: breaker.Counts{Requests: 5, Successes: 5, ConsecutiveSuccesses: 5},
		},
		{
			name:     "custom IsFailure",
			settings: breaker.Settings{IsFailure: func(err error) bool { return !errors.Is(err, errQuota) }},
			err:      func(context.Context) error { return errQuota },
			want:     breaker.Counts{Requests: 5, Successes: 5, ConsecutiveSuccesses: 5},
		},
		{
			name: "cancellation of the caller is excluded",
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			err:  func(ctx context.Context) error { return fmt.Errorf("request: %w", ctx.Err()) },
			want: breaker.Counts{Requests: 5, Exclusions: 5},
		},
		{
			name: "deadline exceeded counts",
			ctx: func() context.Context {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now())
				t.Cleanup(cancel)
				return ctx
			},
			err:      func(ctx context.Context) error { return ctx.Err() },
			wantOpen: true,
		},
		{
			name: "nested open breaker is excluded",
			err: func(context.Context) error {
				return &breaker.OpenError{Dependency: "other", Until: time.Now(), Err: gobreaker.ErrOpenState}
			},
			want: breaker.Counts{Requests: 5, Exclusions: 5},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.settings
			s.ConsecutiveFailures = 5
			r, _ := newBreakers(t, s)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			for range 5 {
				_ = r.Call(ctx, "dep", tc.err)
			}
			in, _ := r.State("dep")
			if got := in.State == breaker.StateOpen; got != tc.wantOpen {
				t.Fatalf("open = %v, want %v (%+v)", got, tc.wantOpen, in)
			}
			if !tc.wantOpen && in.Counts != tc.want {
				t.Fatalf("counts = %+v, want %+v", in.Counts, tc.want)
			}
		})
	}
}

func TestBreakerFailureRatio(t *testing.T) {
	t.Parallel()
	r, _ := newBreakers(t, breaker.Settings{FailureRatio: 0.5, MinRequests: 6, ConsecutiveFailures: 1})
	ctx := t.Context()
	// Alternating outcomes: half fail, but nothing trips before 6 calls,
	// and ConsecutiveFailures is ignored in ratio mode.
	for i := range 5 {
		fn := succeed
		if i%2 == 1 {
			fn = fail
		}
		_ = r.Call(ctx, "dep", fn)
		if in, _ := r.State("dep"); in.State != breaker.StateClosed {
			t.Fatalf("opened after %d calls: %+v", i+1, in)
		}
	}
	_ = r.Call(ctx, "dep", fail) // 3 failures of 6
	if in, _ := r.State("dep"); in.State != breaker.StateOpen {
		t.Fatalf("3 failures of 6 with ratio 0.5: state %v", in.State)
	}
}

func TestBreakerHalfOpenProbes(t *testing.T) {
	t.Parallel()
	r, tr := newBreakers(t, breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 50 * time.Millisecond, HalfOpenMaxRequests: 2})
	ctx := t.Context()
	_ = r.Call(ctx, "dep", fail)
	waitHalfOpen(t, r, "dep")

	// Two probes in flight; a third call is refused without running.
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			errs <- r.Call(ctx, "dep", func(context.Context) error {
				started <- struct{}{}
				<-release
				return nil
			})
		}()
	}
	testutil.Recv(t, started, 10*time.Second, "first probe")
	testutil.Recv(t, started, 10*time.Second, "second probe")
	err := r.Call(ctx, "dep", succeed)
	var boe *breaker.OpenError
	if !errors.As(err, &boe) || !errors.Is(err, gobreaker.ErrTooManyRequests) || !boe.Until.After(time.Now()) {
		t.Fatalf("third call while probing: %v", err)
	}
	close(release)
	for range 2 {
		if err := testutil.Recv(t, errs, 10*time.Second, "probe result"); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := r.State("dep"); in.State != breaker.StateClosed {
		t.Fatalf("after 2 successful probes: %v", in.State)
	}

	// A failed probe reopens at once.
	_ = r.Call(ctx, "dep", fail)
	waitHalfOpen(t, r, "dep")
	opens := tr.count(breaker.StateOpen)
	if err := r.Call(ctx, "dep", fail); !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, errDown) {
		t.Fatalf("failed probe: %v", err)
	}
	if got := tr.count(breaker.StateOpen); got != opens+1 {
		t.Fatalf("opens = %d, want %d", got, opens+1)
	}
}

func TestBreakerPanicCountsAsFailure(t *testing.T) {
	t.Parallel()
	r, _ := newBreakers(t, breaker.Settings{ConsecutiveFailures: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = r.Call(t.Context(), "dep", func(context.Context) error { panic("boom") })
	}()
	if in, _ := r.State("dep"); in.State != breaker.StateOpen {
		t.Fatalf("after a panic: %v", in.State)
	}
}

func TestBreakerHookMayQueryRegistry(t *testing.T) {
	t.Parallel()
	var r *breaker.Registry
	var seen atomic.Int32
	r, err := breaker.New(
		breaker.WithSettings("dep", breaker.Settings{ConsecutiveFailures: 1}),
		breaker.WithStateChanged(func(_ context.Context, dep string, _, to breaker.State) {
			// Reading the registry from the hook must not deadlock.
			if in, _ := r.State(dep); in.State == to {
				seen.Add(1)
			}
			_ = r.States()
		}))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Call(t.Context(), "dep", fail)
	if seen.Load() != 1 {
		t.Fatalf("hook saw the new state %d times, want 1", seen.Load())
	}
}

func TestBreakerRegistry(t *testing.T) {
	t.Parallel()
	r, err := breaker.New(breaker.WithSettings("b.declared", breaker.Settings{OpenTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := breaker.ContextWithRegistry(t.Context(), r)
	v, err := breaker.CallValue(ctx, "a-used", func(context.Context) (int, error) { return 42, nil })
	if err != nil || v != 42 {
		t.Fatalf("CallValue = %d, %v", v, err)
	}
	v, err = breaker.CallValue(ctx, "a-used", func(context.Context) (int, error) { return 7, errDown })
	if v != 0 || !errors.Is(err, errDown) {
		t.Fatalf("CallValue on error = %d, %v", v, err)
	}
	states := r.States()
	if len(states) != 2 || states[0].Dependency != "a-used" || states[1].Dependency != "b.declared" {
		t.Fatalf("states = %+v", states)
	}
	if s := states[0].Settings; s.OpenTimeout != breaker.DefaultOpenTimeout ||
		s.ConsecutiveFailures != breaker.DefaultConsecutiveFailures || s.IsFailure == nil {
		t.Fatalf("undeclared dependency settings = %+v, want defaults", s)
	}
	if states[1].Settings.OpenTimeout != time.Second {
		t.Fatalf("declared settings = %+v", states[1].Settings)
	}
	if c := states[0].Counts; c.Requests != 2 || c.Failures != 1 || c.Successes != 1 {
		t.Fatalf("counts = %+v", c)
	}

	if err := breaker.Call(t.Context(), "x", succeed); !errors.Is(err, breaker.ErrNoRegistry) {
		t.Fatalf("Call without a registry: %v", err)
	}
	for _, bad := range []string{"", "a b", ".a", "a.", "a..b", "é"} {
		if err := r.Call(t.Context(), bad, succeed); !errors.Is(err, framework.ErrInvalidDependency) {
			t.Fatalf("Call(%q): %v", bad, err)
		}
		if _, err := breaker.New(breaker.WithSettings(bad, breaker.Settings{})); !errors.Is(err, framework.ErrInvalidOption) {
			t.Fatalf("WithSettings(%q): %v", bad, err)
		}
	}
	for _, s := range []breaker.Settings{{FailureRatio: 1.5}, {FailureRatio: -1}, {OpenTimeout: time.Millisecond}} {
		if _, err := breaker.New(breaker.WithSettings("ok", s)); !errors.Is(err, framework.ErrInvalidOption) {
			t.Fatalf("WithSettings(%+v): %v", s, err)
		}
	}
}

func BenchmarkCallClosed(b *testing.B) {
	r, err := breaker.New()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Call(ctx, "payments-gw", succeed); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallClosedParallel(b *testing.B) {
	r, err := breaker.New()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := r.Call(ctx, "payments-gw", succeed); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGobreakerTwoStep is the floor under BenchmarkCallClosed: the bare
// library call, to compare within one run.
func BenchmarkGobreakerTwoStep(b *testing.B) {
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{Name: "payments-gw"})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		done, err := cb.Allow()
		if err != nil {
			b.Fatal(err)
		}
		done(succeed(ctx))
	}
}
