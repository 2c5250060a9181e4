package enqueue

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

func TestStage(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	work := b.Names.TaskSubject(streams.PriorityHigh, "t.a")
	routeErr := errors.New("route said no")
	route := func(taskType, priority, key string) (string, string, error) {
		if key == "refuse" {
			return "", "", routeErr
		}
		return "STAGE", "stage." + taskType + "." + priority + "." + key, nil
	}
	msg := func(subject string, h ...string) *nats.Msg {
		m := &nats.Msg{Subject: subject, Header: nats.Header{}}
		for i := 0; i < len(h); i += 2 {
			m.Header.Set(h[i], h[i+1])
		}
		return m
	}
	id := jetstream.MsgIDHeader
	cases := []struct {
		name    string
		l       streams.Layout
		msg     *nats.Msg
		id      string
		subject string // after a success
		err     error
	}{
		{"staged", streams.Layout{}, msg(work, id, "x", HeaderKey, "k"), "x", "stage.t.a.high.k", nil},
		{"partitions", streams.Layout{Partitions: 2}, msg(work, id, "x"), "x", "", errInvalid},
		{"not on the work subject", streams.Layout{}, msg("elsewhere", id, "x"), "x", "", errInvalid},
		{"no ID", streams.Layout{}, msg(work, id, "x"), "", "", errInvalid},
		{"no message ID", streams.Layout{}, msg(work), "x", "", errInvalid},
		{"unique", streams.Layout{}, msg(work, id, "x", unique.HeaderKey, "u"), "x", "", errInvalid},
		{"route fails", streams.Layout{}, msg(work, id, "x", HeaderKey, "refuse"), "x", "", routeErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.msg.Subject
			stream, err := b.Stage(route, tc.l, tc.msg, "t.a", streams.PriorityHigh, tc.id)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || stream != "" || tc.msg.Subject != before {
					t.Errorf("Stage = %q, %v (subject %s), want %v", stream, err, tc.msg.Subject, tc.err)
				}
				return
			}
			if err != nil || stream != "STAGE" || tc.msg.Subject != tc.subject {
				t.Errorf("Stage = %q, %v (subject %s), want STAGE at %s", stream, err, tc.msg.Subject, tc.subject)
			}
		})
	}
}
