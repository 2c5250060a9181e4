// Command soakplot draws the time series of the bench's soak
// (go -C bench run . -soak DURATION) as two PNG images:
//
//   - latency.png: p99 enqueue → handler start per priority and the p50 of
//     all priorities, per sample interval, on a logarithmic scale;
//   - memory.png: the process's RSS, Go heap in use and (when the CSV has it)
//     the heap live after the last GC, and below them the goroutine count.
//
// Dashed vertical lines mark the dependency outage and the end of the load.
// It reads only the CSV the soak writes, so it is a module of its own: the
// plotting library stays out of jetflow's go.mod.
//
// Usage (from bench/soakplot):
//
//	go run . -csv <the bench's -soak-dir>/soak.csv -out ../../docs/soak/embedded
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func main() {
	in := flag.String("csv", "", "the soak's CSV (soak.csv under the bench's -soak-dir)")
	out := flag.String("out", ".", "directory for latency.png and memory.png")
	flag.Parse()
	if *in == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "soakplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := readSeries(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := drawLatency(s, filepath.Join(out, "latency.png")); err != nil {
		return err
	}
	return drawMemory(s, filepath.Join(out, "memory.png"))
}

// series is the CSV by column name; an empty cell is NaN.
type series struct {
	cols map[string][]float64
	rows int
}

// required are the columns the plots read.
var required = []string{"elapsed_s", "load", "outage", "critical_p99_ms", "high_p99_ms", "normal_p99_ms",
	"low_p99_ms", "all_p99_ms", "rss_mb", "heap_mb", "goroutines"}

func readSeries(r io.Reader) (*series, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) < 2 {
		return nil, errors.New("no samples")
	}
	s := &series{cols: make(map[string][]float64), rows: len(recs) - 1}
	for j, name := range recs[0] {
		col := make([]float64, s.rows)
		for i, rec := range recs[1:] {
			if rec[j] == "" {
				col[i] = math.NaN()
				continue
			}
			v, err := strconv.ParseFloat(rec[j], 64)
			if err != nil {
				return nil, fmt.Errorf("row %d, %s: %w", i+2, name, err)
			}
			col[i] = v
		}
		s.cols[name] = col
	}
	for _, name := range required {
		if _, ok := s.cols[name]; !ok {
			return nil, fmt.Errorf("no column %s", name)
		}
	}
	return s, nil
}

// xy returns the points (elapsed_s, col) of the rows where col is a number
// (and positive, for a logarithmic axis).
func (s *series) xy(col string, positive bool) plotter.XYs {
	var pts plotter.XYs
	x, y := s.cols["elapsed_s"], s.cols[col]
	for i := range s.rows {
		if math.IsNaN(y[i]) || (positive && y[i] <= 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: x[i], Y: y[i]})
	}
	return pts
}

// marks returns the times of the outage's start and end and of the end of
// the load: the first and last samples taken during the outage, and the
// last load sample.
func (s *series) marks() []float64 {
	var out []float64
	x, outage, load := s.cols["elapsed_s"], s.cols["outage"], s.cols["load"]
	first, last, end := -1, -1, -1
	for i := range s.rows {
		if outage[i] == 1 {
			if first < 0 {
				first = i
			}
			last = i
		}
		if load[i] == 1 {
			end = i
		}
	}
	for _, i := range []int{first, last, end} {
		if i >= 0 {
			out = append(out, x[i])
		}
	}
	return out
}

var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // critical
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // high
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // normal
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // low
	color.Gray{Y: 0x40},
}

func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, dashed bool, label string) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// addMarks draws dashed vertical lines at xs across [lo, hi].
func addMarks(p *plot.Plot, xs []float64, lo, hi float64) error {
	for _, x := range xs {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 0xa0}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
	}
	return nil
}

func yRange(sets ...plotter.XYs) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, pts := range sets {
		for _, pt := range pts {
			lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
		}
	}
	if lo > hi {
		return 0, 1
	}
	return lo, hi
}

