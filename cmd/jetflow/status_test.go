package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
)

// TestStatusCountsDeadLettersOncePerType: dead letters are counted per
// type, so the table shows a type's count on its first row only (four
// priority rows of 5 dead letters read as 20 before).
func TestStatusCountsDeadLettersOncePerType(t *testing.T) {
	t.Parallel()
	o := &inspect.Overview{Taken: time.Now(), DeadTotal: 5}
	for _, p := range []framework.Priority{framework.PriorityCritical, framework.PriorityHigh, framework.PriorityNormal, framework.PriorityLow} {
		o.Queues = append(o.Queues, inspect.QueueOverview{Type: "emails.send", Priority: p, Dead: 5, Pulls: 1, ReplicasCurrent: true})
	}
	var out bytes.Buffer
	c := &cli{stdout: &out}
	if err := printStatus(c, o, "nats://x"); err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^emails\.send\s+\S+(\s+\d+){4}\s+-\s+5\s`).FindAllString(out.String(), -1)); n != 1 {
		t.Fatalf("the type's 5 dead letters shown on %d rows, want 1:\n%s", n, out.String())
	}
}
