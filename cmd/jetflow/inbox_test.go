package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/testutil"
)

// TestInboxPrefix runs a command as a user who may subscribe only to its
// own inbox prefix, as docs/security.md gives every role: without
// --inbox-prefix the server refuses the reply subscription and the command
// names the refusal; with the flag, or a context's inbox_prefix, it works.
func TestInboxPrefix(t *testing.T) {
	users := func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "a", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{">"}},
				Subscribe: &server.SubjectPermission{Allow: []string{">"}},
			}},
			{Username: "ops", Password: "o", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_ops.>"}},
			}},
		}
	}
	e := newAuthEnv(t, []testutil.ServerOption{users}, []nats.Option{nats.UserInfo("admin", "a")})

	r := e.cli(t, "status", "--user", "ops", "--password", "o", "--timeout", "5s")
	if r.code != exitFailed || !strings.Contains(r.stderr, "refused this user") || !strings.Contains(r.stderr, "_INBOX.") ||
		!strings.Contains(r.stderr, "--inbox-prefix") {
		t.Fatalf("without --inbox-prefix: exit %d, stderr %q; want the refusal of the _INBOX subscription named", r.code, r.stderr)
	}
	if r := e.cli(t, "status", "--user", "ops", "--password", "o", "--inbox-prefix", "_INBOX_ops"); r.code != exitOK {
		t.Fatalf("--inbox-prefix: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.cli(t, "status", "--inbox-prefix", "_INBOX.>"); r.code != exitUsage {
		t.Fatalf("wildcard inbox prefix: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}

	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := filepath.Join(cfg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctxJSON := fmt.Sprintf(`{"url":%q,"user":"ops","password":"o","inbox_prefix":"_INBOX_ops"}`, e.url)
	if err := os.WriteFile(filepath.Join(dir, "ops.json"), []byte(ctxJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "--context", "ops", "status"); r.code != exitOK {
		t.Fatalf("context with inbox_prefix: exit %d, stderr %q", r.code, r.stderr)
	}
}
