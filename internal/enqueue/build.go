package enqueue

import (
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Builder builds the task messages of one client. Its fields are set once,
// before the first build; Build is then safe for concurrent use.
type Builder struct {
	// Names are the client's topology names (partition 0).
	Names streams.Names
	// Codec encodes payloads.
	Codec taskmsg.Marshaler
	// NoDedup publishes immediate tasks without an ID of the caller's and
	// without task partitions with no Nats-Msg-Id (framework.WithDedup).
	NoDedup bool
	// MaxPayload returns the largest message the server accepts, ≤ 0 when
	// unknown (nats.Conn.MaxPayload); nil checks nothing.
	MaxPayload func() int64
	// ErrInvalid is wrapped by the errors of invalid options
	// (framework.ErrInvalidOption).
	ErrInvalid error
	// Router chooses each task's partition.
	Router *Router

	// fits is the largest message size known to fit: the last MaxPayload
	// read (see tooLarge).
	fits atomic.Int64
	// subjects are the work subjects built so far (subject).
	subjects atomic.Pointer[Subjects]
}

// Built is what a build reports beside the message.
type Built struct {
	// ID is the task ID: "" for a task whose stream sequence names it
	// ([TaskID]).
	ID string
	// Priority is the task's priority.
	Priority streams.Priority
	// Due is the due time of a delayed task, zero for an immediate one.
	Due time.Time
}

// typed is a payload that names its task type (framework.TaskArgs).
type typed interface{ TaskType() string }

// versioned is a payload that names its version (framework.VersionedArgs).
type versioned interface{ PayloadVersion() int }

// Check validates the task type of a task and that a payload naming its
// task type ([typed]) names taskType. Its errors wrap
// streams.ErrInvalidTaskType or b.ErrInvalid.
func (b *Builder) Check(taskType string, payload any) error {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return err
	}
	if a, ok := payload.(typed); ok && a.TaskType() != taskType {
		return fmt.Errorf("%w: payload %T names task type %q, not %q", b.ErrInvalid, payload, a.TaskType(), taskType)
	}
	return nil
}

// BuildTask is [Builder.Check], [Options] and [Builder.Build] in one
// call, for a caller whose stack does not matter (a batch: framework's
// EnqueueMany). Its errors are theirs.
func BuildTask[O ~func(*Config) error](b *Builder, taskType string, payload any, opts []O, subjects Subjects, l streams.Layout) (*nats.Msg, Built, error) {
	if err := b.Check(taskType, payload); err != nil {
		return nil, Built{}, err
	}
	cfg, err := Options(opts)
	if err != nil {
		return nil, Built{}, err
	}
	return b.Build(taskType, payload, cfg, subjects, l)
}

