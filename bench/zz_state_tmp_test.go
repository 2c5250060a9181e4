package main

import (
	"context"
	"os"
	"strconv"
	"testing"
)

func TestTmpRunDrainState(t *testing.T) {
	cfg := defaultConfig()
	if v := os.Getenv("STATE_N"); v != "" {
		cfg.n, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("STATE_RUNS"); v != "" {
		cfg.runs, _ = strconv.Atoi(v)
	}
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
