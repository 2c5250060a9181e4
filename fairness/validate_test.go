package fairness

import (
	"errors"
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
