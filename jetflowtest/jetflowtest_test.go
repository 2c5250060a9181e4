package jetflowtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/jetflowtest"
)

func TestRunPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fail := framework.HandlerFunc(func(context.Context, *framework.Task) error { return errors.New("x") })
	last := jetflowtest.NewTask("a.b", nil, jetflowtest.Attempt(3), jetflowtest.MaxAttempts(3))
	if out := jetflowtest.Run(ctx, fail, last, jetflowtest.WithDeadLetters(false)); out.Action != framework.ActionFail || out.DeadLettered {
		t.Errorf("last attempt, dead letters off: %+v, want fail without a record", out)
	}
	slow := framework.HandlerFunc(func(ctx context.Context, _ *framework.Task) error {
		<-ctx.Done()
		return ctx.Err()
	})
	out := jetflowtest.Run(ctx, slow, jetflowtest.NewTask("a.b", nil), jetflowtest.WithTimeout(time.Millisecond))
	if out.Action != framework.ActionRetry || !errors.Is(out.Err, framework.ErrHandlerTimeout) {
		t.Errorf("timeout: %+v, want a retry with ErrHandlerTimeout", out)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	seen := framework.HandlerFunc(func(ctx context.Context, task *framework.Task) error {
		if framework.TaskFromContext(ctx) != task || !task.ScheduledFor.Equal(due) || task.Header("K") != "v" || task.ID != "x" {
			return framework.Permanent(errors.New("task not as built"))
		}
		return nil
	})
	task := jetflowtest.NewTask("a.b", map[string]int{"n": 1}, jetflowtest.ID("x"), jetflowtest.DueAt(due), jetflowtest.Header("K", "v"))
	if out := jetflowtest.Run(ctx, seen, task); out.Action != framework.ActionAck {
		t.Errorf("task as built: %+v", out)
	}
}
