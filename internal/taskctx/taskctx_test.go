package taskctx

import (
	"context"
	"testing"
)

func TestWithOf(t *testing.T) {
	if Of(context.Background()) != nil {
		t.Fatal("a bare context carries a task")
	}
	task := &struct{ id string }{"t1"}
	ctx := With(context.Background(), task)
	if Of(ctx) != task {
		t.Fatalf("Of = %v, want the task given to With", Of(ctx))
	}
	type other struct{}
	if Of(context.WithValue(ctx, other{}, 1)) != task {
		t.Fatal("a derived context lost the task")
	}
}
