package workflow_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The restart tests (TestSleepSurvivesRestart,
		// TestWaitEventSurvivesRestart) restart the server on the same
		// store. The restarted task stream sets up its sourcing of the
		// schedule stream in a goroutine that waits for the answer with a
		// timer and no quit channel, so it outlives the server's shutdown
		// by up to that timeout. It is the server's goroutine, not ours
		// (see health/main_test.go); everything of jetflow's is still
		// checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	)
}
