// Package stage lets a feature package have framework.Client store a task
// on a staging subject of its own instead of the task's work subject: the
// client builds the message exactly as Enqueue would (one owner of the wire
// format), and the feature moves it to the work subject later (package
// fairness). It is carried in the enqueue's context, so framework's public
// face does not change.
package stage

import "context"

// Route returns the stream and subject where a task of taskType at
// priority (its subject token: "normal"…) with key (its task key, "" when
// it has none) is stored instead of its work subject. An error refuses the
// enqueue; nothing is stored.
type Route func(taskType, priority, key string) (stream, subject string, err error)

type ctxKey struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r Route) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// From returns the route ctx carries, nil when none.
func From(ctx context.Context) Route {
	r, _ := ctx.Value(ctxKey{}).(Route)
	return r
}
