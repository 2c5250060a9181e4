// Roles and their NATS permissions, generated from the stream names.

package main

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow-io/jetflow/streams"
)

// Roles of the example.
const (
	roleAdmin    = "admin"
	roleProducer = "producer"
	roleWorker   = "worker"
	roleOperator = "operator"
)

// user is one NATS user: its password is random, and it gets its own inbox
// prefix so that no other user can subscribe to its replies.
type user struct {
	name, password, inbox string
	perms                 *server.Permissions
}

func newUsers(n streams.Names, workerTypes ...string) (map[string]user, error) {
	users := make(map[string]user)
	for _, name := range []string{roleAdmin, roleProducer, roleWorker, roleOperator} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		inbox := "_INBOX_" + name
		var p *server.Permissions
		switch name {
		case roleAdmin:
			p = adminPermissions(inbox)
		case roleProducer:
			p = producerPermissions(n, inbox)
		case roleWorker:
			p = workerPermissions(n, inbox, workerTypes...)
		case roleOperator:
			p = operatorPermissions(n, inbox)
		}
		users[name] = user{name: name, password: hex.EncodeToString(b), inbox: inbox, perms: p}
	}
	return users, nil
}

// adminPermissions may use the whole JetStream API: give it only to the
// deployment step that runs streams.Ensure.
func adminPermissions(inbox string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>"}},
	}
}

// kvStream returns the stream behind a KV bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// producerPermissions may publish tasks (now or delayed), write their
// "pending" state records, and read the task and delay streams' info,
// which the client asks for when a stream does not answer. It cannot
// consume, read, delete or purge anything, and a Nats-Rollup header is
// refused by both streams it writes. It may not write the schedule stream
// (which must allow roll-ups): delayed tasks go to the delay stream, and a
// worker's mover writes their schedules.
func producerPermissions(n streams.Names, inbox string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			n.TaskWildcard(),
			n.DelaySubject(">"),
			"$KV." + n.StateBucket() + ".>",
			"$JS.API.STREAM.INFO." + n.TaskStream(),
			"$JS.API.STREAM.INFO." + n.DelayStream(),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>"}},
	}
}

