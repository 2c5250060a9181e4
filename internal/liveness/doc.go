// Package liveness owns what tells a running worker from one that only
// looks alive: the record of each fetch loop's last poll of the server
// ([Loops], [Loop]), the stall detection built on it ([Loops.Stalled],
// [Loops.Watch]: a loop that hears nothing from the server for the stall
// limit while it does not wait for a free slot), waiting for the
// connection to close for good ([WaitClosed]), the [Watcher] that tells a
// running worker to stop on either (logging why, with the error its Run
// returns), and start-up steps that wait for an unreachable server instead
// of failing at once ([StartStep]).
//
// Fetch loops write their records; the worker's stall watchdog and the
// health report (package health, through [Of], which package framework
// sets: a worker's [Report]) read them. The package knows nothing of
// workers: it gets a consumer's name, the stall limit and the connection
// from its caller.
package liveness
