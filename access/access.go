package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// ErrInvalid reports an option, name or password that cannot be rendered
// into a permission or a server configuration.
var ErrInvalid = errors.New("access: invalid")

// Role names, also the default user names and inbox prefixes
// ("_INBOX_<role>") of the documented deployment.
const (
	RoleAdmin    = "admin"
	RoleProducer = "producer"
	RoleWorker   = "worker"
	RoleOperator = "operator"
)

// Permissions is what a NATS user may publish and subscribe to: the allow
// lists of a user's "permissions" block. Everything else is denied.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// Feature is a part of jetflow a worker runs, each needing its own
// subjects. Combine them with |.
type Feature uint

// Worker features. [DefaultFeatures] is what a framework.Worker runs
// unless told otherwise.
const (
	// StateTracking writes task state records (framework.WithStateTracking).
	StateTracking Feature = 1 << iota
	// DeadLetters writes dead-letter records and the failed attempts they
	// carry (framework.WithDeadLetters): of its own types only when the
	// worker runs neither the router nor the mover, which dead-letter tasks
	// of every type.
	DeadLetters
	// DeadLetterRouter routes max-delivered tasks from their advisories
	// and reconciles those no advisory routed: it reads and deletes tasks
	// of the whole task stream by sequence (framework.WithDeadLetterRouter).
	DeadLetterRouter
	// Effects writes the effects ledger of package effects, scoped to the
	// worker's types.
	Effects
	// DelayMover moves delayed tasks into their schedules
	// (framework.WithDelayMover). Its consumer must exist: streams.Ensure
	// creates it, and the worker may not create or change it.
	DelayMover

	// DefaultFeatures is every feature above.
	DefaultFeatures = StateTracking | DeadLetters | DeadLetterRouter | Effects | DelayMover
)

// Options say what a role's user runs. The zero value is valid for every
// role.
type Options struct {
	// InboxPrefix is the user's inbox prefix (nats.CustomInboxPrefix on the
	// client); the user may subscribe to InboxPrefix+".>" and nothing else,
	// so no user reads another's replies. Default "_INBOX_<role>".
	InboxPrefix string
	// Types are, for a worker, the task types it serves: it may create,
	// pull, acknowledge and pause their consumers and no others. For a
	// producer, the task types it may enqueue, each a type
	// ("payments.charge") or a pattern of types with NATS wildcards
	// ("tenant_a.>"); empty means every type.
	Types []string
	// WorkerID is, for a worker, its ID in the worker registry
	// (framework.WithWorkerID): it may write that record only. Default
	// "": every record of the registry (workers with generated IDs).
	WorkerID string
	// Dependencies are, for a worker, the dependencies whose circuit
	// breaker records it writes (breaker.WithDependencies). It reads the
	// records of every dependency. Default none: the worker gets no breaker
	// subjects at all.
	Dependencies []string
	// Features are, for a worker, what it runs. Zero means
	// [DefaultFeatures].
	Features Feature
	// Partitions is the deployment's task partition count
	// (streams.Config.Partitions, 1 to streams.MaxPartitions): a producer
	// may publish on the intake subjects of partitions 0 to Partitions-1;
	// a worker gets its grants on the task stream in each of their task
	// streams; an operator reads them all and may publish on their work
	// subjects. Nothing is granted on a partition beyond the count. 0 or 1:
	// one partition, the task stream alone.
	Partitions int
}

// partitions returns the names of the task partitions o grants.
func (o Options) partitions(n streams.Names) ([]streams.Names, error) {
	if o.Partitions == 0 {
		return n.Partitions(1), nil
	}
	if err := streamdefs.ValidatePartitionCount(o.Partitions); err != nil {
		return nil, fmt.Errorf("%w partitions: %w", ErrInvalid, err)
	}
	return n.Partitions(o.Partitions), nil
}

