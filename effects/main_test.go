package effects_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 20 * time.Second

// env is one embedded server with the topology ensured and a client
// (internal/testenv).
type env struct{ *testenv.Env }

func newEnv(t *testing.T) *env { t.Helper(); return &env{testenv.New(t)} }

// startWorker starts w and shuts it down at cleanup.
func startWorker(t *testing.T, w *framework.Worker) { t.Helper(); testutil.StartWorker(t, w) }
