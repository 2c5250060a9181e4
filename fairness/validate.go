package fairness

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// taskMsg returns the task message to publish to target for a staged
// message of key with headers h and payload data, and the task's ID. The
// staged message is untrusted (anyone allowed to publish on the fair
// subjects may have stored it): it needs exactly one valid task ID
// (Nats-Msg-Id) and exactly one task key header, equal to the key of its
// subject. Every other "Nats-" header is dropped (a Nats-Rollup or
// Nats-Schedule header would act on the task stream; the server's own
// headers of a direct get start with "Nats-" too); the ID becomes the
// message's deduplication ID, so a task moved twice is stored once.
func taskMsg(target, key string, h nats.Header, data []byte) (*nats.Msg, string, error) {
	ids := h.Values(jetstream.MsgIDHeader)
	if len(ids) != 1 || !taskmsg.SafeID(ids[0]) {
		return nil, "", fmt.Errorf("%w: staged task without one valid ID (%s)", framework.ErrCorruptTask, jetstream.MsgIDHeader)
	}
	if ks := h.Values(framework.HeaderKey); len(ks) != 1 || ks[0] != key {
		return nil, ids[0], fmt.Errorf("%w: staged task whose %s header is not the key of its subject", framework.ErrCorruptTask, framework.HeaderKey)
	}
	out := withoutNats(h)
	out.Set(jetstream.MsgIDHeader, ids[0])
	return &nats.Msg{Subject: target, Header: out, Data: data}, ids[0], nil
}

// withoutNats returns a copy of h without its "Nats-" headers (any case).
func withoutNats(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		if len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
			continue
		}
		out[k] = vs
	}
	return out
}
