package testutil

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// Env is the shared set-up of the project's tests: one embedded server with
// the topology ensured, and a connection to it. Build one per test with
// [NewEnv]; give each worker its own connection ([Env.Connect]).
type Env struct {
	Server *Server
	// Conn and JS are a connection for the test's own use (clients,
	// inspection), closed at cleanup.
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Report is what [streams.Ensure] did.
	Report *streams.Report
}

// NewEnv starts an embedded server with opts, connects to it and ensures
// the topology of cfg (streams.Config{} for the defaults). Everything is
// shut down at cleanup.
func NewEnv(tb TB, cfg streams.Config, opts ...ServerOption) *Env {
	tb.Helper()
	srv := RunServer(tb, opts...)
	nc, js := JetStream(tb, srv)
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	rep, err := streams.Ensure(ctx, js, cfg)
	if err != nil {
		tb.Fatalf("ensure topology: %v", err)
	}
	return &Env{Server: srv, Conn: nc, JS: js, Report: rep}
}

// Connect returns a new connection to the environment's server, closed at
// cleanup.
func (e *Env) Connect(tb TB, opts ...nats.Option) *nats.Conn { return Connect(tb, e.Server, opts...) }

// Runner is what [StartWorker] runs: a framework.Worker (testutil does not
// import framework, whose own tests use it).
type Runner interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// StartWorker starts w and shuts it down at cleanup, waiting up to 10 s
// for its running tasks. The shutdown's error is returned through
// shutdownErr, when not nil, for tests that assert a clean stop.
func StartWorker(tb TB, w Runner, shutdownErr ...func(error)) {
	tb.Helper()
	if err := w.Start(tb.Context()); err != nil {
		tb.Fatalf("start worker: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := w.Shutdown(ctx)
		for _, f := range shutdownErr {
			f(err)
		}
	})
}
