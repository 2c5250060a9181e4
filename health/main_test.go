package health_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// TestWorkerHealth restarts the server on the same store. The
		// restarted task stream sets up its sourcing of the schedule stream
		// in a goroutine that waits for the answer with a timer and no quit
		// channel, so it outlives the server's shutdown by up to that
		// timeout. It is the server's goroutine, not ours; everything of
		// jetflow's is still checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	)
}

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 20 * time.Second
