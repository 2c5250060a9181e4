package jsapi_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/testutil"
)

// lookupConf has an admin, a user of the same account who may publish on
// s.> but not ask the JetStream API, and a user of another account without
// JetStream that imports s.> as a service.
const lookupConf = `
accounts {
  JS: {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      {user: limited, password: limited, permissions: {publish: ["s.>"], subscribe: ["_INBOX.>"]}}
    ]
    exports: [ {service: "s.>"} ]
  }
  OTHER: {
    users: [ {user: other, password: other} ]
    imports: [ {service: {account: JS, subject: "s.>"}} ]
  }
}
`

// lookupServer starts the server of lookupConf and returns a connection per
// user.
func lookupServer(t *testing.T) (srv *testutil.Server, admin, limited, other *nats.Conn) {
	t.Helper()
	srv = testutil.RunConfigServer(t, lookupConf)
	quietErrors := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	admin = testutil.Connect(t, srv, nats.UserInfo("admin", "admin"))
	limited = testutil.Connect(t, srv, nats.UserInfo("limited", "limited"), quietErrors)
	other = testutil.Connect(t, srv, nats.UserInfo("other", "other"), quietErrors)
	return srv, admin, limited, other
}

// A lookup the connection may not make is reported as ErrLookupRefused at
// once, not after the context's deadline: a refused request (permissions),
// twice in a row (the second violation is told from the first), and an
// account without JetStream. A connection that may ask gets the answer.
func TestStreamExists(t *testing.T) {
	t.Parallel()
	_, admin, limited, other := lookupServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		nc     *nats.Conn
		stream string
		exists bool
		refuse bool
	}{
		{"admin, existing", admin, "S", true, false},
		{"admin, missing", admin, "MISSING", false, false},
		{"no permission", limited, "S", false, true},
		{"no permission again", limited, "S", false, true},
		{"no permission, missing", limited, "MISSING", false, true},
		{"account without JetStream", other, "S", false, true},
	} {
		exists, err := jsapi.StreamExists(ctx, tc.nc, tc.stream)
		if tc.refuse {
			if !errors.Is(err, jsapi.ErrLookupRefused) {
				t.Errorf("%s: StreamExists = %v, %v; want ErrLookupRefused", tc.name, exists, err)
			}
			continue
		}
		if err != nil || exists != tc.exists {
			t.Errorf("%s: StreamExists = %v, %v; want %v", tc.name, exists, err, tc.exists)
		}
	}
}

// A publish that reaches no stream from a connection that cannot ask
// whether the stream exists fails at once, as a missing topology that says
// it may also be a stream without a leader, instead of being retried until
// the context ends; where the stream exists, the publish is stored.
func TestPublishWithoutStreamLookup(t *testing.T) {
	t.Parallel()
	_, admin, limited, other := lookupServer(t)
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
	}{{"no permission", limited}, {"account without JetStream", other}} {
		js, err := jetstream.New(tc.nc)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: "s.a", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-" + tc.name}}}
		// It cannot tell a missing stream from one without a leader, so
		// it retries until its deadline, then says it could not ask.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = jsapi.PublishWithin(ctx, js, "S", msg, quiet, time.Minute)
		cancel()
		if !errors.Is(err, jsapi.ErrLookupRefused) || natserr.Classify(err) != natserr.TopologyMissing {
			t.Errorf("%s, stream missing: %v; want ErrLookupRefused, classified as a missing topology", tc.name, err)
		}
	}
	// A stream that appears while it retries (as one whose leader is
	// elected) takes the message: the refused question does not end the
	// retries.
	retrying := make(chan struct{}, 1)
	log := slog.New(retryLog{retrying})
	ljs, err := jetstream.New(limited)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		msg := &nats.Msg{Subject: "s.a", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-late"}}}
		_, err := jsapi.PublishWithin(t.Context(), ljs, "S", msg, log, time.Minute)
		done <- err
	}()
	testutil.Recv(t, retrying, 20*time.Second, "a retry of the publish")
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
	}{{"no permission", limited}, {"account without JetStream", other}} {
		js, err := jetstream.New(tc.nc)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: "s.a", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-" + tc.name}}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ack, err := jsapi.PublishWithin(ctx, js, "S", msg, quiet, time.Minute)
		cancel()
		if err != nil || ack.Stream != "S" || ack.Duplicate {
			t.Errorf("%s, stream present: %+v, %v; want stored", tc.name, ack, err)
		}
	}
	if err := testutil.Recv(t, done, 30*time.Second, "the retried publish"); err != nil {
		t.Errorf("publish retried while the stream was missing: %v; want it stored once the stream exists", err)
	}
}

// retryLog signals each "retrying" debug line of a publish.
type retryLog struct{ retrying chan struct{} }

func (retryLog) Enabled(context.Context, slog.Level) bool { return true }

func (h retryLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "retrying") {
		select {
		case h.retrying <- struct{}{}:
		default:
		}
	}
	return nil
}

func (h retryLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h retryLog) WithGroup(string) slog.Handler      { return h }
