package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/cronexpr"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Repeating schedules ("cron") are server-side message schedules: one
// message per schedule on "<prefix>.cron.<name>" in the schedule stream, with a
// Nats-Schedule header, from which the stream leader publishes a copy to the
// task's staging subject ("<prefix>.fired.<priority>.<type>") at every tick;
// the task stream sources it onto the work subject. Only the stream leader fires, through
// Raft in a cluster, so a tick enqueues one task however many processes
// registered the schedule. See docs/cron.md.

// Headers jetflow sets on a schedule message. The server copies them (with
// the schedule's payload and custom headers) onto every task it fires, while
// it strips the Nats-Schedule* ones.
const (
	// HeaderSchedule is the name of the repeating schedule a task came from.
	HeaderSchedule = taskmsg.HeaderSchedule
	// HeaderScheduleSpec is the schedule's normalised expression.
	HeaderScheduleSpec = taskmsg.HeaderScheduleSpec
	// HeaderScheduleZone is the schedule's IANA time zone, when set.
	HeaderScheduleZone = taskmsg.HeaderScheduleZone
	// HeaderScheduleHash fingerprints the schedule's definition so that
	// registering an identical definition again changes nothing.
	HeaderScheduleHash = taskmsg.HeaderScheduleHash
)

// Headers the server sets on a task it fired from a schedule.
const (
	// HeaderScheduler is the subject of the schedule that fired the task,
	// for example "jetflow.cron.nightly".
	HeaderScheduler = taskmsg.HeaderScheduler
	// HeaderScheduleNext is the schedule's next fire time (RFC 3339 with
	// nanoseconds), or "purge" for a one-shot schedule.
	HeaderScheduleNext = taskmsg.HeaderScheduleNext
)

// ErrInvalidSchedule wraps every error about a schedule definition: its
// name, expression, time zone, task type, priority or headers.
var ErrInvalidSchedule = errors.New("framework: invalid schedule")

// Schedule declares a repeating schedule: which task to enqueue, and when.
type Schedule struct {
	// Name identifies the schedule; it is a subject token (A-Z a-z 0-9 _ - =
	// :, at most 128 bytes). Required.
	Name string
	// Spec says when the task is enqueued. Required. Accepted forms:
	// six cron fields with seconds ("0 30 9 * * mon-fri"), the common five
	// fields without seconds ("30 9 * * mon-fri", which fires at second 0),
	// "@every <duration>" (a whole number of seconds, at least 1 s), and
	// @yearly, @monthly, @weekly, @daily and @hourly.
	Spec string
	// TimeZone is the IANA time zone cron fields are evaluated in, for
	// example "Europe/Paris". Default UTC. It cannot be combined with
	// "@every", which the server rejects.
	TimeZone string
	// Type is the task type to enqueue. Required.
	Type string
	// Payload is the task payload, encoded like [Client.Enqueue] does. The
	// same payload is sent at every tick.
	Payload any
	// Priority is the task's priority. Default [PriorityNormal].
	Priority Priority
	// Headers are custom headers set on every task. Keys starting with
	// "Nats-" or "Jetflow-" are reserved.
	Headers map[string]string
}

// ScheduleInfo describes a stored schedule.
type ScheduleInfo struct {
	// Name, Spec, TimeZone, Type and Priority are the schedule's definition.
	Name     string
	Spec     string
	TimeZone string
	Type     string
	Priority Priority
	// Subject holds the schedule, for example "jetflow.cron.nightly".
	Subject string
	// Target is the work subject the fired task runs on (the schedule
	// itself targets the staging subject the task stream sources it from).
	Target string
	// Payload is the encoded payload; Headers are the custom headers.
	Payload []byte
	Headers map[string]string
	// Sequence is the schedule message's sequence in the schedule stream.
	Sequence uint64
	// Stored is when this definition was stored.
	Stored time.Time
	// Next is the next fire time, computed on the client. For cron
	// expressions it is exact. For "@every" it assumes the phase set when
	// the schedule was stored; after a server restart the server restarts
	// the interval from its start-up, so the real tick may be earlier.
	Next time.Time
}

