package framework_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// A second enqueue with the same payload (unique by arguments) or the same
// key is refused for the period; other payloads, keys and types are not.
func TestUniqueRefusesSecondEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.enqueue(t, "settle.day", map[string]string{"day": "2026-11-30"}, framework.Unique(time.Hour))
	if first.Duplicate || first.Sequence == 0 {
		t.Fatalf("first = %+v, want stored", first)
	}
	second := e.enqueue(t, "settle.day", map[string]string{"day": "2026-11-30"}, framework.Unique(time.Hour))
	if !second.Duplicate || second.ID != first.ID || second.Sequence != 0 {
		t.Fatalf("second = %+v, want Duplicate with the holder's ID %s", second, first.ID)
	}
	other := e.enqueue(t, "settle.day", map[string]string{"day": "2026-12-01"}, framework.Unique(time.Hour))
	otherType := e.enqueue(t, "settle.week", map[string]string{"day": "2026-11-30"}, framework.Unique(time.Hour))
	if other.Duplicate || otherType.Duplicate {
		t.Fatalf("other payload %+v / other type %+v reported duplicate", other, otherType)
	}
	// An explicit key ignores the payload.
	k1 := e.enqueue(t, "settle.day", 1, framework.Unique(time.Hour), framework.UniqueKey("batch-7"))
	k2 := e.enqueue(t, "settle.day", 2, framework.Unique(time.Hour), framework.UniqueKey("batch-7"))
	if k1.Duplicate || !k2.Duplicate || k2.ID != k1.ID {
		t.Fatalf("keyed enqueues %+v, %+v", k1, k2)
	}
	if n := e.taskStreamMsgs(t); n != 4 {
		t.Fatalf("task stream holds %d messages, want 4", n)
	}
	res, err := inspect.New(e.cl).UniqueReservations(t.Context(), "settle.day")
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("reservations of settle.day = %+v, want 3", res)
	}
	for _, r := range res {
		if r.Type != "settle.day" || r.Until.Before(time.Now().Add(50*time.Minute)) || r.UntilDone {
			t.Fatalf("reservation %+v", r)
		}
	}
}

// The reservation outlives the task unless UniqueUntilDone asks otherwise,
// and ends with its period.
func TestUniqueRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	w.HandleFunc("unique.job", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, w)

	kept := e.enqueue(t, "unique.job", nil, framework.Unique(time.Hour), framework.UniqueKey("kept"))
	done := e.enqueue(t, "unique.job", nil, framework.Unique(time.Hour), framework.UniqueKey("done"), framework.UniqueUntilDone())
	rec.waitFor(t, "succeeded", kept.ID)
	rec.waitFor(t, "succeeded", done.ID) // the release runs before the user's hooks

	if again := e.enqueue(t, "unique.job", nil, framework.Unique(time.Hour), framework.UniqueKey("kept")); !again.Duplicate {
		t.Fatalf("period reservation released when its task succeeded: %+v", again)
	}
	again := e.enqueue(t, "unique.job", nil, framework.Unique(time.Hour), framework.UniqueKey("done"), framework.UniqueUntilDone())
	if again.Duplicate {
		t.Fatalf("UniqueUntilDone reservation kept after success: %+v", again)
	}
	rec.waitFor(t, "succeeded", again.ID)

	// A one-second period ends by itself.
	short := e.enqueue(t, "unique.job", nil, framework.Unique(time.Second), framework.UniqueKey("short"))
	rec.waitFor(t, "succeeded", short.ID)
	var last framework.TaskInfo
	testutil.Wait(t, waitLong, "short reservation expired", func() bool {
		last = e.enqueue(t, "unique.job", nil, framework.Unique(time.Second), framework.UniqueKey("short"))
		return !last.Duplicate
	})
	rec.waitFor(t, "succeeded", last.ID)
}

