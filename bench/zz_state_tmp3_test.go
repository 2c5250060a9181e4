package main

import (
	"context"
	"os"
	"testing"
)

func TestTmpProfileTracked(t *testing.T) {
	cfg := defaultConfig()
	cfg.n = 20000
	ctx := context.Background()
	e, err := newEnv(ctx, cfg, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	for i := 0; i < 4; i++ {
		r, err := e.drainStateJetflow(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%.0f/s", r)
	}
}
