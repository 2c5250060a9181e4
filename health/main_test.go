package health_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 20 * time.Second