// Reservations live on the server: a new client after a server restart
// still sees them.
func TestUniqueSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.enqueue(t, "unique.restart", "x", framework.Unique(time.Hour))
	srv := testutil.RestartServer(t, e.srv)
	nc := testutil.Connect(t, srv)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	var second framework.TaskInfo
	testutil.Wait(t, waitLong, "enqueue after restart", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		second, err = cl.Enqueue(ctx, "unique.restart", "x", framework.Unique(time.Hour))
		return err == nil
	})
	if !second.Duplicate || second.ID != first.ID {
		t.Fatalf("after restart: %+v, want duplicate of %s", second, first.ID)
	}
}

func TestUniqueOptionErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, opts := range map[string][]framework.EnqueueOption{
		"zero period":     {framework.Unique(0)},
		"sub-second":      {framework.Unique(500 * time.Millisecond)},
		"empty key":       {framework.Unique(time.Hour), framework.UniqueKey("")},
		"huge key":        {framework.Unique(time.Hour), framework.UniqueKey(string(make([]byte, framework.MaxUniqueKeyLen+1)))},
		"key, no period":  {framework.UniqueKey("k")},
		"done, no period": {framework.UniqueUntilDone()},
	} {
		if _, err := e.cl.Enqueue(t.Context(), "unique.bad", nil, opts...); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	_, err := e.cl.EnqueueMany(t.Context(), []framework.TaskSpec{{Type: "unique.bad", Options: []framework.EnqueueOption{framework.Unique(time.Hour)}}})
	var be *framework.BatchError
	if !errors.As(err, &be) || !errors.Is(be.Errors[0], framework.ErrInvalidOption) {
		t.Fatalf("EnqueueMany with Unique: %v", err)
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Fatalf("%d messages stored", n)
	}
}

// Unique headers come back from the wire: a task of another type carrying a
// valid reservation key and revision, or garbage, releases nothing.
func TestUniqueForgedHeadersReleaseNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	w.HandleFunc("unique.victim", func(context.Context, *framework.Task) error { return errors.New("keep it") },
		framework.WithMaxAttempts(1))
	w.HandleFunc("unique.forger", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, w)

	victim := e.enqueue(t, "unique.victim", nil, framework.Unique(time.Hour), framework.UniqueKey("v"), framework.UniqueUntilDone())
	res, err := inspect.New(e.cl).UniqueReservations(t.Context(), "unique.victim")
	if err != nil || len(res) != 1 {
		t.Fatalf("reservations %+v, %v", res, err)
	}
	names := streams.MustNames("")
	for i, hdr := range []map[string]string{
		{framework.HeaderUniqueKey: res[0].Key, framework.HeaderUniqueRevision: "1"},
		{framework.HeaderUniqueKey: res[0].Key + ".>", framework.HeaderUniqueRevision: "1"},
		{framework.HeaderUniqueKey: "unique.forger.zz", framework.HeaderUniqueRevision: "not-a-number"},
	} {
		m := nats.NewMsg(names.TaskSubject(framework.PriorityNormal, "unique.forger"))
		m.Header.Set("Nats-Msg-Id", "forged-"+string(rune('a'+i)))
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		if _, err := e.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, "succeeded", "forged-"+string(rune('a'+i)))
	}
	if again := e.enqueue(t, "unique.victim", nil, framework.Unique(time.Hour), framework.UniqueKey("v")); !again.Duplicate || again.ID != victim.ID {
		t.Fatalf("forged headers released the victim's reservation: %+v", again)
	}
}

// The longest periods hold too: rounding a period up to whole seconds must
// not wrap it around into the past, which would leave a reservation of a
// second instead of the period asked for.
func TestUniqueLongestPeriod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info, err := e.cl.Enqueue(t.Context(), "unique.long", nil, framework.Unique(time.Duration(math.MaxInt64)))
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	rs, err := inspect.New(e.cl).UniqueReservations(t.Context(), "unique.long")
	if err != nil || len(rs) != 1 || rs[0].TaskID != info.ID {
		t.Fatalf("reservations %+v, %v; want the one of %s", rs, err, info.ID)
	}
	if min := time.Now().Add(100 * 365 * 24 * time.Hour); rs[0].Until.Before(min) {
		t.Errorf("reservation until %v, want after %v", rs[0].Until, min)
	}
}
