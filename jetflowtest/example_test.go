package jetflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/jetflowtest"
)

type Email struct {
	To string `json:"to"`
}

var errMailboxFull = errors.New("mailbox full")

// sendEmail is the handler under test: a bad address is permanent, a full
// mailbox is retried in a minute, anything else with the type's backoff.
func sendEmail(ctx context.Context, t *framework.Task, e Email) error {
	switch e.To {
	case "":
		return framework.Permanent(errors.New("no recipient"))
	case "full@example.com":
		return framework.RetryAfterErr(time.Minute, errMailboxFull)
	case "flaky@example.com":
		return errors.New("smtp: connection reset")
	}
	return nil
}

// A typed handler, run on tasks built in memory: the outcome is what a
// worker would do with each.
func ExampleRunTyped() {
	ctx := context.Background()
	for _, to := range []string{"a@example.com", "full@example.com", ""} {
		out := jetflowtest.RunTyped(ctx, sendEmail, jetflowtest.NewTask("emails.send", Email{To: to}))
		fmt.Printf("%q: %s %v %v\n", to, out.Action, out.Delay, out.Err)
	}
	// Output:
	// "a@example.com": ack 0s <nil>
	// "full@example.com": retry 1m0s retry after 1m0s: mailbox full
	// "": fail 0s permanent: no recipient
}

// The attempt decides between a retry and a dead letter; the backoff is
// the type's.
func ExampleRun_attempts() {
	ctx := context.Background()
	h := framework.TypedHandler(nil, sendEmail)
	backoff := jetflowtest.WithBackoff(framework.BackoffPolicy{Initial: time.Second, Max: time.Minute, Randomization: -1})
	for _, attempt := range []int{1, 2, 5} {
		task := jetflowtest.NewTask("emails.send", Email{To: "flaky@example.com"},
			jetflowtest.Attempt(attempt), jetflowtest.MaxAttempts(5))
		out := jetflowtest.Run(ctx, h, task, backoff)
		fmt.Println(attempt, out.Action, out.Delay, out.DeadLettered)
	}
	// Output:
	// 1 retry 1s false
	// 2 retry 2s false
	// 5 fail 0s true
}

// A panic is recovered and counts as a failed attempt; an undecodable
// payload fails the task for good.
func ExampleRun_panicAndPoison() {
	ctx := context.Background()
	boom := framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error { panic("nil map") })
	out := jetflowtest.Run(ctx, boom, jetflowtest.NewTask("reports.build", nil))
	fmt.Println(out.Action, out.Panicked, errors.Is(out.Err, framework.ErrPanic))

	poison := jetflowtest.NewTask("emails.send", []byte("{not json"))
	out = jetflowtest.RunTyped(ctx, sendEmail, poison)
	fmt.Println(out.Action, errors.Is(out.Err, framework.ErrDecode))
	// Output:
	// retry true true
	// fail true
}
