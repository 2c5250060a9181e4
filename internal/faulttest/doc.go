// Package faulttest holds jetflow's fault-injection tests: a stream leader
// stopped in a three-node cluster while tasks are enqueued and processed, a
// server restarted with tasks waiting, running and delayed, a worker process
// killed with SIGKILL mid-task, and a worker's network cut during a long
// task; for ordered tasks, a worker process killed while it holds a key's
// head task, and a server restart in the middle of ordered processing. It has no API; everything is in its _test files.
//
// The tests are sized for CI (a few thousand tasks, well under two minutes
// with -race). Set JETFLOW_HEAVY=1 for the heavier variants (ten thousand
// tasks, several failovers in a row). Run them with -v to see the figures
// they measure: tasks enqueued, succeeded, lost, duplicate executions and
// time to recover.
package faulttest
