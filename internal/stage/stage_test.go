package stage

import (
	"context"
	"testing"
)

func TestWithFrom(t *testing.T) {
	if From(context.Background()) != nil {
		t.Fatal("a bare context carries a route")
	}
	ctx := With(context.Background(), func(taskType, priority, key string) (string, string, error) {
		return "S", taskType + "." + priority + "." + key, nil
	})
	r := From(ctx)
	if r == nil {
		t.Fatal("no route")
	}
	if s, sub, err := r("a", "normal", "k"); s != "S" || sub != "a.normal.k" || err != nil {
		t.Fatalf("route = %q %q %v", s, sub, err)
	}
}