func (o Options) inbox(role string) (string, error) {
	p := o.InboxPrefix
	if p == "" {
		p = "_INBOX_" + role
	}
	if err := checkLiteral(p); err != nil {
		return "", fmt.Errorf("%w inbox prefix: %w", ErrInvalid, err)
	}
	return p, nil
}

// kvStream returns the stream behind a KV bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// Admin returns the permissions of the deployment step that runs
// streams.Ensure and framework.EnsureBuckets: the whole JetStream API of
// its account. Give it to nothing that runs all the time.
func Admin(n streams.Names, o Options) (Permissions, error) {
	inbox, err := o.inbox(RoleAdmin)
	if err != nil {
		return Permissions{}, err
	}
	return Permissions{Publish: []string{"$JS.API.>"}, Subscribe: []string{inbox + ".>"}}, nil
}

// Producer returns the permissions of a producer: it may publish immediate
// tasks of o.Types (all types when empty), ordered tasks of the same types,
// and delayed tasks, and read its own inbox. Nothing else: no JetStream API,
// no bucket. In the accounts layout ([Config]) these are also the subjects
// its account imports from jetflow's, so the server's answers (the
// publish acknowledgements) go back into the producer's account and can
// never be stored by a stream. Run its client with
// framework.WithStateTracking(false) and framework.WithPartitions(n), n
// the deployment's task partition count (o.Partitions, the partitions it
// may publish on): it may not write the state bucket, nor read the count
// from the task stream.
//
// A delayed task's type travels in a header that permissions cannot see,
// so a producer allowed "<prefix>.delay.>" may delay tasks of any type;
// the workers' delay mover accepts only valid targets.
func Producer(n streams.Names, o Options) (Permissions, error) {
	inbox, err := o.inbox(RoleProducer)
	if err != nil {
		return Permissions{}, err
	}
	pub, err := PartitionedIntake(n, o.Partitions, o.Types)
	if err != nil {
		return Permissions{}, err
	}
	return Permissions{Publish: pub, Subscribe: []string{inbox + ".>"}}, nil
}

// Intake returns the subjects producers publish tasks on in a deployment
// of one task partition: [PartitionedIntake] with a count of 1.
func Intake(n streams.Names, types []string) ([]string, error) {
	return PartitionedIntake(n, 1, types)
}

// PartitionedIntake returns the subjects producers publish tasks on, for
// the task types of types (type names or patterns with NATS wildcards;
// every type when empty), in task partitions 0 to partitions-1
// (streams.Config.Partitions; 0 means 1): immediate tasks at every
// priority and ordered tasks of each partition, then delayed tasks (one
// delay stream for all). They are what the jetflow account exports as
// services and what a tenant account imports.
func PartitionedIntake(n streams.Names, partitions int, types []string) ([]string, error) {
	parts, err := Options{Partitions: partitions}.partitions(n)
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		if err := checkTypePattern(t); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, p := range parts {
		if len(types) == 0 {
			out = append(out, p.TaskWildcard(), p.OrderedWildcard())
			continue
		}
		work, ord := strings.TrimSuffix(p.TaskWildcard(), ">"), strings.TrimSuffix(p.OrderedWildcard(), ">")
		for _, t := range types {
			if strings.HasSuffix(t, ">") {
				out = append(out, work+"*."+t, ord+t)
				continue
			}
			// The slot's bits (streams.Names.OrderedSubject).
			out = append(out, work+"*."+t, ord+t+".K.*.*.*.*.*.*.*.*")
		}
	}
	return append(out, n.DelaySubject(">")), nil
}