// workerPermissions may consume its task types, at every priority, and run
// everything a worker does by default: state records, dead letters (records,
// errors bucket, advisory router and reconciler), the effects ledger of
// effects.Once and circuit breakers. It cannot publish tasks, touch other
// types' consumers, or purge streams.
func workerPermissions(n streams.Names, inbox string, types ...string) *server.Permissions {
	tasks, adv := n.TaskStream(), n.AdvisoryStream()
	pub := []string{
		// Start-up checks of the topology.
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + tasks,
		"$JS.API.STREAM.INFO." + n.DLQStream(),
		"$JS.API.STREAM.INFO." + kvStream(n.StateBucket()),
		"$JS.API.STREAM.INFO." + kvStream(n.EffectsBucket()),
		"$JS.API.STREAM.INFO." + kvStream(n.ErrorsBucket()),
		"$JS.API.STREAM.INFO." + kvStream(n.BreakerBucket()),
		// Task state records.
		"$KV." + n.StateBucket() + ".>",
		// Dead letters: records, the errors bucket, the advisory router
		// and the reconciler (which reads and deletes max-delivered tasks).
		n.DLQSubject(">"),
		"$KV." + n.ErrorsBucket() + ".>",
		"$JS.API.STREAM.CREATE." + kvStream(n.ErrorsBucket()),
		"$JS.API.DIRECT.GET." + kvStream(n.ErrorsBucket()),
		"$JS.API.DIRECT.GET." + kvStream(n.ErrorsBucket()) + ".>",
		"$JS.API.DIRECT.GET." + tasks,
		"$JS.API.DIRECT.GET." + n.DLQStream(), // a task's "dead" mark counts only if its record is there
		"$JS.API.STREAM.MSG.DELETE." + tasks,
		"$JS.API.CONSUMER.LIST." + tasks,
		"$JS.API.CONSUMER.INFO." + tasks + ".*", // the router confirms a dead task with its consumer
		"$JS.API.CONSUMER.INFO." + adv + ".dlq-router",
		"$JS.API.CONSUMER.CREATE." + adv + ".dlq-router",
		"$JS.API.CONSUMER.CREATE." + adv + ".dlq-router.>",
		"$JS.API.CONSUMER.MSG.NEXT." + adv + ".dlq-router",
		"$JS.ACK." + adv + ".dlq-router.>",
		// Effects ledger (effects.Once).
		"$KV." + n.EffectsBucket() + ".>",
		"$JS.API.DIRECT.GET." + kvStream(n.EffectsBucket()),
		"$JS.API.DIRECT.GET." + kvStream(n.EffectsBucket()) + ".>",
		// Circuit breakers: the shared bucket and its watcher.
		"$KV." + n.BreakerBucket() + ".>",
		"$JS.API.STREAM.CREATE." + kvStream(n.BreakerBucket()),
		"$JS.API.CONSUMER.CREATE." + kvStream(n.BreakerBucket()) + ".>",
		"$JS.API.CONSUMER.DELETE." + kvStream(n.BreakerBucket()) + ".>",
		"$JS.FC." + kvStream(n.BreakerBucket()) + ".>",
		// The delay mover: consume the delay stream, write schedules
		// (a worker may roll up the schedule stream: it is trusted with
		// every delayed task), remove a schedule whose task was cancelled
		// while it moved.
		"$JS.API.CONSUMER.CREATE." + n.DelayStream() + "." + n.DelayConsumer(),
		"$JS.API.CONSUMER.MSG.NEXT." + n.DelayStream() + "." + n.DelayConsumer(),
		"$JS.ACK." + n.DelayStream() + "." + n.DelayConsumer() + ".>",
		"$JS.API.STREAM.MSG.GET." + n.DelayStream(), "$JS.API.STREAM.INFO." + n.DelayStream(),
		n.ScheduleSubject(">"),
		"$JS.API.STREAM.INFO." + n.ScheduleStream(),
		"$JS.API.STREAM.MSG.DELETE." + n.ScheduleStream(),
	}
	// The consumers of its types: look up, create, pull, acknowledge, and
	// pause (an open breaker).
	for _, t := range types {
		for _, p := range streams.Priorities {
			c := n.ConsumerName(t, p)
			pub = append(pub,
				"$JS.API.CONSUMER.INFO."+tasks+"."+c,
				"$JS.API.CONSUMER.CREATE."+tasks+"."+c+"."+n.TaskSubject(p, t),
				"$JS.API.CONSUMER.MSG.NEXT."+tasks+"."+c,
				"$JS.API.CONSUMER.PAUSE."+tasks+"."+c,
				"$JS.ACK."+tasks+"."+c+".>",
			)
		}
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>"}},
	}
}

// operatorPermissions may read stream and consumer state and task records,
// list, replay, delete and purge dead letters, and manage repeating
// schedules. It cannot consume tasks. Add
// "$JS.API.STREAM.PURGE.<schedule stream>" and
// "$JS.API.STREAM.PURGE.<delay stream>" only if operators cancel delayed
// tasks or remove repeating schedules: a purge request can name any subject,
// so it could empty those streams (the task stream denies purges).
func operatorPermissions(n streams.Names, inbox string) *server.Permissions {
	dlq, tasks, sched := n.DLQStream(), n.TaskStream(), n.ScheduleStream()
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			"$JS.API.INFO",
			"$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
			"$JS.API.STREAM.INFO.*",
			"$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.LIST.*", "$JS.API.CONSUMER.INFO.*.*",
			// Dead letters: read, replay to work subjects, delete, purge.
			"$JS.API.DIRECT.GET." + dlq, "$JS.API.DIRECT.GET." + dlq + ".>",
			"$JS.API.STREAM.MSG.GET." + dlq,
			"$JS.API.STREAM.MSG.DELETE." + dlq,
			"$JS.API.STREAM.PURGE." + dlq,
			n.TaskWildcard(),
			// Task records and schedules.
			"$JS.API.DIRECT.GET." + kvStream(n.StateBucket()) + ".>",
			"$JS.API.DIRECT.GET." + tasks, "$JS.API.DIRECT.GET." + tasks + ".>",
			"$JS.API.DIRECT.GET." + sched, "$JS.API.DIRECT.GET." + sched + ".>",
			"$JS.API.DIRECT.GET." + n.DelayStream(), "$JS.API.DIRECT.GET." + n.DelayStream() + ".>",
			n.CronSubject(">"),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>"}},
	}
}