// Build returns the message of a task of taskType with payload and the
// options cfg (applied by [Apply] or [Options]; Build only reads it), for
// a task [Builder.Check] accepted.
// subjects interns work subjects across the builds of one batch (nil: the
// builder's own, see subject); l is the layout of the task partitions to
// spread it over ([Router.Layout]). Its errors wrap b.ErrInvalid,
// [ErrEncode], [ErrOrdering] or natserr.ErrPayloadTooLarge.
//
// A producer that starts a goroutine per enqueue (an HTTP server, the
// latency figures of the bench) keeps that goroutine's stack at its first
// size only while the build stays shallow: a stack grown before the
// publish is held, twice as large, by every enqueue waiting for its
// acknowledgement, and thousands of them tipped a loaded producer into
// a pile-up (decision 045). Build is therefore one frame, not a generic
// wrapper around a helper, and formats its errors out of that frame.
func (b *Builder) Build(taskType string, payload any, cfg *Config, subjects Subjects, l streams.Layout) (*nats.Msg, Built, error) {
	data, enc, err := taskmsg.Encode(b.Codec, payload)
	if err != nil {
		return nil, Built{}, errEncode(taskType, payload, err)
	}
	// The clock is read only for what needs it: a due time or a unique
	// period.
	var now time.Time
	if cfg.Delay > 0 || !cfg.At.IsZero() || cfg.Unique.Period != 0 {
		now = time.Now()
	}
	due := cfg.At
	if cfg.Delay > 0 {
		due = now.Add(cfg.Delay)
	}
	if due.After(taskmsg.MaxDue) {
		return nil, Built{}, b.errDue(due)
	}
	delayed := due.After(now)
	id := cfg.ID
	// Without dedup an immediate task's ID is its stream sequence, filled in
	// from the acknowledgement (TaskID).
	// (Sequences of task partitions overlap: there, every task has an ID.)
	anonymous := id == "" && b.NoDedup && !delayed && l.Partitions < 2
	if id == "" && !anonymous {
		id = nuid.Next()
	}
	headers, unique, err := b.uniqueHeaders(cfg, taskType, data, now)
	if err != nil {
		return nil, Built{}, err
	}
	if unique && anonymous {
		return nil, Built{}, fmt.Errorf("%w: Unique needs a task ID: combine it with WithID when the client has WithDedup(false)", b.ErrInvalid)
	}
	version, err := b.version(cfg, payload)
	if err != nil {
		return nil, Built{}, err
	}
	// set writes a header on a copy: the option's map stays the caller's
	// (a unique task's headers are a copy already).
	owned := unique
	set := func(k, v string) {
		if !owned {
			headers, owned = maps.Clone(headers), true
		}
		if headers == nil {
			headers = make(map[string]string, 2)
		}
		headers[k] = v
	}
	if version != "" {
		set(fleet.HeaderPayloadVersion, version)
	}
	names := b.Router.Partition(cfg.OrderingKey, taskType, id, l)
	target := b.subject(subjects, names, cfg.Priority, taskType)
	if cfg.OrderingKey != "" {
		if target, err = b.orderedTarget(names, taskType, cfg, delayed); err != nil {
			return nil, Built{}, err
		}
		set(ordering.HeaderKey, cfg.OrderingKey)
	}
	spec := taskmsg.Spec{Target: target, ID: id, Anonymous: anonymous,
		Encoding: enc, Headers: headers, Data: data, Due: due, Now: now}
	built := Built{ID: id, Priority: cfg.Priority}
	if delayed {
		// The target is derived here from the validated type and priority,
		// never taken from the caller: a schedule can only fire into the
		// staging subject of a work subject.
		spec.DelaySubject = b.Names.DelaySubject(id)
		spec.ScheduleTarget = names.FiredSubject(cfg.Priority, taskType)
		built.Due = due
	}
	msg, size := taskmsg.BuildSized(&spec)
	if max, over := b.tooLarge(size); over {
		return nil, Built{}, errTooLarge(taskType, size, max)
	}
	return msg, built, nil
}

// The errors of Build are formatted out of its frame, which stays small
// for the goroutine's stack (see Build).

//go:noinline
func errEncode(taskType string, payload any, err error) error {
	return fmt.Errorf("%w: task type %s (%T): %w", ErrEncode, taskType, payload, err)
}

//go:noinline
func (b *Builder) errDue(due time.Time) error {
	return fmt.Errorf("%w: due time %s is after %s, the last time a schedule can hold",
		b.ErrInvalid, due.UTC().Format(time.RFC3339), taskmsg.MaxDue.Format(time.RFC3339))
}

//go:noinline
func errTooLarge(taskType string, size, max int64) error {
	return fmt.Errorf("%w: task type %s is %d bytes with headers, the server accepts at most %d; store large data elsewhere (for example an object store) and enqueue a reference",
		natserr.ErrPayloadTooLarge, taskType, size, max)
}

// tooLarge reports whether a message of size bytes is over the server's
// limit, and the limit. MaxPayload takes the connection's lock, the lock
// every publish of the connection takes too: read for every task, it adds
// one more turn on that lock per enqueue, and with thousands of goroutines
// enqueueing at once the waiters on it pile up. So it is read only for a
// message larger than the last limit read (the first message, and one that
// may not fit). A message within the last limit is published unchecked
// here: nats.go checks it against the current server's limit anyway, and
// its error (nats.ErrMaxPayload) is reported as natserr.ErrPayloadTooLarge;
// this check only names the type and the sizes.
func (b *Builder) tooLarge(size int64) (max int64, over bool) {
	if b.MaxPayload == nil || size <= b.fits.Load() {
		return 0, false
	}
	max = b.MaxPayload()
	if max <= 0 {
		return 0, false
	}
	b.fits.Store(max)
	return max, size > max
}

