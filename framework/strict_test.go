package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
)

// chargeArgs and refundArgs are the payloads of two task types; a refundArgs enqueued
// under the chargeArgs type is the mistake StrictPayload catches.
type chargeArgs struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

type refundArgs struct {
	RefundID string `json:"refund_id"`
}

// TestStrictPayload sends a charge handler a refundArgs, a chargeArgs with trailing
// data and a real chargeArgs. Without StrictPayload the refundArgs runs as a zero
// chargeArgs (the silent path of issue 37); with it, the refundArgs and the
// trailing data are decode errors, dead-lettered with reason decode, and
// only the real chargeArgs runs.
func TestStrictPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	ran := make(chan chargeArgs, 8)
	handler := func(_ context.Context, _ *framework.Task, c chargeArgs) error {
		ran <- c
		return nil
	}
	framework.Handle(w, "pay.strict", handler, framework.StrictPayload())
	framework.Handle(w, "pay.lenient", handler)
	startWorker(t, w)

	e.enqueue(t, "pay.lenient", refundArgs{RefundID: "r1"}, framework.WithID("lenient-refundArgs"))
	rec.waitFor(t, "succeeded", "lenient-refundArgs")
	if c := <-ran; c != (chargeArgs{}) {
		t.Fatalf("lenient handler got %+v, want the zero chargeArgs", c)
	}

	e.enqueue(t, "pay.strict", refundArgs{RefundID: "r1"}, framework.WithID("strict-refundArgs"))
	e.enqueue(t, "pay.strict", json.RawMessage(`{"order_id":"o1","cents":5} {}`), framework.WithID("strict-trailing"))
	e.enqueue(t, "pay.strict", chargeArgs{OrderID: "o2", Cents: 7}, framework.WithID("strict-chargeArgs"))
	for _, id := range []string{"strict-refundArgs", "strict-trailing"} {
		failed := rec.waitFor(t, "failed", id)
		var de *framework.DecodeError
		if !errors.As(failed.Err, &de) || de.TaskType != "pay.strict" {
			t.Errorf("task %s failed with %v, want a DecodeError", id, failed.Err)
		}
	}
	rec.waitFor(t, "succeeded", "strict-chargeArgs")
	if c := <-ran; c != (chargeArgs{OrderID: "o2", Cents: 7}) {
		t.Errorf("strict handler got %+v, want the real chargeArgs", c)
	}
	select {
	case c := <-ran:
		t.Errorf("strict handler ran on %+v", c)
	default:
	}
	dead := e.waitDeadLetters(t, 2)
	for _, r := range dead {
		if r.Reason != dlq.ReasonDecode || !strings.HasPrefix(r.TaskID, "strict-") {
			t.Errorf("dead letter of %s: reason %q, want %q", r.TaskID, r.Reason, dlq.ReasonDecode)
		}
	}
}

// TestStrictPayloadMisplaced: StrictPayload on a handler that decodes its
// own payload, or with a codec that cannot decode strictly, panics at
// registration instead of having no effect.
func TestStrictPayloadMisplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mustPanic := func(name, want string, register func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), want) {
				t.Errorf("%s: panic %v, want one naming %q", name, r, want)
			}
		}()
		register()
	}
	w := e.worker(t)
	mustPanic("string API", "typed handlers", func() {
		w.HandleFunc("pay.raw", func(context.Context, *framework.Task) error { return nil }, framework.StrictPayload())
	})
	other := e.worker(t, framework.WithCodec(otherCodec{}))
	mustPanic("codec", "StrictCodec", func() {
		framework.Handle(other, "pay.other", func(context.Context, *framework.Task, chargeArgs) error { return nil }, framework.StrictPayload())
	})
}
