//go:build unix

package main

import (
	"os"
	"runtime"
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used so
// far, server included since it is embedded.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS returns the peak resident set size of an ended child process, in
// bytes.
func peakRSS(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, false
	}
	if runtime.GOOS == "darwin" {
		return ru.Maxrss, true // bytes there
	}
	return ru.Maxrss << 10, true // KiB on Linux and the BSDs
}