// RegisterResult says what [Schedules.Register] did.
type RegisterResult int

// Results of [Schedules.Register].
const (
	// ScheduleUnchanged: an identical definition was stored already; its
	// timing was left alone.
	ScheduleUnchanged RegisterResult = iota
	// ScheduleCreated: the schedule did not exist.
	ScheduleCreated
	// ScheduleUpdated: the schedule existed with another definition, which
	// was replaced.
	ScheduleUpdated
)

// String returns "unchanged", "created" or "updated".
func (r RegisterResult) String() string {
	switch r {
	case ScheduleUnchanged:
		return "unchanged"
	case ScheduleCreated:
		return "created"
	case ScheduleUpdated:
		return "updated"
	}
	return "RegisterResult(" + strconv.Itoa(int(r)) + ")"
}

// Schedules manages repeating schedules. Get one with [Client.Schedules] or
// [Inspector.Schedules]. It is safe for concurrent use.
type Schedules struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	codec Codec
}

// Schedules returns the client's schedule manager.
func (c *Client) Schedules() *Schedules {
	return &Schedules{nc: c.nc, js: c.js, names: c.names, codec: c.opts.codec}
}

// maxRegisterConflicts bounds the compare-and-set retries of Register.
const maxRegisterConflicts = 8

// Register stores s, or replaces the stored schedule of the same name when
// its definition differs. Registering an identical definition again changes
// nothing and keeps the schedule's timing, so every process of an
// application may register its schedules at start-up: concurrent
// registrations leave exactly one schedule, and a tick fires one task.
// Replacing a definition restarts an "@every" interval.
//
// The definition is validated before anything is stored; errors wrap
// [ErrInvalidSchedule] and say what is wrong. Other errors: [ErrTopologyMissing],
// [ErrNotConnected], [ErrPayloadTooLarge], or the context's.
func (s *Schedules) Register(ctx context.Context, sc Schedule) (RegisterResult, error) {
	msg, hash, err := s.build(sc)
	if err != nil {
		return 0, err
	}
	subject := msg.Subject
	stream := s.names.ScheduleStream()
	for attempt := 0; ; attempt++ {
		var last *jsapi.Stored
		_, err := jsapi.DirectGet(ctx, s.nc, stream, jsapi.GetRequest{NextFor: subject, Seq: 0}, func(m jsapi.Stored) error {
			last = &m
			return nil
		})
		if err != nil {
			return 0, s.err("register", sc.Name, err)
		}
		// A direct get by "next for subject" from sequence 0 finds the
		// first (and only: schedules roll up) message of the subject.
		var expect uint64
		if last != nil {
			if last.Header.Get(HeaderScheduleHash) == hash {
				return ScheduleUnchanged, nil
			}
			expect = last.Seq
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		_, err = s.js.PublishMsg(ctx, msg)
		if err == nil {
			if expect == 0 {
				return ScheduleCreated, nil
			}
			return ScheduleUpdated, nil
		}
		if !natserr.WrongLastSequence(err) {
			return 0, s.err("register", sc.Name, err)
		}
		// Another process registered (or changed) it meanwhile: look again.
		if attempt+1 >= maxRegisterConflicts {
			return 0, fmt.Errorf("framework: register schedule %s: still conflicting after %d attempts: %w", sc.Name, attempt+1, err)
		}
		if !retry.Sleep(ctx, time.Duration(attempt+1)*10*time.Millisecond) {
			return 0, fmt.Errorf("framework: register schedule %s: %w", sc.Name, ctx.Err())
		}
	}
}

// Get returns the stored schedule called name, or an error wrapping
// [ErrNotFound].
func (s *Schedules) Get(ctx context.Context, name string) (ScheduleInfo, error) {
	if err := streams.ValidateID(name); err != nil {
		return ScheduleInfo{}, fmt.Errorf("%w: name: %w", ErrInvalidSchedule, err)
	}
	var info *ScheduleInfo
	_, err := jsapi.DirectGet(ctx, s.nc, s.names.ScheduleStream(), jsapi.GetRequest{NextFor: s.names.CronSubject(name)}, func(m jsapi.Stored) error {
		i := s.info(m, time.Now())
		info = &i
		return nil
	})
	if err != nil {
		return ScheduleInfo{}, s.err("get", name, err)
	}
	if info == nil {
		return ScheduleInfo{}, fmt.Errorf("%w: schedule %s", ErrNotFound, name)
	}
	return *info, nil
}

// List returns every stored schedule, sorted by name, with its next fire
// time. It reads them with batched direct gets: one round trip per thousand
// schedules.
func (s *Schedules) List(ctx context.Context) ([]ScheduleInfo, error) {
	var out []ScheduleInfo
	now := time.Now()
	err := jsapi.Scan(ctx, s.nc, s.names.ScheduleStream(), s.names.CronSubject(">"), 0, 0, time.Time{}, 1000,
		func(m jsapi.Stored) (bool, error) {
			if isSchedule(m) { // junk is reported by Inspector.QueueStats
				out = append(out, s.info(m, now))
			}
			return true, nil
		})
	if err != nil {
		return nil, s.err("list", "", err)
	}
	slices.SortFunc(out, func(a, b ScheduleInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Remove deletes the schedule called name: it fires no more. It returns an
// error wrapping [ErrNotFound] when there is no such schedule.
func (s *Schedules) Remove(ctx context.Context, name string) error {
	if err := streams.ValidateID(name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalidSchedule, err)
	}
	n, err := jsapi.PurgeSubject(ctx, s.nc, s.names.ScheduleStream(), s.names.CronSubject(name))
	if err != nil {
		return s.err("remove", name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: schedule %s", ErrNotFound, name)
	}
	return nil
}

func (s *Schedules) err(op, name string, err error) error {
	what := "framework: " + op + " schedule"
	if name != "" {
		what += " " + name
	}
	return natserr.Wrap(what, err)
}

// build validates sc and returns its schedule message and definition hash.
func (s *Schedules) build(sc Schedule) (*nats.Msg, string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrInvalidSchedule, sc.Name, fmt.Sprintf(format, args...))
	}
	if err := streams.ValidateID(sc.Name); err != nil {
		return nil, "", fmt.Errorf("%w: name: %w", ErrInvalidSchedule, err)
	}
	if err := streams.ValidateTaskType(sc.Type); err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrInvalidSchedule, sc.Name, err)
	}
	if !sc.Priority.Valid() {
		return nil, "", bad("priority %d is not critical, high, normal or low", uint8(sc.Priority))
	}
	expr, err := cronexpr.Parse(sc.Spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrInvalidSchedule, sc.Name, err)
	}
	spec := expr.String()
	if sc.TimeZone != "" {
		if _, every := expr.Every(); every {
			return nil, "", bad("a time zone cannot be combined with %q (the server rejects it); intervals do not depend on zones", spec)
		}
		if _, err := taskmsg.LoadZone(sc.TimeZone); err != nil {
			return nil, "", bad("%v", err)
		}
	}
	data, enc, err := encode(s.codec, sc.Payload)
	if err != nil {
		return nil, "", fmt.Errorf("%w: schedule %s (%T): %w", ErrEncode, sc.Name, sc.Payload, err)
	}
	for k := range sc.Headers {
		if k == "" || hasFoldPrefix(k, "nats-") || hasFoldPrefix(k, "jetflow-") {
			return nil, "", bad("header %q is empty or reserved (Nats-*, Jetflow-*)", k)
		}
	}
	msg, hash := taskmsg.BuildSchedule(taskmsg.Schedule{Name: sc.Name, Subject: s.names.CronSubject(sc.Name), Spec: spec,
		Zone: sc.TimeZone, Target: s.names.FiredSubject(sc.Priority, sc.Type), Encoding: enc, Data: data, Headers: sc.Headers})
	if max := s.nc.MaxPayload(); max > 0 {
		if size := taskmsg.Size(msg) + 64; size > max {
			return nil, "", fmt.Errorf("%w: schedule %s is %d bytes with headers, the server accepts at most %d", ErrPayloadTooLarge, sc.Name, size, max)
		}
	}
	return msg, hash, nil
}

