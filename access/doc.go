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
// # Accounts
//
// Subject permissions do not apply to the server's own replies: in a single
// account, a producer's permitted publish with its reply subject set to a
// schedule, KV or dead-letter subject makes the server store its answer
// there. [Config] renders the layout that prevents it: an account holding
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
