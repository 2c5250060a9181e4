package testutil_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestRunSecuredAccounts checks what the accounts layout relies on, with
// the real server: a stream stores a producer's publish that crossed a
// service import, headers included; the producer gets the publish
// acknowledgement, on the reply subject it chose in its own account;
// Nats-Msg-Id still deduplicates; a tenant limited to its types cannot
// publish others'; and a producer has no JetStream API.
func TestRunSecuredAccounts(t *testing.T) {
	t.Parallel()
	s := testutil.RunSecured(t, testutil.SecuredConfig{Types: []string{"email.send"}, ProducerBTypes: []string{"tenant_b.>"}})
	names := streams.MustNames("")
	if u := s.User(testutil.SecuredProducer); u.Account != testutil.SecuredTenantA || u.InboxPrefix != "_INBOX_producer" || u.Password == "" {
		t.Fatalf("producer user: %+v", u)
	}
	violations := make(chan error, 8)
	pc := s.Connect(t, testutil.SecuredProducer, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))
	replies, err := pc.SubscribeSync("_INBOX_producer.chosen")
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: names.TaskSubject(streams.PriorityNormal, "email.send"), Reply: "_INBOX_producer.chosen", Data: []byte("hello"),
		Header: nats.Header{jetstream.MsgIDHeader: {"task-1"}, "Jetflow-Id": {"task-1"}, "X-Custom": {"kept"}}}
	for i := range 2 {
		if err := pc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		r, err := replies.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("acknowledgement %d: %v", i+1, err)
		}
		var ack struct {
			Stream    string `json:"stream"`
			Seq       uint64 `json:"seq"`
			Duplicate bool   `json:"duplicate"`
		}
		if err := json.Unmarshal(r.Data, &ack); err != nil || ack.Stream != names.TaskStream() || ack.Seq != 1 || ack.Duplicate != (i == 1) {
			t.Fatalf("acknowledgement %d: %s (%v)", i+1, r.Data, err)
		}
	}
	_, js := adminJS(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Header.Get("X-Custom") != "kept" || stored.Header.Get("Jetflow-Id") != "task-1" || string(stored.Data) != "hello" {
		t.Errorf("stored task: %v %q", stored.Header, stored.Data)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("task stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
	if len(violations) > 0 {
		t.Fatalf("producer refused: %v", <-violations)
	}

	// No JetStream API in a tenant's account.
	if _, err := pc.Request("$JS.API.INFO", nil, 5*time.Second); err == nil {
		t.Error("the producer reached the JetStream API")
	}
	// Tenant B imports only its types.
	bviol := make(chan error, 8)
	pb := s.Connect(t, testutil.SecuredProducerB, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		bviol <- err
	}))
	if err := pb.Publish(names.TaskSubject(streams.PriorityNormal, "email.send"), nil); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, bviol, 30*time.Second, "tenant B's publish of another type refused"); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("tenant B publishing another type: %v", err)
	}
	pbjs, err := jetstream.New(pb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pbjs.Publish(ctx, names.TaskSubject(streams.PriorityHigh, "tenant_b.job"), nil); err != nil {
		t.Errorf("tenant B publishing its own type: %v", err)
	}
}

// TestRunSecuredPartitions: on a deployment of three task partitions whose
// producers are granted two, a producer stores tasks in partition 1's
// stream through its account's import, and its publishes on partition 2's
// work and slot subjects are refused: nothing reaches that stream.
func TestRunSecuredPartitions(t *testing.T) {
	t.Parallel()
	s := testutil.RunSecured(t, testutil.SecuredConfig{Streams: streams.Config{Partitions: 3}, ProducerPartitions: 2})
	names := streams.MustNames("")
	violations := make(chan error, 8)
	pc := s.Connect(t, testutil.SecuredProducer, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))
	pjs, err := jetstream.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p1, p2 := names.Partition(1), names.Partition(2)
	if ack, err := pjs.Publish(ctx, p1.TaskSubject(streams.PriorityNormal, "email.send"), nil); err != nil || ack.Stream != p1.TaskStream() {
		t.Fatalf("publish on partition 1: %+v, %v", ack, err)
	}
	for _, subject := range []string{p2.TaskSubject(streams.PriorityNormal, "email.send"), p2.OrderedSubject("email.send", 0)} {
		if err := pc.Publish(subject, nil); err != nil {
			t.Fatal(err)
		}
		err := testutil.Recv(t, violations, 30*time.Second, "the publish on "+subject+" refused")
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Errorf("publish on %s: %v, want a permission violation", subject, err)
		}
	}
	_, js := adminJS(t, s)
	for _, part := range []streams.Names{p1, p2} {
		st, err := js.Stream(ctx, part.TaskStream())
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if part.PartitionIndex() == 1 {
			want = 1
		}
		if got := st.CachedInfo().State.Msgs; got != want {
			t.Errorf("%s holds %d tasks, want %d", part.TaskStream(), got, want)
		}
	}
}

// TestRunSecuredSingleAccount: every user in the jetflow account.
func TestRunSecuredSingleAccount(t *testing.T) {
	t.Parallel()
	s := testutil.RunSecured(t, testutil.SecuredConfig{SingleAccount: true})
	for _, role := range []string{testutil.SecuredAdmin, testutil.SecuredProducer, testutil.SecuredProducerB, testutil.SecuredWorker, testutil.SecuredOperator} {
		if a := s.User(role).Account; a != testutil.SecuredAccount {
			t.Errorf("%s in account %q", role, a)
		}
	}
	pc := s.Connect(t, testutil.SecuredProducer)
	r, err := pc.Request("$JS.API.STREAM.INFO."+streams.MustNames("").TaskStream(), nil, 30*time.Second)
	if err != nil || !bytes.Contains(r.Data, []byte(`"name":"JETFLOW_TASKS"`)) {
		t.Errorf("single-account producer's stream info: %v", err)
	}
}

func adminJS(t *testing.T, s *testutil.Secured) (*nats.Conn, jetstream.JetStream) {
	nc := s.Connect(t, testutil.SecuredAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
