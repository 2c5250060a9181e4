// Package fairness gives the keys of a task type fair shares of its
// workers: tasks of a key (a tenant, an account, framework.WithKey) that
// has a large backlog no longer hold up the tasks of the other keys. Within
// a task type and priority, workers take the keys that have tasks waiting
// in turn (round-robin, optionally weighted per key), so a key with a
// large backlog gets its share and no more while others wait. Priorities
// still come first.
//
//	// Worker: Install before Start, Shares on each fair type.
//	fairness.Install(w)
//	framework.Handle(w, "report.build", build, fairness.Shares(fairness.Options{}))
//
//	// Producer: the task waits for its key's turn.
//	_, err := fairness.Enqueue(ctx, client, "report.build", req, req.Tenant)
//
// # How it works
//
// [Enqueue] builds the message framework.Client.Enqueue would publish and
// stores it on the key's subject of the fair stream
// ([github.com/jetflow-io/jetflow/streams.Names.FairSubject]:
// "<prefix>.fair.<type>.<priority>.<key in base64url>"). Each worker with
// [Install] runs a mover for the types it handles with [Shares]. Its depth
// is adaptive in time: the rate at which the worker finishes the type's
// tasks times [Options].Wait, at least [Options].Depth and at most
// [DepthCap]. While fewer than half its depth of the type's tasks wait in
// the task stream (read from its consumers' info, not per task), it lists the keys
// with staged tasks (critical first), plans a round of turns over them
// that fills the depth again, reads each key's first staged tasks (a
// direct get by subject: first in, first out), publishes them to the work
// subject with the task ID as deduplication ID, and then deletes from the
// key what it moved, by sequence. It is woken by staged tasks (a
// subscription on the fair subjects of its types), by its worker's
// finished tasks, and every 100 ms.
//
// Several workers move at once, with no leader: a task two movers move is
// stored once (its ID), and a mover deletes only messages it read and
// moved. A mover that dies between the publish and the delete leaves the
// task staged; the next move publishes it again, which the task stream
// drops as a duplicate while it remembers the ID: within its deduplication
// window (two minutes by default), and after a server restart only while it
// still stores the moved copy. So a task runs once, like any other task,
// and at least once across such failures.
//
// Staged messages come from anyone allowed to publish on the fair
// subjects: one whose subject, key, ID or key header is invalid is
// dead-lettered with reason "invalid" and deleted, and blocks no other
// message of its key. Only the task's own headers are moved ("Nats-"
// headers but the ID are dropped).
//
// What it costs: the task is written twice (staged, then moved) and its
// staged copy deleted, and each worker of a fair type receives every
// staged message on its wake-up subscription. A fair task is immediate,
// unordered and not unique, and the deployment must not have task
// partitions ([Enqueue]).
package fairness
