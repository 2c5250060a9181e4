package effects_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// crashPair runs two workers, each on its own connection, serving one task
// type with handler h. The handler learns which connection runs it, so it
// can close it: a real fault that leaves the delivery unacknowledged, so
// the server redelivers the task to the other worker after the ack wait.
func crashPair(t *testing.T, e *env, taskType string, h func(ctx context.Context, task *framework.Task, nc *nats.Conn) error) {
	t.Helper()
	conns := map[*framework.Worker]*nats.Conn{}
	var workers []*framework.Worker
	for range 2 {
		nc := testutil.Connect(t, e.Server)
		w, err := framework.NewWorker(nc, framework.WithShutdownTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		conns[w] = nc
		workers = append(workers, w)
	}
	for _, w := range workers {
		w.HandleFunc(taskType, func(ctx context.Context, task *framework.Task) error {
			return h(ctx, task, conns[framework.TaskFromContext(ctx).Worker()])
		}, framework.WithAckWait(time.Second), framework.WithMaxAttempts(3),
			framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}))
		startWorker(t, w)
	}
}

func TestOnceSkipsEffectOnRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var applied, runs atomic.Int32
	second := make(chan error, 1)
	crashPair(t, e, "once.charge", func(ctx context.Context, task *framework.Task, nc *nats.Conn) error {
		runs.Add(1)
		err := effects.Once(ctx, "charge", func(ctx context.Context) error {
			applied.Add(1)
			return nil
		})
		if task.Attempt == 1 {
			// The effect is recorded; the worker dies before acknowledging.
			nc.Close()
			return err
		}
		second <- err
		return err
	})
	e.Enqueue(t, "once.charge", nil, framework.WithID("pay-1"))
	if err := testutil.Recv(t, second, waitLong, "redelivery"); err != nil {
		t.Fatalf("Once on redelivery: %v", err)
	}
	if n := applied.Load(); n != 1 {
		t.Fatalf("effect applied %d times, want 1", n)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestOnceUncertainOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy      effects.Policy
		wantEffects int32
		wantErr     error
	}{
		{effects.FailUncertain, 1, effects.ErrUncertain},
		{effects.Rerun, 2, nil},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var applied atomic.Int32
			second := make(chan error, 1)
			crashPair(t, e, "once.uncertain", func(ctx context.Context, task *framework.Task, nc *nats.Conn) error {
				err := effects.Once(ctx, "email", func(ctx context.Context) error {
					applied.Add(1)
					if task.Attempt == 1 {
						// The effect happened; the worker dies before the
						// ledger records it.
						nc.Close()
					}
					return nil
				}, effects.WithPolicy(tc.policy))
				if task.Attempt == 1 {
					if err == nil {
						return errors.New("recording should have failed")
					}
					return err
				}
				second <- err
				return err
			})
			e.Enqueue(t, "once.uncertain", nil, framework.WithID("mail-1"))
			err := testutil.Recv(t, second, waitLong, "redelivery")
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Once on redelivery: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				var ue *effects.UncertainError
				if !framework.IsPermanent(err) || !errors.As(err, &ue) || ue.Attempt != 1 || ue.Key != "email" || ue.TaskID != "mail-1" {
					t.Fatalf("error %v is not a permanent EffectUncertainError for attempt 1", err)
				}
			}
			if n := applied.Load(); n != tc.wantEffects {
				t.Fatalf("effect applied %d times, want %d", n, tc.wantEffects)
			}
		})
	}
}

func TestOnceValueAndRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var charges, mails atomic.Int32
	done := make(chan string, 1)
	w := e.Worker(t)
	w.HandleFunc("once.flow", func(ctx context.Context, task *framework.Task) error {
		id, err := effects.OnceValue(ctx, "charge", func(ctx context.Context) (string, error) {
			return fmt.Sprintf("ch_%d", charges.Add(1)), nil
		})
		if err != nil {
			return err
		}
		// A failing effect releases its claim: the next attempt runs it.
		err = effects.Once(ctx, "mail", func(ctx context.Context) error {
			if mails.Add(1) == 1 {
				return errors.New("smtp down")
			}
			return nil
		})
		if err != nil {
			return framework.RetryAfterErr(10*time.Millisecond, err)
		}
		if task.Attempt < 3 {
			return framework.RetryAfter(10 * time.Millisecond) // fail after both effects
		}
		done <- id
		return nil
	})
	startWorker(t, w)
	e.Enqueue(t, "once.flow", nil, framework.WithID("flow-1"))
	if id := testutil.Recv(t, done, waitLong, "third attempt"); id != "ch_1" {
		t.Fatalf("recorded value %q, want ch_1", id)
	}
	if c, m := charges.Load(), mails.Load(); c != 1 || m != 2 {
		t.Fatalf("charges %d (want 1), mail runs %d (want 2)", c, m)
	}
}

