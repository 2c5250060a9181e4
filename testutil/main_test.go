package testutil_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Cluster tests stop and restart nodes while streams are being
		// placed. A file store opened on a node during its shutdown is never
		// closed by nats-server, which leaves its flush loop and the shared
		// access-time ticker running. Those are the server's goroutines, not
		// ours; everything of jetflow's is still checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}
