package main

import (
	"context"
	"os"
	"testing"
)

func TestTmpTrackedOnly(t *testing.T) {
	cfg := defaultConfig()
	cfg.n = 20000
	ctx := context.Background()
	e, err := newEnv(ctx, cfg, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if err := e.runDrainStateSetup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []bool{true, false, true} {
		r, err := e.drainStateJetflow(ctx, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tracked=%v %.0f/s", tr, r)
	}
}