func drawLatency(s *series, path string) error {
	p := plot.New()
	p.Title.Text = "Soak: enqueue → handler start (dotted: outage, end of load)"
	p.X.Label.Text = "time (s)"
	p.X.Min = 0
	p.X.Tick.Marker = niceTicks{}
	p.Y.Label.Text = "latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var sets []plotter.XYs
	for i, prio := range []string{"critical", "high", "normal", "low"} {
		pts := s.xy(prio+"_p99_ms", true)
		sets = append(sets, pts)
		if err := addLine(p, pts, palette[i], false, prio+" p99"); err != nil {
			return err
		}
	}
	if _, ok := s.cols["all_p50_ms"]; ok {
		pts := s.xy("all_p50_ms", true)
		sets = append(sets, pts)
		if err := addLine(p, pts, palette[4], true, "all p50"); err != nil {
			return err
		}
	}
	lo, hi := yRange(sets...)
	if err := addMarks(p, s.marks(), lo, hi); err != nil {
		return err
	}
	// Headroom for the legend: a decade above the highest point.
	p.Y.Min, p.Y.Max = lo/2, hi*10
	return p.Save(20*vg.Centimeter, 11*vg.Centimeter, path)
}

func drawMemory(s *series, path string) error {
	mem := plot.New()
	mem.Title.Text = "Soak: memory and goroutines (dotted: outage, end of load)"
	mem.Y.Label.Text = "MB"
	mem.X.Min = 0
	mem.X.Tick.Marker = niceTicks{}
	mem.Y.Tick.Marker = niceTicks{}
	mem.Legend.Top = true
	mem.Legend.Left = true
	mem.Add(plotter.NewGrid())
	rssPts, heapPts := s.xy("rss_mb", false), s.xy("heap_mb", false)
	if err := addLine(mem, rssPts, palette[2], false, "RSS"); err != nil {
		return err
	}
	if err := addLine(mem, heapPts, palette[1], false, "Go heap in use"); err != nil {
		return err
	}
	if _, ok := s.cols["live_mb"]; ok {
		if err := addLine(mem, s.xy("live_mb", false), palette[3], true, "Go heap live after GC"); err != nil {
			return err
		}
	}
	mem.Y.Min = 0
	_, hi := yRange(rssPts, heapPts)
	mem.Y.Max = hi * 1.3 // headroom for the legend
	if err := addMarks(mem, s.marks(), 0, hi); err != nil {
		return err
	}

	gor := plot.New()
	gor.X.Label.Text = "time (s)"
	gor.Y.Label.Text = "goroutines"
	gor.Y.Tick.Marker = niceTicks{}
	gor.Add(plotter.NewGrid())
	gPts := s.xy("goroutines", false)
	if err := addLine(gor, gPts, palette[4], false, "goroutines"); err != nil {
		return err
	}
	gor.Legend = plot.NewLegend() // one series: no legend
	gor.Y.Min = 0
	_, ghi := yRange(gPts)
	if err := addMarks(gor, s.marks(), 0, ghi); err != nil {
		return err
	}
	// Same time axis on both.
	gor.X.Min, gor.X.Max = mem.X.Min, mem.X.Max
	gor.X.Tick.Marker = niceTicks{}

	const w, h = 20 * vg.Centimeter, 14 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cs := plot.Align([][]*plot.Plot{{mem}, {gor}}, tiles, dc)
	mem.Draw(cs[0][0])
	gor.Draw(cs[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceTicks labels an axis at steps of 1, 2 or 5 times a power of ten,
// about six of them, without decimals unless the step needs them.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	raw := (hi - lo) / 6
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * pow
	}
	prec := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		// Four unlabelled minor ticks between labels.
		for k := 1; k < 5; k++ {
			if m := v + float64(k)*step/5; m <= hi {
				ticks = append(ticks, plot.Tick{Value: m})
			}
		}
	}
	return ticks
}
