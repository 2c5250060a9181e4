package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
)

// rss returns the resident set size of the process in bytes: VmRSS from
// /proc/self/status where it exists (Linux), else the memory the Go runtime
// obtained from the system (an upper bound of the Go part of the RSS).
func rss() uint64 {
	if n := procRSS("/proc/self/status"); n > 0 {
		return n
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Sys
}

// procRSS returns VmRSS of a /proc/<pid>/status file in bytes, 0 when it
// cannot be read.
func procRSS(status string) uint64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "123456 kB"
		if len(f) == 2 && string(f[1]) == "kB" {
			if kb, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
