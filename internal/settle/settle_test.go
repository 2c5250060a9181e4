package settle

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Second }
	pol := func(dl bool) Policy { return Policy{MaxAttempts: 3, Backoff: backoff, DeadLetters: dl} }
	cases := []struct {
		name string
		r    Result
		p    Policy
		want Decision
	}{
		{"success", Result{Attempt: 1}, pol(true), Decision{Action: Ack}},
		{"success at last attempt", Result{Attempt: 3}, pol(true), Decision{Action: Ack}},
		{"failure retried with backoff", Result{Failed: true, Attempt: 2}, pol(true), Decision{Action: Retry, Delay: 2 * time.Second}},
		{"retry after", Result{Failed: true, Attempt: 1, RetryAfter: 5 * time.Millisecond, HasRetryAfter: true}, pol(true),
			Decision{Action: Retry, Delay: 5 * time.Millisecond}},
		{"retry after zero", Result{Failed: true, Attempt: 1, HasRetryAfter: true}, pol(true), Decision{Action: Retry}},
		{"no backoff", Result{Failed: true, Attempt: 1}, Policy{MaxAttempts: 3}, Decision{Action: Retry}},
		{"permanent, dead letters on", Result{Failed: true, Permanent: true, Attempt: 1}, pol(true),
			Decision{Action: Fail, DeadLetter: true, Term: true}},
		{"permanent, dead letters off", Result{Failed: true, Permanent: true, Attempt: 1}, pol(false),
			Decision{Action: Fail, Term: true}},
		{"last attempt, dead letters on", Result{Failed: true, Attempt: 3}, pol(true),
			Decision{Action: Fail, DeadLetter: true, Term: true}},
		{"last attempt, dead letters off: hand back to the server", Result{Failed: true, Attempt: 3}, pol(false),
			Decision{Action: Fail}},
		{"beyond last attempt", Result{Failed: true, Attempt: 9}, pol(false), Decision{Action: Fail}},
		{"retry-after at last attempt fails", Result{Failed: true, Attempt: 3, HasRetryAfter: true}, pol(true),
			Decision{Action: Fail, DeadLetter: true, Term: true}},
		{"shutdown", Result{Failed: true, Attempt: 3, ShuttingDown: true}, pol(true), Decision{Action: HandBack}},
		{"permanent during shutdown", Result{Failed: true, Permanent: true, Attempt: 1, ShuttingDown: true}, pol(true),
			Decision{Action: Fail, DeadLetter: true, Term: true}},
		{"success during shutdown", Result{Attempt: 1, ShuttingDown: true}, pol(true), Decision{Action: Ack}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Decide(c.r, c.p); got != c.want {
				t.Errorf("Decide(%+v) = %+v, want %+v", c.r, got, c.want)
			}
		})
	}
}
