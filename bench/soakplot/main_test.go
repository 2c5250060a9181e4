package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun draws the images of a short soak's CSV and checks that they are
// PNGs of the expected size.
func TestRun(t *testing.T) {
	out := t.TempDir()
	if err := run(filepath.Join("testdata", "soak.csv"), out); err != nil {
		t.Fatal(err)
	}
	for name, height := range map[string]float64{"latency.png": 11, "memory.png": 14} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// 20 cm wide at vgimg's default 96 dpi: 756 px.
		width := 20.0
		wantW, wantH := int(width/2.54*96+0.5), int(height/2.54*96+0.5)
		if abs(cfg.Width-wantW) > 1 || abs(cfg.Height-wantH) > 1 {
			t.Errorf("%s is %dx%d, want about %dx%d", name, cfg.Width, cfg.Height, wantW, wantH)
		}
	}
}

func abs(x int) int { return max(x, -x) }

func TestReadSeries(t *testing.T) {
	tests := []struct {
		name, csv, err string
	}{
		{"no samples", "elapsed_s,load\n", "no samples"},
		{"missing column", "elapsed_s,load\n1,1\n", "no column outage"},
		{"not a number", strings.Join(required, ",") + "\n" + strings.Repeat("x,", len(required)-1) + "x\n", "invalid syntax"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readSeries(strings.NewReader(tc.csv))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
	s, err := readSeries(strings.NewReader(strings.Join(required, ",") + "\n" + "10,1,0,,2,3,4,5,100,50,600\n20,1,1,1,2,3,4,5,100,50,600\n30,0,0,1,2,3,4,5,100,50,600\n"))
	if err != nil {
		t.Fatal(err)
	}
	if pts := s.xy("critical_p99_ms", true); len(pts) != 2 || pts[0].X != 20 {
		t.Errorf("empty cell not skipped: %v", pts)
	}
	if m := s.marks(); len(m) != 3 || m[0] != 20 || m[1] != 20 || m[2] != 20 {
		t.Errorf("marks = %v, want outage 20–20 and load end 20", m)
	}
}
