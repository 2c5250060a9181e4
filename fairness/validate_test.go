package fairness

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
)

func TestTaskMsg(t *testing.T) {
	h := nats.Header{"Nats-Msg-Id": {"id1"}, "Jetflow-Key": {"k"}, "Nats-Rollup": {"all"}, "nats-schedule": {"@every 1s"},
		"Nats-Sequence": {"7"}, "X-Trace": {"t"}, "Jetflow-Encoding": {"raw"}}
	m, id, err := taskMsg("jetflow.task.normal.a", "k", h, []byte("p"))
	if err != nil || id != "id1" {
		t.Fatalf("id %q err %v", id, err)
	}
	if m.Subject != "jetflow.task.normal.a" || string(m.Data) != "p" {
		t.Errorf("message %s %q", m.Subject, m.Data)
	}
	for k := range m.Header {
		switch k {
		case "Nats-Msg-Id", "Jetflow-Key", "X-Trace", "Jetflow-Encoding":
		default:
			t.Errorf("header %s kept", k)
		}
	}
	if m.Header.Get("Nats-Msg-Id") != "id1" || m.Header.Get("X-Trace") != "t" {
		t.Errorf("headers %v", m.Header)
	}
	for name, h := range map[string]nats.Header{
		"no ID":       {"Jetflow-Key": {"k"}},
		"invalid ID":  {"Nats-Msg-Id": {"a b"}, "Jetflow-Key": {"k"}},
		"two IDs":     {"Nats-Msg-Id": {"a", "b"}, "Jetflow-Key": {"k"}},
		"no key":      {"Nats-Msg-Id": {"a"}},
		"another key": {"Nats-Msg-Id": {"a"}, "Jetflow-Key": {"j"}},
		"two keys":    {"Nats-Msg-Id": {"a"}, "Jetflow-Key": {"k", "k"}},
	} {
		if _, _, err := taskMsg("s", "k", h, nil); !errors.Is(err, framework.ErrCorruptTask) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// FuzzTaskMsg: whatever headers a staged message has, a message taskMsg
// accepts carries exactly one valid ID as its only "Nats-" header, and the
// key of its subject.
func FuzzTaskMsg(f *testing.F) {
	f.Add("Nats-Msg-Id", "id1", "Jetflow-Key", "k", "Nats-Rollup", "all")
	f.Add("nats-msg-id", "a:b", "jetflow-key", "k", "NATS-SCHEDULE", "@every 1s")
	f.Add("Nats-Msg-Id", "", "Jetflow-Key", "", "Status", "409")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		h := nats.Header{} // as read from the wire: keys in any case
		h[k1] = append(h[k1], v1)
		h[k2] = append(h[k2], v2)
		h[k3] = append(h[k3], v3)
		m, id, err := taskMsg("jetflow.task.normal.a", "k", h, nil)
		if err != nil {
			return
		}
		if got := m.Header.Values("Nats-Msg-Id"); len(got) != 1 || got[0] != id || id == "" {
			t.Fatalf("ID header %q, id %q", got, id)
		}
		if got := m.Header.Values(framework.HeaderKey); len(got) != 1 || got[0] != "k" {
			t.Fatalf("key header %q", got)
		}
		for name := range m.Header {
			if len(name) >= 5 && strings.EqualFold(name[:5], "nats-") && name != "Nats-Msg-Id" {
				t.Fatalf("header %s kept", name)
			}
		}
	})
}
