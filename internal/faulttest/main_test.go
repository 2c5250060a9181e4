package faulttest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The fault tests stop and restart servers. A restarted task stream
		// sets up its sourcing of the schedule stream in a goroutine that
		// waits for the answer with a timer and no quit channel, so it
		// outlives the server's shutdown by up to that timeout (seen once
		// in CI). It is the server's goroutine, not ours (package health
		// ignores it for the same reason); everything of jetflow's is
		// still checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	)
}
