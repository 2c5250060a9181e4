package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// deployment is the documented server (testutil.RunSecured: accounts for
// the tenants' producers) with the admin's JetStream context, for the
// tests' own reads.
type deployment struct {
	*testutil.Secured
	names streams.Names
	admin jetstream.JetStream
}

// singleAccount reports whether the attack tests run against the
// single-account layout instead of the documented one: set
// JETFLOW_SECURITY_LAYOUT=single to see which attacks that layout does not
// stop (the tests of reply-subject injection fail there).
func singleAccount() bool { return os.Getenv("JETFLOW_SECURITY_LAYOUT") == "single" }

// deploy starts the documented deployment of cfg and runs the deploy
// step's framework.EnsureBuckets as the admin.
func deploy(t *testing.T, cfg testutil.SecuredConfig) *deployment {
	t.Helper()
	if singleAccount() {
		cfg.SingleAccount = true
	}
	s := testutil.RunSecured(t, cfg)
	js, err := jetstream.New(s.Connect(t, testutil.SecuredAdmin))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := framework.EnsureBuckets(ctx, js); err != nil {
		t.Fatalf("admin: ensure buckets: %v", err)
	}
	names, err := streams.NewNames(cfg.Streams.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &deployment{Secured: s, names: names, admin: js}
}

// connect opens a connection as role that collects the permission
// violations the server reports on it.
func (d *deployment) connect(t *testing.T, role string) *conn {
	t.Helper()
	c := &conn{violations: make(chan error, 64)}
	c.Conn = d.Connect(t, role, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case c.violations <- err:
			default:
			}
		}
	}))
	var err error
	if c.js, err = jetstream.New(c.Conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if v := violations(c); len(v) > 0 {
				t.Logf("%s's permission violations: %v", role, v)
			}
		}
	})
	return c
}

// worker starts a worker as the worker user with opts and the handlers reg
// registers; it is shut down when the test ends.
func (d *deployment) worker(t *testing.T, reg func(w *framework.Worker), opts ...framework.WorkerOption) *conn {
	t.Helper()
	c := d.connect(t, testutil.SecuredWorker)
	w, err := framework.NewWorker(c.Conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg(w)
	testutil.StartWorker(t, w)
	return c
}

// client returns a client of role, without state tracking (producers may
// not write the state bucket).
func (d *deployment) client(t *testing.T, role string) (*framework.Client, *conn) {
	t.Helper()
	c := d.connect(t, role)
	cl, err := framework.NewClient(c.Conn, framework.WithStateTracking(false), framework.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	return cl, c
}

// stored returns the messages of stream whose subject matches filter, in
// order, read as the admin.
func (d *deployment) stored(t *testing.T, stream, filter string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := d.admin.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatalf("read %s from %s: %v", filter, stream, err)
		}
		out = append(out, m)
		seq = m.Sequence
	}
}

// violations drains the permission violations reported on c so far.
func violations(c *conn) []string {
	var out []string
	for {
		select {
		case err := <-c.violations:
			out = append(out, err.Error())
		default:
			return out
		}
	}
}
