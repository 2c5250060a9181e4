package main

import (
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// partitions ls lists each task partition; partitions add grows the
// deployment (and refuses to shrink it); the status lists every task
// stream.
func TestPartitionsCommands(t *testing.T) {
	t.Parallel()
	te := testutil.NewEnv(t, streams.Config{Partitions: 2}, testutil.WithListen())
	e := newClientEnv(t, te.Server, te.Conn)
	out := e.ok(t, nil, "partitions", "ls").stdout
	if !strings.Contains(out, "JETFLOW_TASKS_P1") || strings.Contains(out, "JETFLOW_TASKS_P2") {
		t.Errorf("ls of 2 partitions:\n%s", out)
	}
	var rows []streams.PartitionLeader
	e.ok(t, &rows, "partitions", "add", "3", "--json")
	if len(rows) != 3 || rows[2].Stream != "JETFLOW_TASKS_P2" {
		t.Errorf("after add 3: %+v", rows)
	}
	if l, _, err := streams.DeployedLayout(t.Context(), te.JS, streams.MustNames("")); err != nil || l.Partitions != 3 {
		t.Errorf("deployed count %d, %v", l.Partitions, err)
	}
	if out := e.ok(t, nil, "partitions", "ls").stdout; !strings.Contains(out, "ordered tasks stay in the first 2 partitions") {
		t.Errorf("ls after add 3:\n%s", out)
	}
	e.fails(t, exitUsage, "not removed", "partitions", "add", "2")
	e.fails(t, exitUsage, "partition count", "partitions", "add", "0")
	if out := e.ok(t, nil, "status").stdout; !strings.Contains(out, "JETFLOW_TASKS_P2") {
		t.Errorf("status does not list partition 2's stream:\n%s", out)
	}
}

// partitions add --by type spreads a deployment of one partition by type,
// and ls says so; the spread of a partitioned deployment is kept.
func TestPartitionsAddByType(t *testing.T) {
	t.Parallel()
	te := testutil.NewEnv(t, streams.Config{}, testutil.WithListen())
	e := newClientEnv(t, te.Server, te.Conn)
	e.ok(t, nil, "partitions", "add", "4", "--by", "type")
	l, _, err := streams.DeployedLayout(t.Context(), te.JS, streams.MustNames(""))
	if err != nil || !l.ByType() || l.Partitions != 4 {
		t.Fatalf("layout %+v (%v), want 4 partitions by type", l, err)
	}
	if out := e.ok(t, nil, "partitions", "ls").stdout; !strings.Contains(out, "spread by task type") {
		t.Errorf("ls of a deployment spread by type:\n%s", out)
	}
	e.fails(t, exitUsage, "does not change in place", "partitions", "add", "5", "--by", "task")
	e.ok(t, nil, "partitions", "add", "5")
	if l, _, _ := streams.DeployedLayout(t.Context(), te.JS, streams.MustNames("")); !l.ByType() || l.Partitions != 5 {
		t.Errorf("after add 5: %+v, want 5 partitions still by type", l)
	}
}
