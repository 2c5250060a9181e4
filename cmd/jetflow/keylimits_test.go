package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/testutil"
)

// keylimits set stores a limit for a key and for a type, ls lists them,
// rm removes them; bad input is a usage error, and so is a type no live
// worker serves.
func TestKeyLimitsCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if out := e.ok(t, nil, "keylimits", "ls").stdout; !strings.Contains(out, "no limit set at run time") {
		t.Errorf("ls before any limit:\n%s", out)
	}
	e.ok(t, nil, "keylimits", "set", "acct.sync", "3", "--key", "acme corp")
	e.ok(t, nil, "keylimits", "set", "acct.sync", "1")
	var u keylimit.Usage
	e.ok(t, &u, "keylimits", "ls", "--json")
	if len(u.Overrides) != 2 || u.Overrides[0].Key != "" || u.Overrides[0].Limit != 1 ||
		u.Overrides[1].Key != "acme corp" || u.Overrides[1].Limit != 3 {
		t.Errorf("overrides %+v", u.Overrides)
	}
	out := e.ok(t, nil, "keylimits", "ls").stdout
	if !strings.Contains(out, "acme corp") || !strings.Contains(out, "(every key)") {
		t.Errorf("ls:\n%s", out)
	}
	e.ok(t, nil, "keylimits", "rm", "acct.sync", "--key", "acme corp")
	u = keylimit.Usage{}
	e.ok(t, &u, "keylimits", "ls", "--json")
	if len(u.Overrides) != 1 || u.Overrides[0].Key != "" {
		t.Errorf("after rm: %+v", u.Overrides)
	}
	e.fails(t, exitUsage, "limit", "keylimits", "set", "acct.sync", "0")
	e.fails(t, exitUsage, "task type", "keylimits", "set", "Bad Type", "2")
	e.fails(t, exitUsage, "--key", "keylimits", "set", "acct.sync", "2", "--key", "a\nb")

	// Once a worker runs, a type no live worker serves is refused (a
	// misspelt type), unless --any-type.
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("acct.sync", func(context.Context, *framework.Task) error { return nil })
	})
	testutil.Wait(t, waitLong, "the worker listed", func() bool {
		return strings.Contains(e.ok(t, nil, "workers").stdout, "acct.sync")
	})
	e.fails(t, exitUsage, "no live worker serves", "keylimits", "set", "acct.snyc", "2")
	e.ok(t, nil, "keylimits", "set", "acct.sync", "2")
	e.ok(t, nil, "keylimits", "set", "acct.snyc", "2", "--any-type")
}
