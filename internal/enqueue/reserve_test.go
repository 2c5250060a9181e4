package enqueue

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestPublishError(t *testing.T) {
	t.Parallel()
	other := errors.New("stream said no")
	cases := []struct {
		name, taskType, id string
		closed             bool
		err                error
		text               string
		is                 error
	}{
		{"closed connection", "t.a", "id-1", true, other, "framework: enqueue t.a id-1: ", natserr.ErrNotConnected},
		{"connection error", "t.a", "id-1", false, nats.ErrConnectionClosed, "nothing was stored", natserr.ErrNotConnected},
		{"task known by its ID", "", "id-1", false, other, "framework: task id-1: stream said no", other},
		{"other error", "t.a", "id-1", false, other, "framework: enqueue t.a id-1: stream said no", other},
	}
	for _, tc := range cases {
		err := PublishError(tc.closed, tc.taskType, tc.id, tc.err)
		if !errors.Is(err, tc.is) || !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want it to wrap %v and %v and say %q", tc.name, err, tc.is, tc.err, tc.text)
		}
	}
}

// A unique task's reservation: the first enqueue of a key takes it,
// another one finds it held by the first task's ID, and a release gives
// it back.
func TestReserver(t *testing.T) {
	t.Parallel()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	names := streams.MustNames("")
	r := &Reserver{Conn: nc, JS: js, Names: names, Log: slog.New(slog.DiscardHandler),
		Rules: unique.Validators{TaskType: streams.ValidateTaskType, ID: streams.ValidateID, MaxTypeLen: streamdefs.MaxTaskTypeLen}}
	b := newBuilder()
	build := func(id string) *nats.Msg {
		t.Helper()
		opts := []option{func(c *Config) error {
			c.ID, c.Unique = id, unique.Spec{Period: time.Minute, Key: "k", HasKey: true, UntilDone: true}
			return nil
		}}
		msg, _, err := BuildTask(b, "t.a", nil, opts, nil, streams.Layout{Partitions: 1, Ordered: 1})
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}

	first := build("first")
	holder, held, release, err := r.Reserve(t.Context(), first, "t.a", "first")
	if err != nil || held || release == nil {
		t.Fatalf("first Reserve = %q, %v, %v; want the reservation", holder, held, err)
	}
	if rev := first.Header.Get(unique.HeaderRevision); rev == "" || rev == "0" {
		t.Errorf("revision header %q, want the reservation's revision", rev)
	}
	holder, held, _, err = r.Reserve(t.Context(), build("second"), "t.a", "second")
	if err != nil || !held || holder != "first" {
		t.Fatalf("second Reserve = %q, %v, %v; want held by first", holder, held, err)
	}
	release()
	if _, held, _, err = r.Reserve(t.Context(), build("third"), "t.a", "third"); err != nil || held {
		t.Fatalf("Reserve after release = %v, %v; want the reservation", held, err)
	}

	nc.Close()
	_, _, _, err = r.Reserve(t.Context(), build("fourth"), "t.a", "fourth")
	if !errors.Is(err, natserr.ErrNotConnected) {
		t.Errorf("Reserve on a closed connection = %v, want %v", err, natserr.ErrNotConnected)
	}
}

// Without a bucket the reservation fails with unique.ErrBucket.
func TestReserverNoBucket(t *testing.T) {
	t.Parallel()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	nc.Close()
	r := &Reserver{Conn: nc, JS: js, Names: streams.MustNames(""), Log: slog.New(slog.DiscardHandler)}
	msg := &nats.Msg{Header: nats.Header{}}
	_, _, _, err := r.Reserve(t.Context(), msg, "t.a", "id-1")
	if !errors.Is(err, unique.ErrBucket) {
		t.Errorf("Reserve = %v, want %v", err, unique.ErrBucket)
	}
}
