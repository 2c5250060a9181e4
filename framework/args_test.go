package framework_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// refund and payout name their task types.
type refund struct {
	Order string `json:"order"`
}

func (refund) TaskType() string { return "payments.refund" }

type payout struct {
	Account string `json:"account"`
}

func (payout) TaskType() string { return "payments.payout" }

// TestTaskArgsBindTypeAndPayload: a payload type that names its task type is
// enqueued as that type and reaches only the handler of that payload type,
// one by one and in bulk.
func TestTaskArgsBindTypeAndPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	refunds := make(chan string, 4)
	payouts := make(chan string, 4)
	framework.HandleArgs(w, func(ctx context.Context, tk *framework.Task, r refund) error {
		refunds <- tk.Type + ":" + r.Order
		return nil
	})
	framework.HandleArgs(w, func(ctx context.Context, tk *framework.Task, p payout) error {
		payouts <- tk.Type + ":" + p.Account
		return nil
	})
	startWorker(t, w)

	info, err := e.cl.EnqueueArgs(t.Context(), refund{Order: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "payments.refund" {
		t.Fatalf("enqueued as %q", info.Type)
	}
	if _, err := e.cl.EnqueueMany(t.Context(), []framework.TaskSpec{
		framework.Spec(payout{Account: "a-1"}),
		framework.Spec(refund{Order: "o-2"}, framework.WithPriority(framework.PriorityHigh)),
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range 2 {
		got[testutil.Recv(t, refunds, waitLong, "a refund")] = true
	}
	got[testutil.Recv(t, payouts, waitLong, "a payout")] = true
	for _, want := range []string{"payments.refund:o-1", "payments.refund:o-2", "payments.payout:a-1"} {
		if !got[want] {
			t.Fatalf("handled %v, want %s", got, want)
		}
	}
}

// TestTaskArgsMismatchIsRefused: the string API cannot send a payload that
// names one type to another type's queue, nor register its handler there.
func TestTaskArgsMismatchIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.cl.Enqueue(t.Context(), "payments.payout", refund{Order: "o-1"})
	if !errors.Is(err, framework.ErrInvalidOption) || !strings.Contains(err.Error(), "payments.refund") {
		t.Fatalf("enqueue of a refund as a payout: %v, want ErrInvalidOption naming payments.refund", err)
	}
	if _, err := e.cl.EnqueueArgs(t.Context(), nil); !errors.Is(err, framework.ErrInvalidOption) {
		t.Fatalf("nil args: %v", err)
	}
	w := e.worker(t)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "payments.refund") {
			t.Fatalf("Handle of a refund as payments.payout: panic %v, want one naming payments.refund", r)
		}
	}()
	framework.Handle(w, "payments.payout", func(ctx context.Context, tk *framework.Task, r refund) error { return nil })
}

// TestHandleOfPointerArgs: a pointer payload type whose TaskType reads
// through its receiver registers under the string API without a panic.
func TestHandleOfPointerArgs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	framework.Handle(w, "payments.refund", func(ctx context.Context, tk *framework.Task, r *refund) error { return nil })
}
