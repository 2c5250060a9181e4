package jsapi_test

import (
	"context"
	"errors"
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
		// Far below DefaultEnqueueTimeout's 30 s, far above a prompt
		// answer on a busy machine.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = jsapi.PublishWithin(ctx, js, "S", msg, quiet, time.Minute)
		cancel()
		if !errors.Is(err, jsapi.ErrLookupRefused) || natserr.Classify(err) != natserr.TopologyMissing {
			t.Errorf("%s, stream missing: %v; want ErrLookupRefused, classified as a missing topology", tc.name, err)
		}
	}
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
}
