package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jetflow-io/jetflow/workflow"
)

// TestStepsReadDocumentsFromTheMemo: a step whose document was written by
// this process (the commit of the step before it) is not decoded again
// (decision 032), and the outputs it reads through that copy are the ones
// the steps before it recorded.
func TestStepsReadDocumentsFromTheMemo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := workflow.New("memo", workflow.WithoutChaining()) // the memo serves steps that read a document
	workflow.Step(d, "a", func(ctx context.Context, n int) (int, error) { return n + 1, nil })
	workflow.Step(d, "b", func(ctx context.Context, n int) (int, error) {
		a, err := workflow.Output[int](ctx, "a")
		return a * 10, err
	}, workflow.After("a"))
	workflow.Step(d, "c", func(ctx context.Context, n int) (string, error) {
		a, err := workflow.Output[int](ctx, "a")
		if err != nil {
			return "", err
		}
		b, err := workflow.Output[int](ctx, "b")
		return fmt.Sprintf("%d/%d", a, b), err
	}, workflow.After("b"))
	c := e.run(t, d)

	const runs = 10
	before := workflow.MemoHits()
	for i := range runs {
		r := wait(t, c, start(t, c, "memo", i))
		var out string
		if r.Status != workflow.RunCompleted || json.Unmarshal(r.Step("c").Output, &out) != nil || out != fmt.Sprintf("%d/%d", i+1, (i+1)*10) {
			t.Fatalf("run %d: %s, output of c %s", i, r.Status, r.Step("c").Output)
		}
	}
	// Other tests of the package may add hits, never take them away.
	if hits := workflow.MemoHits() - before; hits < 2*runs {
		t.Fatalf("%d documents came from the memo over %d runs; steps b and c alone read %d it holds", hits, runs, 2*runs)
	}
}