// uniqueHeaders validates the unique options of cfg and returns the
// caller's headers with the task's unique headers added (a copy), and
// whether the task is unique.
func (b *Builder) uniqueHeaders(cfg *Config, taskType string, data []byte, now time.Time) (map[string]string, bool, error) {
	u := cfg.Unique
	if u.Period == 0 {
		if u.HasKey || u.UntilDone {
			return nil, false, fmt.Errorf("%w: UniqueKey and UniqueUntilDone need Unique(period)", b.ErrInvalid)
		}
		return cfg.Headers, false, nil
	}
	return u.Headers(taskType, data, now, cfg.Headers), true, nil
}

// version returns the version header value of a task of payload with cfg,
// "" for none.
func (b *Builder) version(cfg *Config, payload any) (string, error) {
	v := cfg.Version
	if v == 0 {
		a, ok := payload.(versioned)
		if !ok {
			return "", nil
		}
		v = a.PayloadVersion()
		if err := fleet.CheckVersion(v); err != nil {
			return "", fmt.Errorf("%w: %w (%T.PayloadVersion)", b.ErrInvalid, err, payload)
		}
	}
	return strconv.Itoa(v), nil
}

// orderedTarget returns the slot subject of an ordered task, or refuses
// the combination of options.
func (b *Builder) orderedTarget(names streams.Names, taskType string, cfg *Config, delayed bool) (string, error) {
	if cfg.Priority != streams.PriorityNormal {
		return "", fmt.Errorf("%w %s: %w: priority %s; tasks of one key run in enqueue order, so they have no priority (enqueue the urgent ones under another type)",
			ErrOrdering, taskType, b.ErrInvalid, cfg.Priority)
	}
	if delayed {
		return "", fmt.Errorf("%w %s: %w: a delayed task would join its key's queue when due, not in enqueue order; delay the enqueue instead",
			ErrOrdering, taskType, b.ErrInvalid)
	}
	return names.OrderedSubject(taskType, ordering.Slot(cfg.OrderingKey, streamdefs.OrderedSlots)), nil
}

// maxInternedSubjects bounds the subjects one [Subjects] holds (distinct
// types × priorities × partitions of one batch).
const maxInternedSubjects = 256

// Subjects interns the work subjects of one batch (framework's EnqueueMany
// and EnqueueSeq), by partition, priority and type, so that its messages
// and TaskInfos share one string per subject. A nil Subjects leaves it to
// the builder's own (see subject). It is not safe for concurrent use.
type Subjects map[subjectKey]string

type subjectKey struct {
	partition int
	priority  streams.Priority
	taskType  string
}

// subject returns the work subject of taskType at priority p in the task
// partition of names: from subjects when not nil (one batch), else from
// the builder's own copy-on-write map of the subjects it built, up to
// maxInternedSubjects of them. Either way an enqueue of a known type and
// priority builds no string.
func (b *Builder) subject(subjects Subjects, names streams.Names, p streams.Priority, taskType string) string {
	k := subjectKey{names.PartitionIndex(), p, taskType}
	if subjects != nil {
		if v, ok := subjects[k]; ok {
			return v
		}
		v := names.TaskSubject(p, taskType)
		if len(subjects) < maxInternedSubjects {
			subjects[k] = v
		}
		return v
	}
	known := b.subjects.Load()
	if known != nil {
		if v, ok := (*known)[k]; ok {
			return v
		}
	}
	v := names.TaskSubject(p, taskType)
	if known == nil || len(*known) < maxInternedSubjects {
		next := make(Subjects, 1+len(mapOf(known)))
		maps.Copy(next, mapOf(known))
		next[k] = v
		b.subjects.CompareAndSwap(known, &next) // a lost race only leaves v out
	}
	return v
}

// mapOf is the map p points to, nil for none.
func mapOf(p *Subjects) Subjects {
	if p == nil {
		return nil
	}
	return *p
}
