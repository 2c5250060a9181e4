//go:build !race

package framework_test

// raceEnabled: the tests run under the race detector, whose
// instrumentation widens every stack frame.
const raceEnabled = false