// Worker returns the permissions of a worker serving o.Types with
// o.Features, reporting circuit breakers of o.Dependencies, in each of
// o.Partitions task partitions (its consumers, and with the dead-letter
// router, its reads and deletes, in every partition's task stream). It may not
// publish tasks, touch other types' consumers, create or change the delay
// mover's consumer, or purge streams. What it can still do is written in
// docs/security.md: a worker is trusted with the tasks of its types, and
// with the dead-letter router on, with reading and deleting any task.
func Worker(n streams.Names, o Options) (Permissions, error) {
	inbox, err := o.inbox(RoleWorker)
	if err != nil {
		return Permissions{}, err
	}
	f := o.Features
	if f == 0 {
		f = DefaultFeatures
	}
	for _, t := range o.Types {
		if err := streams.ValidateTaskType(t); err != nil {
			return Permissions{}, fmt.Errorf("%w worker type: %w", ErrInvalid, err)
		}
	}
	for _, d := range o.Dependencies {
		if err := topology.ValidateDependency(d); err != nil {
			return Permissions{}, fmt.Errorf("%w worker dependency: %w", ErrInvalid, err)
		}
	}
	parts, err := o.partitions(n)
	if err != nil {
		return Permissions{}, err
	}
	adv := n.AdvisoryStream()
	api := "$JS.API."
	// Start-up checks of the topology.
	pub := []string{api + "INFO"}
	for _, p := range parts {
		pub = append(pub, api+"STREAM.INFO."+p.TaskStream())
	}
	pub = append(pub,
		api+"STREAM.INFO."+n.DLQStream(),
		api+"STREAM.INFO."+kvStream(n.StateBucket()),
		api+"STREAM.INFO."+kvStream(n.EffectsBucket()),
		api+"STREAM.INFO."+kvStream(n.ErrorsBucket()),
		api+"STREAM.INFO."+kvStream(n.BreakerBucket()),
		api+"STREAM.INFO."+kvStream(n.WorkersBucket()),
	)
	// Its record in the worker registry.
	if o.WorkerID != "" {
		if err := checkLiteral(o.WorkerID); err != nil || strings.Contains(o.WorkerID, ".") {
			return Permissions{}, fmt.Errorf("%w worker ID %q", ErrInvalid, o.WorkerID)
		}
		pub = append(pub, "$KV."+n.WorkersBucket()+"."+o.WorkerID)
	} else {
		pub = append(pub, "$KV."+n.WorkersBucket()+".>")
	}
	// The registry's records, read where a task's payload version finds
	// no handler here (a watch of every record).
	wk := kvStream(n.WorkersBucket())
	pub = append(pub, api+"CONSUMER.CREATE."+wk+".>", api+"CONSUMER.DELETE."+wk+".>", "$JS.FC."+wk+".>")
	// The consumers of its types, of the same names in every partition's
	// task stream: look up, create (the create subject carries the filter,
	// which the server checks), pull, acknowledge, pause (an open
	// breaker).
	for _, part := range parts {
		tasks := part.TaskStream()
		for _, t := range o.Types {
			for _, p := range streams.Priorities {
				c := n.ConsumerName(t, p)
				pub = append(pub,
					api+"CONSUMER.INFO."+tasks+"."+c,
					api+"CONSUMER.CREATE."+tasks+"."+c+"."+part.TaskSubject(p, t),
					api+"CONSUMER.MSG.NEXT."+tasks+"."+c,
					api+"CONSUMER.PAUSE."+tasks+"."+c,
					"$JS.ACK."+tasks+"."+c+".>",
				)
			}
		}
	}
	if f&StateTracking != 0 {
		pub = append(pub, "$KV."+n.StateBucket()+".>")
	}
	if f&DeadLetters != 0 {
		// The router and the mover dead-letter tasks of every type; a
		// worker running neither writes the dead letters of its types
		// only.
		if f&(DeadLetterRouter|DelayMover) != 0 {
			pub = append(pub, n.DLQSubject(">"))
		} else {
			for _, t := range o.Types {
				pub = append(pub, n.DLQSubject(t))
			}
		}
		errs := kvStream(n.ErrorsBucket())
		pub = append(pub,
			"$KV."+n.ErrorsBucket()+".>",
			api+"STREAM.CREATE."+errs,
			api+"DIRECT.GET."+errs, api+"DIRECT.GET."+errs+".>",
			api+"DIRECT.GET."+n.DLQStream(), // a task's "dead" mark counts only if its record is there
		)
	}
	if f&DeadLetterRouter != 0 {
		// One router reads the advisories of every partition and the dead
		// task in its partition's stream.
		for _, part := range parts {
			tasks := part.TaskStream()
			pub = append(pub,
				api+"DIRECT.GET."+tasks,
				api+"STREAM.MSG.DELETE."+tasks,
				api+"CONSUMER.LIST."+tasks,
				api+"CONSUMER.INFO."+tasks+".*", // the router confirms a dead task with its consumer
			)
		}
		pub = append(pub,
			api+"CONSUMER.INFO."+adv+".dlq-router",
			api+"CONSUMER.CREATE."+adv+".dlq-router",
			api+"CONSUMER.CREATE."+adv+".dlq-router.>",
			api+"CONSUMER.MSG.NEXT."+adv+".dlq-router",
			"$JS.ACK."+adv+".dlq-router.>",
		)
	}
	if f&Effects != 0 {
		fx := kvStream(n.EffectsBucket())
		// Effect keys start with the task's type, escaped like state
		// keys: a worker writes the ledger of its own types only.
		for _, t := range o.Types {
			pub = append(pub, "$KV."+n.EffectsBucket()+"."+keyToken(t)+".>")
		}
		pub = append(pub, api+"DIRECT.GET."+fx, api+"DIRECT.GET."+fx+".>")
	}
	if len(o.Dependencies) > 0 {
		// Breakers: its dependencies' records, and a watcher of all.
		bk := kvStream(n.BreakerBucket())
		for _, d := range o.Dependencies {
			pub = append(pub, "$KV."+n.BreakerBucket()+"."+d)
		}
		pub = append(pub,
			api+"STREAM.CREATE."+bk,
			api+"CONSUMER.CREATE."+bk+".>", api+"CONSUMER.DELETE."+bk+".>",
			"$JS.FC."+bk+".>",
		)
	}
	if f&DelayMover != 0 {
		// The mover pulls the delay stream's consumer that streams.Ensure
		// created, writes schedules (a worker may roll up the schedule
		// stream: it is trusted with every delayed task), and removes a
		// schedule whose task was cancelled while it moved.
		ds, dc := n.DelayStream(), n.DelayConsumer()
		pub = append(pub,
			api+"CONSUMER.INFO."+ds+"."+dc,
			api+"CONSUMER.MSG.NEXT."+ds+"."+dc,
			"$JS.ACK."+ds+"."+dc+".>",
			api+"STREAM.MSG.GET."+ds, api+"STREAM.INFO."+ds,
			n.ScheduleSubject(">"),
			api+"STREAM.INFO."+n.ScheduleStream(),
			api+"STREAM.MSG.GET."+n.ScheduleStream(), // the schedule in a delayed task's way: its own, or a conflict
			api+"STREAM.MSG.DELETE."+n.ScheduleStream(),
		)
	}
	return Permissions{Publish: dedup(pub), Subscribe: []string{inbox + ".>"}}, nil
}

