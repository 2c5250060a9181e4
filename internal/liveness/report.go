package liveness

import (
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

// State is where a worker is in its life.
type State int32

// Worker states.
const (
	// New: built, not started.
	New State = iota
	// Running: started, not shutting down.
	Running
	// Stopping: shutting down or stopped, or its start failed.
	Stopping
)

// Report is what a worker knows of its own liveness, for health reports
// (package health).
type Report struct {
	State State
	// Started is when the worker started; zero before Start.
	Started time.Time
	// StallLimit is the worker's stall limit (framework.Timings.StallLimit).
	StallLimit time.Duration
	// Loops are the fetch loops of the registered (type, priority)
	// consumers, in registration order.
	Loops []FetchLoop
	// Starting lists what the worker's Start still waits for (consumers
	// being ensured), the longest waiting first; empty once started.
	Starting []StartWait
}

// FetchLoop is the state of the fetch loop of one (task type, priority)
// consumer.
type FetchLoop struct {
	Type     string
	Priority streams.Priority
	Consumer string
	// LastPoll is when the loop last heard from its pull (a task or an
	// empty wait); zero before the first.
	LastPoll time.Time
	// Busy is true while the loop waits for a free handler slot.
	Busy bool
}

// StartWait is a start-up step the worker's Start waits for.
type StartWait struct {
	// What names the step, for example "consumer JETFLOW_mail_send_normal".
	What string
	// Since is when the step began.
	Since time.Time
}

// Of returns the report of worker, a *framework.Worker; it is safe to call
// at any time from any goroutine. Package framework sets it when it is
// initialised, and package health (and tests) call it: the report is
// plumbing between the two, not part of the worker's public API, and this
// package cannot import framework.
var Of func(worker any) Report
