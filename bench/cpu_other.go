//go:build !unix

package main

import (
	"os"
	"time"
)

// processCPU is not measured on this platform: CPU figures read 0.
func processCPU() time.Duration { return 0 }

// peakRSS is not measured on this platform.
func peakRSS(*os.ProcessState) (int64, bool) { return 0, false }
