package main

import (
	"context"
	"os"
	"slices"
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
	type variant struct{ name, norun, core string; tracked bool }
	vs := []variant{{"off", "", "", false}, {"full-async", "", "", true}, {"norun-async", "1", "", true}, {"full-core", "", "1", true}, {"norun-core", "1", "1", true}}
	res := map[string][]float64{}
	for round := 0; round < 5; round++ {
		for _, v := range vs {
			os.Setenv("TMP_NORUN", v.norun)
			os.Setenv("TMP_CORE", v.core)
			r, err := e.drainStateJetflow(ctx, v.tracked)
			if err != nil {
				t.Fatal(err)
			}
			res[v.name] = append(res[v.name], r)
		}
	}
	for _, v := range vs {
		x := res[v.name]
		slices.Sort(x)
		t.Logf("%-12s median %.0f/s  all %.0f", v.name, x[len(x)/2], x)
	}
}
