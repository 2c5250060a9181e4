package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/streams"
)

// docsList returns the quoted subjects of the first code block after the
// heading of docs/security.md.
func docsList(t *testing.T, doc, heading string) []string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/security.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(after, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatalf("no code block after %q", heading)
	}
	var out []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#") // comments
		for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestDocsListTheRenderedPermissions: the lists docs/security.md gives for
// each role are the ones package access renders, for the default prefix
// and a worker serving email.send with a breaker on mail.smtp (the docs
// give the consumer lines of one priority only).
func TestDocsListTheRenderedPermissions(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	n := streams.MustNames("")
	opts := access.Options{Types: []string{"email.send"}, Dependencies: []string{"mail.smtp"}}
	for _, r := range []struct {
		heading string
		perms   func(streams.Names, access.Options) (access.Permissions, error)
		role    string
	}{
		{"### Producer", access.Producer, access.RoleProducer},
		{"### Worker", access.Worker, access.RoleWorker},
		{"### Operator", access.Operator, access.RoleOperator},
		{"### Admin", access.Admin, access.RoleAdmin},
	} {
		o := opts
		if r.role == access.RoleProducer {
			o = access.Options{}
		}
		p, err := r.perms(n, o)
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(p.Publish), p.Subscribe...)
		got := docsList(t, doc, r.heading)
		for _, s := range got {
			if !slices.Contains(want, s) {
				t.Errorf("%s: docs list %q, which access does not grant", r.role, s)
			}
		}
		for _, s := range want {
			if strings.Contains(s, "email_send-") && !strings.Contains(s, "email_send-normal") {
				continue // the docs give one priority
			}
			if !slices.Contains(got, s) {
				t.Errorf("%s: access grants %q, which the docs do not list", r.role, s)
			}
		}
	}
}
