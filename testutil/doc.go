// Package testutil runs embedded NATS JetStream servers for tests and examples.
//
// # Servers
//
// [RunServer] starts one embedded server per call, with its store under
// t.TempDir and shutdown registered with t.Cleanup, so tests stay independent
// and parallel. [RestartServer] restarts a server on the same store to test
// recovery. [StartServer] and [ShutdownServer] are the same machinery for
// programs that are not tests, such as the quickstart; [StartEmbedded] adds a
// temporary store, a connection and the jetflow topology in one call, as the
// examples use it.
//
// # Clusters
//
// [RunCluster] starts an embedded JetStream cluster (three nodes for R3
// streams) on loopback, each node with its own store. [Cluster.StopNode] and
// [Cluster.RestartNode] take a node down and bring it back on the same store
// and ports; [Cluster.StreamLeader], [Cluster.ConsumerLeader] and
// [Cluster.StepDownStream] find and move leaders; [Cluster.WaitJetStreamReady]
// and [Cluster.WaitStreamCurrent] wait for the cluster to settle.
// [Cluster.Connect] returns connections that know every node and fail over.
// [StartCluster] is the same for programs such as benchmarks.
//
// # The secured deployment
//
// [RunSecured] starts a server configured as docs/security.md documents:
// the jetflow account with JetStream and the admin, worker and operator
// users, and two tenant accounts whose producers reach the task intake
// through service imports only ([github.com/jetflow-io/jetflow/access]).
// [Secured.Connect] connects as a role; SecuredConfig.SingleAccount gives
// the single-account layout, for tests of what it does not stop.
//
// # Network faults
//
// [NewProxy] puts a TCP proxy between a client and a server listening on
// loopback ([WithListen]); [Proxy.Cut] drops the client's connection and
// refuses new ones until [Proxy.Restore], to test what happens when a worker
// loses the network and comes back. [Proxy.Mute] loses only what the server
// sends (replies, acknowledgements) while the client's messages still reach
// it, until the next Cut.
//
// # Connections and waiting
//
// [Connect] and [JetStream] open connections that are closed with the test.
// [Wait] and [Recv] wait for a condition or a value with a deadline, so tests
// never sleep to synchronise.
//
// The package is meant for jetflow's own tests and for users' tests of code
// built on jetflow. Production code should not import it.
package testutil
