// Package streamdefs holds the values and rules of jetflow's topology that
// package streams, which creates the topology, shares with the packages
// that run on it: the retry of topology requests, the limits of names and
// partitions, the KV buckets with their default retention, the movers'
// consumer and the limits of workflow events.
//
// Package streams imports it, so it imports nothing of streams: what needs
// streams.Names takes the few names it reads through an interface, which
// Names implements. Machinery that builds on Names lives in
// internal/topology instead. Neither is API: users read the defaults and
// limits that matter to them in package streams, framework and workflow
// documentation.
package streamdefs
