package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// TestDocsNameEveryCommandAndFlag keeps docs/cli.md in step with the
// commands: every command appears as "jetflow NAME" and every flag of its own
// as "--flag" in the page.
func TestDocsNameEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, cmd := range commands() {
		if !strings.Contains(doc, "jetflow "+cmd.name) {
			t.Errorf("docs/cli.md does not show `jetflow %s`", cmd.name)
		}
		if cmd.flags == nil {
			continue
		}
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		cmd.flags(fs, &cli{})
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(doc, "--"+f.Name) {
				t.Errorf("docs/cli.md does not mention --%s of jetflow %s", f.Name, cmd.name)
			}
		})
	}
	conn := flag.NewFlagSet("", flag.ContinueOnError)
	(&connFlags{}).register(conn)
	conn.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 && !strings.Contains(doc, "--"+f.Name) {
			t.Errorf("docs/cli.md does not mention the connection flag --%s", f.Name)
		}
	})
}
