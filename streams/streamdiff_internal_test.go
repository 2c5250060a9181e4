package streams

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDiffStream checks the classification of each difference without a
// server: what Ensure changes in place, what needs an operator (with the
// commands to run) and what is only weaker.
func TestDiffStream(t *testing.T) {
	t.Parallel()
	n := MustNames("")
	cfgs, err := StreamConfigs(Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := cfgs[0] // the task stream
	tests := []struct {
		name                   string
		edit                   func(*jetstream.StreamConfig)
		changes, drift, weaker string // "Field have->want", comma separated
		fixContains            string
	}{
		{name: "same", edit: func(*jetstream.StreamConfig) {}},
		{name: "previous release", edit: func(c *jetstream.StreamConfig) {
			c.Discard, c.AllowAtomicPublish, c.AllowMsgTTL = jetstream.DiscardOld, true, true
		}, changes: "Discard DiscardOld->DiscardNew,AllowAtomicPublish true->false", weaker: "AllowMsgTTL true->false",
			fixContains: "nats stream rm JETFLOW_TASKS"},
		{name: "retention", edit: func(c *jetstream.StreamConfig) { c.Retention = jetstream.LimitsPolicy },
			drift: "Retention Limits->WorkQueue", fixContains: "let the workers empty it"},
		{name: "storage", edit: func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage },
			drift: "Storage Memory->File", fixContains: "`nats stream rm JETFLOW_TASKS`, then `jetflow upgrade`"},
		{name: "settings of its own", edit: func(c *jetstream.StreamConfig) {
			c.MaxMsgs, c.Duplicates, c.Replicas = 10, time.Minute, 3
		}, changes: "Replicas 3->1,Duplicates 1m0s->2m0s"},
	}
	for _, tc := range tests {
		have := want
		tc.edit(&have)
		next, d := diffStream(have, want)
		line := func(ds []Drift) string {
			var out []string
			for _, x := range ds {
				out = append(out, x.Field+" "+x.Have+"->"+x.Want)
			}
			return strings.Join(out, ",")
		}
		if got := line(d.changes); got != tc.changes {
			t.Errorf("%s: changes %q, want %q", tc.name, got, tc.changes)
		}
		if got := line(d.drift); got != tc.drift {
			t.Errorf("%s: drift %q, want %q", tc.name, got, tc.drift)
		}
		weaker := strings.ReplaceAll(line(d.weaker), " (the server cannot turn it off: drain and recreate the stream, decision 040)", "")
		if weaker != tc.weaker {
			t.Errorf("%s: weaker %q, want %q", tc.name, weaker, tc.weaker)
		}
		if next.MaxMsgs != have.MaxMsgs {
			t.Errorf("%s: the update drops MaxMsgs %d, a setting Ensure does not manage", tc.name, have.MaxMsgs)
		}
		if again, d := diffStream(next, want); len(d.changes) != 0 || again.Discard != want.Discard {
			t.Errorf("%s: the updated configuration still differs: %+v", tc.name, d.changes)
		}
		for _, x := range append(d.drift, d.weaker...) {
			if fix := n.fix(x.Resource, x.Field); !strings.Contains(fix, tc.fixContains) {
				t.Errorf("%s: fix of %s %q does not say %q", tc.name, x.Field, fix, tc.fixContains)
			}
		}
	}
}

// TestFixes checks that every fix names the resource and the commands.
func TestFixes(t *testing.T) {
	t.Parallel()
	n := MustNames("app")
	for _, tc := range []struct{ resource, field, want string }{
		{"APP_TASKS", "AllowMsgSchedules", "jetflow upgrade --migrate-task-stream"},
		{"APP_TASKS", "DenyPurge", "AllowTaskPurge"},
		{"APP_SCHEDULES", "Storage", "jetflow tasks ls --state scheduled"},
		{"APP_DELAYS", "Retention", "nats stream info APP_DELAYS"},
		{"APP_DLQ", "Storage", "nats stream backup APP_DLQ DIR"},
		{"APP_DELAYS/mover", "AckPolicy", "nats consumer rm APP_DELAYS mover"},
		{"APP_SCHEDULES/tasks", "DeliverSubject", "remove the source"},
	} {
		if fix := n.fix(tc.resource, tc.field); !strings.Contains(fix, tc.want) || !strings.Contains(fix, streamdefs.UpgradeCommand) {
			t.Errorf("fix of %s %s: %q; want it to say %q and %q", tc.resource, tc.field, fix, tc.want, streamdefs.UpgradeCommand)
		}
	}
	if fix := bucketFix("APP_STATE"); !strings.Contains(fix, "nats kv del APP_STATE") {
		t.Errorf("bucket fix %q", fix)
	}
}
