package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/cronexpr"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Manager registers, reads and removes the repeating schedules of a
// client's topology. Get one with [New]. It is safe for concurrent use.
type Manager struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	codec framework.Codec
}

// New returns the schedule manager of c's topology (its prefix, see
// [framework.WithPrefix]); payloads are encoded with c's codec
// ([framework.WithCodec]).
func New(c *framework.Client) *Manager {
	return &Manager{nc: c.Conn(), js: c.JetStream(), names: c.Names(), codec: c.Codec()}
}

// maxRegisterConflicts bounds the compare-and-set retries of Register.
const maxRegisterConflicts = 8

// Register stores d, or replaces the stored schedule of the same name when
// its definition differs. Registering an identical definition again changes
// nothing and keeps the schedule's timing, so every process of an
// application may register its schedules at start-up: concurrent
// registrations leave exactly one schedule, and a tick fires one task.
// A stored schedule is identical only if everything it fires with (spec,
// zone, target, payload, headers) is d's: one changed by another tool is
// replaced. Replacing a definition restarts an "@every" interval.
//
// The definition is validated before anything is stored; errors wrap
// [ErrInvalid] and say what is wrong. Other errors:
// [framework.ErrTopologyMissing], [framework.ErrNotConnected],
// [framework.ErrPayloadTooLarge], or the context's.
func (s *Manager) Register(ctx context.Context, d Definition) (Result, error) {
	msg, hash, err := s.build(d)
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
			return 0, s.err("register", d.Name, err)
		}
		// A direct get by "next for subject" from sequence 0 finds the
		// first (and only: schedules roll up) message of the subject.
		var expect uint64
		if last != nil {
			if last.Header.Get(taskmsg.HeaderScheduleHash) == hash && sameSchedule(*last, msg) {
				return Unchanged, nil
			}
			expect = last.Seq
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		_, err = s.js.PublishMsg(ctx, msg)
		if err == nil {
			if expect == 0 {
				return Created, nil
			}
			return Updated, nil
		}
		if !natserr.WrongLastSequence(err) {
			return 0, s.err("register", d.Name, err)
		}
		// Another process registered (or changed) it meanwhile: look again.
		if attempt+1 >= maxRegisterConflicts {
			return 0, fmt.Errorf("schedule: register %s: still conflicting after %d attempts: %w", d.Name, attempt+1, err)
		}
		if !retry.Sleep(ctx, time.Duration(attempt+1)*10*time.Millisecond) {
			return 0, fmt.Errorf("schedule: register %s: %w", d.Name, ctx.Err())
		}
	}
}

// Get returns the stored schedule called name, or an error wrapping
// [framework.ErrNotFound].
func (s *Manager) Get(ctx context.Context, name string) (Info, error) {
	if err := streams.ValidateID(name); err != nil {
		return Info{}, fmt.Errorf("%w: name: %w", ErrInvalid, err)
	}
	var info *Info
	_, err := jsapi.DirectGet(ctx, s.nc, s.names.ScheduleStream(), jsapi.GetRequest{NextFor: s.names.CronSubject(name)}, func(m jsapi.Stored) error {
		i := s.info(m, time.Now())
		info = &i
		return nil
	})
	if err != nil {
		return Info{}, s.err("get", name, err)
	}
	if info == nil {
		return Info{}, fmt.Errorf("%w: schedule %s", framework.ErrNotFound, name)
	}
	return *info, nil
}

