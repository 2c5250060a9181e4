package framework_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestDLQDebugCrash(t *testing.T) {
	const typ = "dlq.crash"
	e := newEnv(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	router := e.worker(t, framework.WithLogger(log.With("w", "router")))
	router.HandleFunc("dlq.other", noopHandler)
	startWorker(t, router)

	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithDeadLetterRouter(false), framework.WithLogger(log.With("w", "crash")))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		fmt.Fprintln(os.Stderr, "attempt", task.Attempt, time.Now())
		if task.Attempt == task.MaxAttempts {
			nc.Close() // the worker dies mid-task
			return errors.New("never recorded")
		}
		return fmt.Errorf("boom %d", task.Attempt)
	}, framework.WithMaxAttempts(3), framework.WithAckWait(300*time.Millisecond), dlqFast)
	startWorker(t, w)
	e.enqueue(t, typ, "payload", framework.WithID("crash-1"))
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if e.dlqStreamMsgs(t, dlqNames.DLQStream(), "") == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ci := e.consumerInfo(t, typ, framework.PriorityNormal)
	t.Logf("consumer: delivered %+v floor %+v pending %d ackpending %d redelivered %d", ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	t.Logf("advisories %d, task msgs %d", e.maxDeliveryAdvisories(t), e.taskStreamMsgs(t))
	c, _ := e.js.Consumer(t.Context(), dlqNames.AdvisoryStream(), "dlq-router")
	if c != nil {
		rci, _ := c.Info(t.Context())
		t.Logf("router consumer %+v", rci)
	}
	t.Fatal("no dead letter")
}