// Operator returns the permissions of an operator, over o.Partitions task
// partitions: read stream and consumer
// state, task records, schedules, breaker records, the worker registry and
// workflow runs and events; deliver workflow events; list,
// replay, delete and purge dead letters; register repeating schedules. It
// cannot consume tasks. It gets no STREAM.PURGE of the schedule and delay
// streams (cancelling a delayed task, removing a repeating schedule): a
// purge request can name any subject, so it could empty those streams.
// Add them knowingly.
func Operator(n streams.Names, o Options) (Permissions, error) {
	inbox, err := o.inbox(RoleOperator)
	if err != nil {
		return Permissions{}, err
	}
	parts, err := o.partitions(n)
	if err != nil {
		return Permissions{}, err
	}
	api := "$JS.API."
	dlq, sched := n.DLQStream(), n.ScheduleStream()
	bk, wk := kvStream(n.BreakerBucket()), kvStream(n.WorkersBucket())
	direct := func(stream string) []string {
		return []string{api + "DIRECT.GET." + stream, api + "DIRECT.GET." + stream + ".>"}
	}
	pub := []string{
		api + "INFO",
		api + "STREAM.NAMES", api + "STREAM.LIST",
		api + "STREAM.INFO.*",
		api + "CONSUMER.NAMES.*", api + "CONSUMER.LIST.*", api + "CONSUMER.INFO.*.*",
		// Dead letters: read, replay to work subjects, delete, purge.
		api + "STREAM.MSG.GET." + dlq,
		api + "STREAM.MSG.DELETE." + dlq,
		api + "STREAM.PURGE." + dlq,
	}
	for _, p := range parts {
		pub = append(pub, p.TaskWildcard())
	}
	pub = append(pub,
		// Repeating schedules.
		n.CronSubject(">"),
		// Breaker records: list the keys (an ordered consumer) and read.
		api+"CONSUMER.CREATE."+bk+".>", api+"CONSUMER.DELETE."+bk+".>",
		"$JS.FC."+bk+".>",
		// Workflow runs.
		api+"STREAM.MSG.GET."+n.RunStream(),
		// The worker registry (a watch of every record).
		api+"CONSUMER.CREATE."+wk+".>", api+"CONSUMER.DELETE."+wk+".>",
		"$JS.FC."+wk+".>",
	)
	pub = append(pub, direct(dlq)...)
	pub = append(pub, api+"DIRECT.GET."+kvStream(n.StateBucket())+".>")
	for _, p := range parts {
		pub = append(pub, direct(p.TaskStream())...)
	}
	pub = append(pub, direct(sched)...)
	pub = append(pub, direct(n.DelayStream())...)
	pub = append(pub, direct(bk)...)
	pub = append(pub, direct(n.RunStream())...)
	// Workflow events: deliver one (jetflow workflows signal), and read
	// the events kept and the runs waiting for them.
	pub = append(pub, n.EventSubject(">"))
	pub = append(pub, direct(n.EventStream())...)
	pub = append(pub, direct(n.WaitStream())...)
	return Permissions{Publish: pub, Subscribe: []string{inbox + ".>"}}, nil
}

