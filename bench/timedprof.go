package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync/atomic"
)

// Timed profiles: with BENCH_TIMED_PROFILE=prefix set, every timed section
// (startTimer … result) writes its own CPU profile, prefix.N.prof, so that
// a drain's profile leaves out the enqueue before it. The whole-run
// -cpuprofile cannot be combined with it.

var timedProfiles atomic.Int64

func startTimedProfile() *os.File {
	prefix := os.Getenv("BENCH_TIMED_PROFILE")
	if prefix == "" {
		return nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%d.prof", prefix, timedProfiles.Add(1)))
	if err != nil {
		return nil
	}
	if pprof.StartCPUProfile(f) != nil {
		f.Close()
		return nil
	}
	return f
}

func stopTimedProfile(f *os.File) {
	if f == nil {
		return
	}
	pprof.StopCPUProfile()
	f.Close()
}
