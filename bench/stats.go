package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of ds,
// or 0 for none. ds is sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(p/100*float64(len(ds)) + 0.999999)
	rank = min(max(rank, 1), len(ds))
	return ds[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// kv is one key=value pair of a RESULT line.
type kv struct {
	key string
	val string
}

func fint(k string, v int) kv { return kv{k, strconv.Itoa(v)} }

func frate(k string, v float64) kv { return kv{k, strconv.FormatFloat(v, 'f', 0, 64)} }

func fratio(k string, v float64) kv { return kv{k, strconv.FormatFloat(v, 'f', 3, 64)} }

func fcpu(k string, v float64) kv { return kv{k, strconv.FormatFloat(v, 'f', 1, 64)} }

func fms(k string, v float64) kv { return kv{k, strconv.FormatFloat(v, 'f', 2, 64)} }

// printResult writes "RESULT <figure> k=v …" to w.
func printResult(w io.Writer, figure string, pairs ...kv) {
	var b strings.Builder
	b.WriteString("RESULT ")
	b.WriteString(figure)
	for _, p := range pairs {
		b.WriteByte(' ')
		b.WriteString(p.key)
		b.WriteByte('=')
		b.WriteString(p.val)
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(w, b.String())
}

// textKeys are the RESULT keys whose values are words, not numbers.
var textKeys = map[string]bool{"raw": true}

// parseResult splits a RESULT line into its figure and key=value pairs, with
// every value parsed as a number, except those of textKeys, which it checks
// are single words and leaves out. It is the inverse of [printResult].
func parseResult(line string) (string, map[string]float64, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 || fields[0] != "RESULT" {
		return "", nil, fmt.Errorf("not a RESULT line with values: %q", line)
	}
	vals := make(map[string]float64, len(fields)-2)
	for _, f := range fields[2:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return "", nil, fmt.Errorf("%q in %q is not key=value", f, line)
		}
		if textKeys[k] {
			if v == "" {
				return "", nil, fmt.Errorf("empty %s in %q", k, line)
			}
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return "", nil, fmt.Errorf("value of %s in %q: %w", k, line, err)
		}
		if _, dup := vals[k]; dup {
			return "", nil, fmt.Errorf("key %s twice in %q", k, line)
		}
		vals[k] = x
	}
	return fields[1], vals, nil
}

// usOf returns d in microseconds.
func usOf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
