// Package testutil runs embedded NATS JetStream servers for tests and examples.
//
// # Servers
//
// [RunServer] starts one embedded server per call, with its store under
// t.TempDir and shutdown registered with t.Cleanup, so tests stay independent
// and parallel. [RestartServer] restarts a server on the same store to test
// recovery. [StartServer] and [ShutdownServer] are the same machinery for
// programs that are not tests, such as the quickstart.
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
