package main

import (
	"context"
	"os"
	"testing"
)

func TestTmpRunDLQ(t *testing.T) {
	cfg := defaultConfig()
	ctx := context.Background()
	e, err := newEnv(ctx, cfg, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if err := e.runDLQ(ctx, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