// keyToken escapes a task type into one KV key token the way the state
// and effects keys do: A-Z a-z 0-9 _ - stay, any other byte becomes "=XX"
// in hex ("email.send" is "email=2Esend").
func keyToken(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// checkTypePattern accepts a task type or a pattern of them: tokens of a
// task type, "*", or a last ">".
func checkTypePattern(t string) error {
	toks := strings.Split(t, ".")
	var lit []string
	for i, tok := range toks {
		switch {
		case tok == "*":
			lit = append(lit, "x")
		case tok == ">" && i == len(toks)-1:
			lit = append(lit, "x")
		default:
			lit = append(lit, tok)
		}
	}
	if err := streams.ValidateTaskType(strings.Join(lit, ".")); err != nil {
		return fmt.Errorf("%w producer type %q: %w", ErrInvalid, t, err)
	}
	return nil
}

// checkLiteral accepts a subject of tokens without wildcards, made of
// A-Z a-z 0-9 _ - (what inbox prefixes and account names need).
func checkLiteral(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("%q must be 1 to 64 bytes", s)
	}
	for i, tok := range strings.Split(s, ".") {
		if tok == "" {
			return fmt.Errorf("%q has an empty token %d", s, i)
		}
		for j := 0; j < len(tok); j++ {
			c := tok[j]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
				return fmt.Errorf("%q contains %q (allowed: A-Z a-z 0-9 _ - and . between tokens)", s, rune(c))
			}
		}
	}
	return nil
}

func dedup(s []string) []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