// List returns every stored schedule, sorted by name, with its next fire
// time. It reads them with batched direct gets: one round trip per thousand
// schedules.
func (s *Manager) List(ctx context.Context) ([]Info, error) {
	var out []Info
	now := time.Now()
	err := jsapi.Scan(ctx, s.nc, s.names.ScheduleStream(), s.names.CronSubject(">"), 0, 0, time.Time{}, 1000,
		func(m jsapi.Stored) (bool, error) {
			// A plain message stored on a cron subject never fires: it is
			// junk, reported by inspect.Operator.QueueStats.
			if m.Header.Get(jetstream.ScheduleHeader) != "" {
				out = append(out, s.info(m, now))
			}
			return true, nil
		})
	if err != nil {
		return nil, s.err("list", "", err)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Remove deletes the schedule called name: it fires no more. name is one
// [Manager.Register] accepts or, for a schedule stored by other means (the
// nats CLI, an older tool), any name [Manager.List] reports, dots included,
// as long as it names a single subject: no wildcard, empty token, space or
// control character. It returns an error wrapping [framework.ErrNotFound]
// when there is no such schedule.
func (s *Manager) Remove(ctx context.Context, name string) error {
	if err := validateStoredName(name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalid, err)
	}
	n, err := jsapi.PurgeSubject(ctx, s.nc, s.names.ScheduleStream(), s.names.CronSubject(name))
	if err != nil {
		return s.err("remove", name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: schedule %s", framework.ErrNotFound, name)
	}
	return nil
}

// maxStoredName bounds the names [Manager.Remove] takes beyond the ones
// Register accepts.
const maxStoredName = 1024

// validateStoredName checks that name, as List reports a schedule stored
// without Register, names exactly one cron subject, so that purging it
// cannot purge others: Register's names, or dotted tokens none of which is
// empty, with no wildcard character ('*', '>'), space or control character.
func validateStoredName(name string) error {
	if streams.ValidateID(name) == nil {
		return nil
	}
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > maxStoredName {
		return fmt.Errorf("%d bytes, the limit is %d", len(name), maxStoredName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%q is not UTF-8", name)
	}
	for i, r := range name {
		if r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%q contains %q at byte %d: it would not name a single subject", name, r, i)
		}
	}
	if slices.Contains(strings.Split(name, "."), "") {
		return fmt.Errorf("%q has an empty token", name)
	}
	return nil
}

func (s *Manager) err(op, name string, err error) error {
	what := "schedule: " + op
	if name != "" {
		what += " " + name
	}
	return natserr.Wrap(what, err)
}

// build validates d and returns its schedule message and definition hash.
func (s *Manager) build(d Definition) (*nats.Msg, string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrInvalid, d.Name, fmt.Sprintf(format, args...))
	}
	if err := streams.ValidateID(d.Name); err != nil {
		return nil, "", fmt.Errorf("%w: name: %w", ErrInvalid, err)
	}
	if err := streams.ValidateTaskType(d.Type); err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrInvalid, d.Name, err)
	}
	if !d.Priority.Valid() {
		return nil, "", bad("priority %d is not critical, high, normal or low", uint8(d.Priority))
	}
	expr, err := cronexpr.Parse(d.Spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrInvalid, d.Name, err)
	}
	spec := expr.String()
	if d.TimeZone != "" {
		if _, every := expr.Every(); every {
			return nil, "", bad("a time zone cannot be combined with %q (the server rejects it); intervals do not depend on zones", spec)
		}
		if _, err := taskmsg.LoadZone(d.TimeZone); err != nil {
			return nil, "", bad("%v", err)
		}
	}
	data, enc, err := taskmsg.Encode(s.codec, d.Payload)
	if err != nil {
		return nil, "", fmt.Errorf("%w: schedule %s (%T): %w", framework.ErrEncode, d.Name, d.Payload, err)
	}
	for k := range d.Headers {
		if taskmsg.ReservedHeader(k) {
			return nil, "", bad("header %q is empty or reserved (Nats-*, Jetflow-*)", k)
		}
	}
	msg, hash := taskmsg.BuildSchedule(taskmsg.Schedule{Name: d.Name, Subject: s.names.CronSubject(d.Name), Spec: spec,
		Zone: d.TimeZone, Target: s.names.FiredSubject(d.Priority, d.Type), Encoding: enc, Data: data, Headers: d.Headers})
	if max := s.nc.MaxPayload(); max > 0 {
		if size := taskmsg.Size(msg) + 64; size > max {
			return nil, "", fmt.Errorf("%w: schedule %s is %d bytes with headers, the server accepts at most %d", framework.ErrPayloadTooLarge, d.Name, size, max)
		}
	}
	return msg, hash, nil
}

// sameSchedule reports whether stored holds the schedule msg stores: the
// same payload, the same values of every header msg sets, and no other
// custom header. The fingerprint header alone proves nothing: anyone who
// can publish on the schedule's subject can copy it onto a schedule that
// fires another task, which Register would then keep.
func sameSchedule(stored jsapi.Stored, msg *nats.Msg) bool {
	if !bytes.Equal(stored.Data, msg.Data) {
		return false
	}
	for k, vs := range msg.Header {
		if k != jetstream.ExpectedLastSubjSeqHeader && !slices.Equal(stored.Header[k], vs) {
			return false
		}
	}
	for k := range stored.Header {
		if _, ok := msg.Header[k]; !ok && !taskmsg.ReservedHeader(k) && k != "Status" && k != "Description" {
			return false
		}
	}
	return true
}

// info decodes a stored schedule message.
func (s *Manager) info(m jsapi.Stored, now time.Time) Info {
	h := m.Header
	info := Info{
		Name:     strings.TrimPrefix(m.Subject, s.names.CronSubject("")),
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
		if len(vs) == 0 || taskmsg.ReservedHeader(k) || k == "Status" || k == "Description" {
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
