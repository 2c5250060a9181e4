// Package access renders the NATS permissions of jetflow's roles and the
// nats-server accounts configuration of its documented secure deployment
// (docs/security.md), from the names of a topology ([streams.Names]).
//
// # Roles
//
// [Admin] (the deployment step), [Producer], [Worker] and [Operator]
// return a role's allow lists ([Permissions]) for the options it runs with
// ([Options]: a worker's task types, circuit-breaker dependencies and
// [Feature]s; a producer's task types). Each user also gets its own inbox
// prefix, the only subject it may subscribe to, so that no user reads
// another's replies.
//
// # Task partitions
//
// A deployment of several task partitions (streams.Config.Partitions)
// gives its count to every role ([Options].Partitions) and to the layout
// ([Accounts].Partitions): producers publish on every partition's intake
// subjects ([PartitionedIntake]), workers get their grants on the task
// stream in each partition's stream, operators read them all. Nothing is
// granted on a partition beyond the count.
//
// # Accounts
//
// Subject permissions do not apply to the server's own replies: in a single
// account, a producer's permitted publish with its reply subject set to a
// schedule, KV or dead-letter subject makes the server store its answer
// there. [Accounts] (and [Config], its shorthand for one task partition)
// renders the layout that prevents it: an account holding
// JetStream with the admin, workers and operators, exporting the intake
// subjects ([Intake]) as services, and one account per tenant of producers
// importing them. Across a service import the server rewrites the reply
// subject into a reply subject of its own, so its answer returns into the
// producer's account, where no stream is.
//
// The package imports only package streams: it describes what jetflow's
// code needs, it does not run it. Its functions are pure and safe for
// concurrent use.
package access
