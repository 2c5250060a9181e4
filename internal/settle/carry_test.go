package settle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// fake records what Carry did to a delivery.
type fake struct {
	calls   []string
	fail    map[string]error // op → the error it returns
	dlCause error
	reason  string
	delay   time.Duration
	notSent []string
}

func (f *fake) do(op string) error { f.calls = append(f.calls, op); return f.fail[op] }
func (f *fake) Ack() error         { return f.do("ack") }
func (f *fake) Nak() error         { return f.do("nak") }
func (f *fake) NakWithDelay(d time.Duration) error {
	f.delay = d
	return f.do("nakdelay")
}
func (f *fake) TermWithReason(r string) error { f.reason = r; return f.do("term") }
func (f *fake) DeadLetter(cause error) error  { f.dlCause = cause; return f.do("deadletter") }
func (f *fake) RetryDelay() time.Duration     { return 7 * time.Second }
func (f *fake) NotSent(op string, _ error)    { f.notSent = append(f.notSent, op) }

var errCause = errors.New("card declined")

func TestCarry(t *testing.T) {
	boom := errors.New("connection closed")
	cases := []struct {
		name     string
		d        Decision
		fail     map[string]error
		calls    []string
		sent     bool
		dead     bool
		dlFailed bool
		delay    time.Duration
	}{
		{name: "ack", d: Decision{Action: Ack}, calls: []string{"ack"}, sent: true},
		{name: "ack not sent", d: Decision{Action: Ack}, fail: map[string]error{"ack": boom}, calls: []string{"ack"}},
		{name: "retry with delay", d: Decision{Action: Retry, Delay: time.Second}, calls: []string{"nakdelay"}, sent: true, delay: time.Second},
		{name: "retry at once", d: Decision{Action: Retry}, calls: []string{"nak"}, sent: true},
		{name: "retry not sent", d: Decision{Action: Retry, Delay: time.Second}, fail: map[string]error{"nakdelay": boom}, calls: []string{"nakdelay"}, delay: time.Second},
		{name: "hand back", d: Decision{Action: HandBack}, calls: []string{"nak"}, sent: true},
		{name: "fail for the advisory", d: Decision{Action: Fail}, calls: []string{"nak"}, sent: true},
		{name: "dead letter then term", d: Decision{Action: Fail, DeadLetter: true, Term: true}, calls: []string{"deadletter", "term"}, sent: true, dead: true},
		{name: "term without dead letters", d: Decision{Action: Fail, Term: true}, calls: []string{"term"}, sent: true},
		{name: "dead letter failed: back after the backoff, never terminated", d: Decision{Action: Fail, DeadLetter: true, Term: true},
			fail: map[string]error{"deadletter": boom}, calls: []string{"deadletter", "nakdelay"}, sent: true, dlFailed: true, delay: 7 * time.Second},
		{name: "term not sent", d: Decision{Action: Fail, DeadLetter: true, Term: true}, fail: map[string]error{"term": boom},
			calls: []string{"deadletter", "term"}, dead: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{fail: tc.fail}
			c := Carry(f, tc.d, errCause)
			if !slices.Equal(f.calls, tc.calls) {
				t.Errorf("calls %v, want %v", f.calls, tc.calls)
			}
			if c.Sent != tc.sent || c.DeadLettered != tc.dead || (c.DeadLetterErr != nil) != tc.dlFailed || c.Delay != tc.delay {
				t.Errorf("carried %+v, want sent=%v dead=%v dead letter failed=%v delay=%v", c, tc.sent, tc.dead, tc.dlFailed, tc.delay)
			}
			if len(f.notSent) != len(tc.fail) && !tc.dlFailed {
				t.Errorf("not sent %v, want one per failed op %v", f.notSent, tc.fail)
			}
			if f.delay != tc.delay {
				t.Errorf("nak delay %v, want %v", f.delay, tc.delay)
			}
			if slices.Contains(f.calls, "deadletter") && !errors.Is(f.dlCause, errCause) {
				t.Errorf("dead letter cause %v, want %v", f.dlCause, errCause)
			}
			if slices.Contains(f.calls, "term") && f.reason != errCause.Error() {
				t.Errorf("term reason %q, want the cause", f.reason)
			}
		})
	}
}

func TestTermReasonIsBounded(t *testing.T) {
	f := &fake{}
	Carry(f, Decision{Action: Fail, Term: true}, errors.New(strings.Repeat("é", 2*MaxTermReason)))
	if len(f.reason) > MaxTermReason || len(f.reason) < MaxTermReason/2 {
		t.Fatalf("term reason of %d bytes, want at most %d", len(f.reason), MaxTermReason)
	}
}
