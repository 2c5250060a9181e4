package main

import (
	"context"
	"os"
	"testing"
)

func TestTmpRunDrainState2(t *testing.T) {
	cfg := defaultConfig()
	cfg.n = 20000
	cfg.runs = 5
	ctx := context.Background()
	e, err := newEnv(ctx, cfg, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if err := e.runDrainState(ctx, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
