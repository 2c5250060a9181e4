package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the example end to end: it fails when a run ends differently
// than planned or the money and stock do not add up.
func TestRun(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run(t.Context(), []string{"-timeout", "30s"}, &out, &errs); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errs.String())
	}
	for _, want := range []string{
		"order-1  completed",
		"order-2  completed reserve=done(1) charge=done(2)",
		"order-3  failed    reserve=compensated(1) charge=compensated(1) ship=failed(1)",
		"charge↺   refunded $310.00",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestURL runs the example twice against one existing server: the second
// run starts new runs instead of finding the first's.
func TestURL(t *testing.T) {
	srv := testutil.RunServer(t, testutil.WithListen())
	for range 2 {
		var out, errs bytes.Buffer
		if err := run(t.Context(), []string{"-timeout", "30s", "-url", srv.ClientURL()}, &out, &errs); err != nil {
			t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errs.String())
		}
		if !strings.Contains(out.String(), "go run ./cmd/jetflow -s "+srv.ClientURL()+" workflows ls") {
			t.Errorf("no inspection hint:\n%s", out.String())
		}
	}
}
