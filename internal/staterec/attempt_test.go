package staterec

import (
	"testing"
	"time"
)

// A final record cancels a "running" record still waiting for its delay.
func TestAttemptFinishedCancelsPendingRunning(t *testing.T) {
	var a Attempt
	a.Started(time.Hour, func() { t.Error("running record written after the final one") })
	a.Finished()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.final || a.timer != nil {
		t.Fatalf("after Finished: final=%v timer=%v, want the timer stopped", a.final, a.timer)
	}
}

// A final record waits for a "running" record being written, so that it
// lands second.
func TestAttemptFinishedWaitsForRunning(t *testing.T) {
	var a Attempt
	writing, release, wrote := make(chan struct{}), make(chan struct{}), make(chan struct{})
	a.Started(time.Nanosecond, func() {
		close(writing)
		<-release
		close(wrote)
	})
	<-writing
	finished := make(chan struct{})
	go func() {
		a.Finished()
		close(finished)
	}()
	close(release)
	<-finished
	select {
	case <-wrote:
	default:
		t.Fatal("Finished returned before the running record was written")
	}
}

func TestAttemptFinishedOnNil(t *testing.T) {
	var a *Attempt
	a.Finished() // a task that never started tracking
}
