package settle

import "time"

// Action is what to do with a task after an attempt.
type Action uint8

const (
	// Ack acknowledges the task: it succeeded.
	Ack Action = iota + 1
	// Retry hands the task back for redelivery after Decision.Delay.
	Retry
	// Fail ends the task for good (see Decision.DeadLetter and Term).
	Fail
	// HandBack returns the task unfinished for immediate redelivery,
	// without spending the attempt on the task's account (shutdown).
	HandBack
)

// Result is how an attempt ended, as classified by the caller.
type Result struct {
	// Failed is true when the handler returned an error (or panicked).
	Failed bool
	// Permanent is true for an error that must not be retried (a permanent
	// error, an undecodable payload, an untrustworthy due time).
	Permanent bool
	// RetryAfter, when HasRetryAfter, is the delay the handler asked for.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Attempt is the delivery count of this attempt, from 1.
	Attempt int
	// ShuttingDown is true when the worker cancelled the attempt because it
	// stops: the failure is not the task's fault.
	ShuttingDown bool
}

// Policy is the task type's retry and dead-letter policy.
type Policy struct {
	// MaxAttempts is the consumer's MaxDeliver.
	MaxAttempts int
	// Backoff returns the delay before the retry after attempt n.
	Backoff func(attempt int) time.Duration
	// DeadLetters is true when the worker writes dead-letter records itself.
	DeadLetters bool
}

// Decision is what to do with the task.
type Decision struct {
	Action Action
	// Delay is the wait before redelivery for Retry.
	Delay time.Duration
	// DeadLetter, for Fail, asks for the dead-letter record to be written
	// before the task is removed. If that fails the task must not be
	// removed: retry it after the policy's backoff instead.
	DeadLetter bool
	// Term, for Fail, removes the task from the stream (Term). Without it
	// the task is handed back at once, without a delay: the server sees its
	// last delivery and emits the max-deliveries advisory that the
	// dead-letter router follows.
	Term bool
}

// Decide returns what to do after an attempt that ended with r under p.
func Decide(r Result, p Policy) Decision {
	switch {
	case !r.Failed:
		return Decision{Action: Ack}
	case r.ShuttingDown && !r.Permanent:
		return Decision{Action: HandBack}
	case r.Permanent || (p.DeadLetters && r.Attempt >= p.MaxAttempts):
		return Decision{Action: Fail, DeadLetter: p.DeadLetters, Term: true}
	case r.Attempt >= p.MaxAttempts:
		return Decision{Action: Fail}
	case r.HasRetryAfter:
		return Decision{Action: Retry, Delay: r.RetryAfter}
	}
	var d time.Duration
	if p.Backoff != nil {
		d = p.Backoff(r.Attempt)
	}
	return Decision{Action: Retry, Delay: d}
}