// info decodes a stored schedule message.
func (s *Schedules) info(m jsapi.Stored, now time.Time) ScheduleInfo {
	h := m.Header
	name := strings.TrimPrefix(m.Subject, s.names.CronSubject(""))
	info := ScheduleInfo{
		Name:     name,
		Spec:     h.Get(jetstream.ScheduleHeader),
		TimeZone: h.Get(taskmsg.HeaderScheduleTimeZone),
		Subject:  m.Subject,
		Target:   h.Get(jetstream.ScheduleTargetHeader),
		Payload:  m.Data,
		Sequence: m.Seq,
		Stored:   m.Time,
	}
	if p, typ, err := s.names.ParseScheduleTarget(info.Target); err == nil {
		// The schedule fires into a staging subject of the schedule
		// stream; the task runs on the work subject the task stream
		// sources it to.
		info.Priority, info.Type, info.Target = p, typ, s.names.TaskSubject(p, typ)
	}
	for k, vs := range h {
		if len(vs) == 0 || hasFoldPrefix(k, "nats-") || hasFoldPrefix(k, "jetflow-") || k == "Status" || k == "Description" {
			continue
		}
		if info.Headers == nil {
			info.Headers = make(map[string]string)
		}
		info.Headers[k] = vs[0]
	}
	info.Next = taskmsg.NextFire(info.Spec, info.TimeZone, m.Time, now)
	return info
}

