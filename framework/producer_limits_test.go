package framework_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// producerConf has the two producer layouts of docs/security.md without the
// JetStream API: a producer user of jetflow's account who may publish tasks
// and delayed tasks but not ask STREAM.INFO, and a tenant in an account of
// its own (no JetStream) that imports only those publish subjects.
const producerConf = `
accounts {
  JETFLOW: {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      {user: producer, password: producer, permissions: {
        publish: ["jetflow.task.>", "jetflow.delay.>"]
        subscribe: ["_INBOX_producer.>"]
      }}
    ]
    exports: [ {service: "jetflow.task.>"}, {service: "jetflow.delay.>"} ]
  }
  TENANT: {
    users: [ {user: tenant, password: tenant} ]
    imports: [
      {service: {account: JETFLOW, subject: "jetflow.task.>"}}
      {service: {account: JETFLOW, subject: "jetflow.delay.>"}}
    ]
  }
}
`

// A producer without the JetStream API (no STREAM.INFO permission, or an
// account of its own) enqueues immediate and delayed tasks; where the
// topology is missing it cannot tell that from a stream without a leader,
// so it retries until its deadline and then fails with ErrTopologyMissing
// saying it could not ask, instead of blaming a leader election (issue 38,
// item 4).
func TestEnqueueWithoutStreamInfo(t *testing.T) {
	t.Parallel()
	srv := testutil.RunConfigServer(t, producerConf)
	quietErrors := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	producers := []struct {
		name string
		nc   *nats.Conn
	}{
		{"producer user", testutil.Connect(t, srv, nats.UserInfo("producer", "producer"), nats.CustomInboxPrefix("_INBOX_producer"), quietErrors)},
		{"tenant account", testutil.Connect(t, srv, nats.UserInfo("tenant", "tenant"), quietErrors)},
	}
	enqueue := func(p string, nc *nats.Conn, within time.Duration, opts ...framework.EnqueueOption) (framework.TaskInfo, error) {
		t.Helper()
		cl, err := framework.NewClient(nc, framework.WithStateTracking(false))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		return cl.Enqueue(ctx, "email.send", map[string]string{"to": p}, opts...)
	}
	kinds := []struct {
		name   string
		opts   []framework.EnqueueOption
		stream string
	}{{"immediate", nil, "JETFLOW_TASKS"}, {"delayed", []framework.EnqueueOption{framework.In(time.Hour)}, "JETFLOW_DELAYS"}}
	for _, p := range producers {
		for _, k := range kinds {
			_, err := enqueue(p.name, p.nc, 5*time.Second, k.opts...)
			if !errors.Is(err, framework.ErrTopologyMissing) || !strings.Contains(err.Error(), "cannot ask") {
				t.Errorf("%s, %s, no topology: %v; want ErrTopologyMissing saying it could not ask", p.name, k.name, err)
			}
		}
		// EnqueueMany settles a publish nobody took with the same
		// question.
		cl, err := framework.NewClient(p.nc, framework.WithStateTracking(false))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: "email.send", Payload: 1}})
		var batch *framework.BatchError
		if !errors.As(err, &batch) || !errors.Is(batch.Errors[0], framework.ErrTopologyMissing) {
			t.Errorf("%s, EnqueueMany, no topology: %v; want ErrTopologyMissing", p.name, err)
		}
		cancel()
	}
	admin := testutil.Connect(t, srv, nats.UserInfo("admin", "admin"))
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range producers {
		for _, k := range kinds {
			info, err := enqueue(p.name, p.nc, waitLong, k.opts...)
			if err != nil || info.Stream != k.stream || info.Duplicate {
				t.Errorf("%s, %s, topology present: %+v, %v; want stored in %s", p.name, k.name, info, err, k.stream)
			}
		}
	}
}

// A full task stream refuses the next task: Enqueue and EnqueueMany fail
// at once with ErrQueueFull, which wraps the stream's own error, and every
// waiting task stays (issue 38, item 4; decision 040).
func TestEnqueueToFullTaskStream(t *testing.T) {
	t.Parallel()
	te := testutil.NewEnv(t, streams.Config{MaxTaskBytes: 8192})
	cl, err := framework.NewClient(te.Conn, framework.WithStateTracking(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	stored := 0
	for ; stored < 1000; stored++ {
		if _, err = cl.Enqueue(ctx, "waiting.task", map[string]int{"n": stored}); err != nil {
			break
		}
	}
	var apiErr *jetstream.APIError
	if !errors.Is(err, framework.ErrQueueFull) || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 || ctx.Err() != nil {
		t.Fatalf("after %d tasks: %v; want ErrQueueFull wrapping the stream's error, at once", stored, err)
	}
	infos, err := cl.EnqueueMany(ctx, []framework.TaskSpec{{Type: "flood.task", Payload: 1}, {Type: "flood.task", Payload: 2}})
	var batch *framework.BatchError
	if !errors.As(err, &batch) || len(batch.Errors) != 2 || !errors.Is(batch.Errors[0], framework.ErrQueueFull) ||
		!errors.Is(batch.Errors[1], framework.ErrQueueFull) || ctx.Err() != nil {
		t.Fatalf("EnqueueMany on a full stream: %v, %v; want ErrQueueFull for both, at once", infos, err)
	}
	s, err := te.JS.Stream(ctx, streams.MustNames("").TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if msgs := s.CachedInfo().State.Msgs; msgs != uint64(stored) || s.CachedInfo().State.FirstSeq != 1 {
		t.Fatalf("task stream holds %d tasks from sequence %d, want the %d waiting ones from 1", msgs, s.CachedInfo().State.FirstSeq, stored)
	}
}
