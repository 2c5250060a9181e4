package delays_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func moverTopology(n streams.Names) delays.Topology {
	return delays.Topology{
		DelayStream: n.DelayStream(), ScheduleStream: n.ScheduleStream(), Consumer: streamdefs.DelayConsumerConfig(n),
		ParseSubject: n.ParseDelaySubject, ScheduleSubject: n.ScheduleSubject,
		Target: func(raw string) (string, string, string, error) {
			p, typ, err := n.ParseFiredSubject(raw)
			if err != nil {
				return "", "", "", err
			}
			return n.FiredSubject(p, typ), p.String(), typ, nil
		},
	}
}

// A delayed task cancelled after the mover fetched it and before it stored
// the schedule: the cancel's purges find nothing in the schedule stream, so
// the mover must notice that its delayed task is gone and remove the
// schedule it stored, or the cancelled task would run.
func TestCancelWhileMovingRemovesTheSchedule(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	n := streams.MustNames("")
	m := delays.New(nc, js, moverTopology(n), slog.New(slog.DiscardHandler), nil)
	delayStream, err := js.Stream(ctx, n.DelayStream())
	if err != nil {
		t.Fatal(err)
	}
	delays.SetBeforePublish(m, func(id string) {
		if id == "doomed" {
			// What Client.Cancel does: purge the delay subject, then the
			// schedule subject (empty yet).
			if err := delayStream.Purge(ctx, jetstream.WithPurgeSubject(n.DelaySubject(id))); err != nil {
				t.Errorf("purge: %v", err)
			}
		}
	})
	now := time.Now()
	for _, id := range []string{"doomed", "kept"} {
		msg, _ := taskmsg.Build(taskmsg.Spec{Target: n.TaskSubject(streams.PriorityNormal, "a"), ID: id, Data: []byte("{}"),
			Due: now.Add(time.Hour), Now: now, DelaySubject: n.DelaySubject(id), ScheduleTarget: n.FiredSubject(streams.PriorityNormal, "a")})
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(rctx) })
	testutil.Wait(t, 30*time.Second, "both delayed tasks handled", func() bool { return m.Moved.Load()+m.Cancelled.Load() == 2 })
	stop()
	wg.Wait()
	if m.Moved.Load() != 1 || m.Cancelled.Load() != 1 {
		t.Fatalf("moved %d, cancelled %d; want 1 and 1", m.Moved.Load(), m.Cancelled.Load())
	}
	sched, err := js.Stream(ctx, n.ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sched.GetLastMsgForSubject(ctx, n.ScheduleSubject("kept")); err != nil {
		t.Errorf("schedule of the kept task: %v", err)
	}
	if m, err := sched.GetLastMsgForSubject(ctx, n.ScheduleSubject("doomed")); err == nil {
		t.Errorf("the cancelled task's schedule is still stored: %v", m.Header)
	}
	testutil.Wait(t, 30*time.Second, "an empty delay stream", func() bool {
		info, err := delayStream.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}
