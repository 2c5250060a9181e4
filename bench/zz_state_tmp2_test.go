package main

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
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
	mem := os.Getenv("TMP_MEM") != ""
	if mem {
		_ = e.js.DeleteKeyValue(ctx, "JETFLOW_STATE")
		if _, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETFLOW_STATE", History: 1, TTL: 7 * 24 * 3600e9, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.runDrainStateSetup(ctx); err != nil {
		t.Fatal(err)
	}
	type variant struct{ name, norun, nopend string; tracked bool }
	vs := []variant{{"off", "", "", false}, {"full", "", "", true}, {"norun", "1", "", true}}
	res := map[string][]float64{}
	for round := 0; round < 5; round++ {
		for _, v := range vs {
			os.Setenv("TMP_NORUN", v.norun)
			os.Setenv("TMP_NOPEND", v.nopend)
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
		t.Logf("mem=%v %-12s median %.0f/s  all %.0f", mem, v.name, x[len(x)/2], x)
	}
}