// ScheduleFire describes the tick of a repeating schedule that enqueued a
// task.
type ScheduleFire struct {
	// Name is the schedule's name.
	Name string
	// Time is the tick's nominal time: the cron match (or interval step)
	// that fired, in UTC. Late or duplicated deliveries of one tick carry
	// the same Time.
	Time time.Time
	// Next is the schedule's next tick, as announced by the server.
	Next time.Time
}

// ScheduleFire returns the tick of the repeating schedule that enqueued t,
// and false when t was not enqueued by a repeating schedule.
//
// The nominal time is derived from the Nats-Schedule-Next header the server
// sets: the interval before it for "@every", the previous cron match for
// cron expressions. If that fails (a schedule written by other tools), it
// falls back to the enqueue time truncated to the second.
func (t *Task) ScheduleFire() (ScheduleFire, bool) {
	f, ok := taskmsg.FireOf(t.Headers, t.EnqueuedAt)
	return ScheduleFire(f), ok
}

// IdempotencyKey returns the task's idempotency key: a string that is the
// same for every delivery of one logical task and different between tasks.
// Pass it to external APIs that deduplicate requests (payment gateways,
// e-mail providers). It is the task ID; for a task fired by a repeating
// schedule the ID is derived from the schedule's name and the tick's
// nominal time ("cron-<name>-<YYYYMMDDThhmmssZ>"), so a tick delivered twice
// has one key.
func (t *Task) IdempotencyKey() string { return t.ID }

// IdempotencyKey returns the idempotency key ([Task.IdempotencyKey]) of the
// task a handler's ctx belongs to, or "" outside a handler. For a key per
// side effect, append the effect's name: IdempotencyKey(ctx)+"/charge".
func IdempotencyKey(ctx context.Context) string {
	if t := TaskFromContext(ctx); t != nil {
		return t.IdempotencyKey()
	}
	return ""
}