func TestOnceErrors(t *testing.T) {
	t.Parallel()
	if err := effects.Once(context.Background(), "k", func(context.Context) error { return nil }); !errors.Is(err, framework.ErrNoTask) {
		t.Fatalf("outside a handler: %v", err)
	}
	e := newEnv(t)
	got := make(chan error, 2)
	w := e.Worker(t)
	w.HandleFunc("once.bad", func(ctx context.Context, task *framework.Task) error {
		got <- effects.Once(ctx, "no spaces", func(context.Context) error { return nil })
		got <- effects.Once(ctx, "k", func(context.Context) error { return nil }, effects.WithPolicy(7))
		return nil
	})
	startWorker(t, w)
	e.Enqueue(t, "once.bad", nil)
	if err := testutil.Recv(t, got, waitLong, "handler"); !errors.Is(err, effects.ErrInvalidKey) {
		t.Fatalf("bad key: %v", err)
	}
	if err := testutil.Recv(t, got, waitLong, "handler"); !errors.Is(err, framework.ErrInvalidOption) {
		t.Fatalf("bad policy: %v", err)
	}
}

// TestOnceManualResolution follows docs/effects.md: an operator resolves an
// uncertain effect by marking it done (the task then skips it) or by
// deleting the claim (the task then runs it).
func TestOnceManualResolution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := framework.EnsureBuckets(ctx, e.JS); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JS.KeyValue(ctx, "JETFLOW_EFFECTS")
	if err != nil {
		t.Fatal(err)
	}
	claim := []byte(`{"state":"started","attempt":1,"at":"2026-03-02T10:15:04Z"}`)
	// Keys are "<type>.<task ID>.<effect key>", the type escaped.
	for _, k := range []string{"once=2Emanual.applied.x", "once=2Emanual.notapplied.x"} {
		if _, err := kv.Put(ctx, k, claim); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "once=2Emanual.applied.x", []byte(`{"state":"done","attempt":1,"at":"2026-03-02T10:20:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "once=2Emanual.notapplied.x"); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		id  string
		ran bool
		err error
	}
	got := make(chan outcome, 2)
	w := e.Worker(t)
	w.HandleFunc("once.manual", func(ctx context.Context, task *framework.Task) error {
		ran := false
		err := effects.Once(ctx, "x", func(context.Context) error { ran = true; return nil })
		got <- outcome{task.ID, ran, err}
		return err
	})
	startWorker(t, w)
	e.Enqueue(t, "once.manual", nil, framework.WithID("applied"))
	e.Enqueue(t, "once.manual", nil, framework.WithID("notapplied"))
	for range 2 {
		o := testutil.Recv(t, got, waitLong, "handler")
		if o.err != nil || o.ran != (o.id == "notapplied") {
			t.Errorf("task %s: ran %v, err %v", o.id, o.ran, o.err)
		}
	}
}

// Effects are scoped by task type: a task of type B with the ID of a task
// of type A neither gets A's recorded value nor claims A's effect, and the
// records are keyed under each type's own token ("$KV.JETFLOW_EFFECTS.<type>.>").
func TestOnceScopedByTaskType(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := make(chan string, 4)
	w := e.Worker(t)
	for _, typ := range []string{"scope.a", "scope.b"} {
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			v, err := effects.OnceValue(ctx, "charge", func(context.Context) (string, error) { return typ, nil })
			got <- task.Type + " " + v
			return err
		})
	}
	startWorker(t, w)
	// Within the stream's duplicate window two immediate tasks cannot share
	// an ID; a delayed task can (its schedule fires it without a message
	// ID), and so can any task after the window.
	e.Enqueue(t, "scope.b", nil, framework.WithID("shared"), framework.In(10*time.Millisecond))
	if g := testutil.Recv(t, got, waitLong, "type B's task"); g != "scope.b scope.b" {
		t.Fatalf("B ran as %q", g)
	}
	e.Enqueue(t, "scope.a", nil, framework.WithID("shared"))
	if g := testutil.Recv(t, got, waitLong, "type A's task"); g != "scope.a scope.a" {
		t.Errorf("A's effect with B's task ID: %q, want A's own value", g)
	}
	kv, err := e.JS.KeyValue(t.Context(), "JETFLOW_EFFECTS")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scope=2Ea.shared.charge", "scope=2Eb.shared.charge"} {
		if _, err := kv.Get(t.Context(), k); err != nil {
			t.Errorf("record %s: %v", k, err)
		}
	}
}
