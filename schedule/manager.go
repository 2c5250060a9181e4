package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	log   *slog.Logger
}

// New returns the schedule manager of c's topology (its prefix, see
// [framework.WithPrefix]); payloads are encoded with c's codec
// ([framework.WithCodec]) and [Manager.Keep] logs to c's logger
// ([framework.WithLogger]).
func New(c *framework.Client) *Manager {
	return &Manager{nc: c.Conn(), js: c.JetStream(), names: c.Names(), codec: c.Codec(), log: c.Logger()}
}

// LogKeySchedule is the log attribute naming a schedule.
const LogKeySchedule = "schedule"

// Keep registers defs ([Manager.Register]) now and again every interval,
// until ctx ends, so that a schedule broken meanwhile ([Info.Broken]: the
// server dropped it because another message was stored on its subject) is
// restored within interval instead of at the application's next start.
// Each round costs one direct get per definition and writes nothing for a
// schedule that is as registered, so every replica may keep the same
// definitions. A restored schedule is logged at Warn, a failed
// registration at Error (tried again at the next round), and the end of
// each round at Debug. A schedule removed meanwhile
// ([Manager.Remove], jetflow cron rm) is created again: stop Keep before
// removing its schedules for good.
//
// Keep validates every definition first and returns an error wrapping
// [ErrInvalid] (or [framework.ErrInvalidOption] for an interval that is not
// positive) without registering any. Otherwise it blocks until ctx ends and
// returns nil.
func (s *Manager) Keep(ctx context.Context, interval time.Duration, defs ...Definition) error {
	if interval <= 0 {
		return fmt.Errorf("%w: schedule: keep interval %v, want a positive duration", framework.ErrInvalidOption, interval)
	}
	for _, d := range defs {
		if _, _, err := s.build(d); err != nil {
			return err
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, d := range defs {
			res, err := s.Register(ctx, d)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				s.log.Error("jetflow: keeping a repeating schedule failed; trying again at the next round",
					LogKeySchedule, d.Name, "error", err)
			case res == Restored:
				s.log.Warn("jetflow: repeating schedule was broken and is restored (its subject did not end with the schedule jetflow wrote)",
					LogKeySchedule, d.Name)
			}
		}
		s.log.Debug("jetflow: repeating schedules checked", "schedules", len(defs))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
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
// replaced. Only the last message on the schedule's subject counts: when it
// is not a schedule jetflow wrote ([Info.Broken]; the server dropped the
// schedule, or another tool replaced it) the definition is stored again and
// Register answers [Restored], never [Unchanged]. Registering every
// schedule at every start of the application (or keeping them with
// [Manager.Keep]) therefore repairs a broken one. Replacing a definition
// restarts an "@every" interval.
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
	for attempt := 0; ; attempt++ {
		last, err := s.last(ctx, subject)
		if err != nil {
			return 0, s.err("register", d.Name, err)
		}
		// Only the subject's last message counts: a schedule followed by
		// any other message is one the server dropped.
		var expect uint64
		res := Created
		if last != nil {
			expect = last.Seq
			switch {
			case s.problem(d.Name, *last) != "":
				res = Restored
			case last.Header.Get(taskmsg.HeaderScheduleHash) == hash && sameSchedule(*last, msg):
				return Unchanged, nil
			default:
				res = Updated
			}
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		_, err = s.js.PublishMsg(ctx, msg)
		if err == nil {
			return res, nil
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

// Get returns the stored schedule called name, broken or not
// ([Info.Broken]), or an error wrapping [framework.ErrNotFound].
func (s *Manager) Get(ctx context.Context, name string) (Info, error) {
	if err := streams.ValidateID(name); err != nil {
		return Info{}, fmt.Errorf("%w: name: %w", ErrInvalid, err)
	}
	subjects, err := s.read(ctx, s.names.CronSubject(name))
	if err != nil {
		return Info{}, s.err("get", name, err)
	}
	c := subjects[s.names.CronSubject(name)]
	if c == nil {
		return Info{}, fmt.Errorf("%w: schedule %s", framework.ErrNotFound, name)
	}
	return s.report(c, time.Now()), nil
}

// List returns every stored schedule, sorted by name, with its next fire
// time, the broken ones ([Info.Broken]) included: a cron subject holding
// anything is listed, as the schedule of the name it holds. It reads them
// with batched direct gets: one round trip per thousand messages.
func (s *Manager) List(ctx context.Context) ([]Info, error) {
	subjects, err := s.read(ctx, s.names.CronSubject(">"))
	if err != nil {
		return nil, s.err("list", "", err)
	}
	now := time.Now()
	out := make([]Info, 0, len(subjects))
	for _, c := range subjects {
		out = append(out, s.report(c, now))
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// cronSubject is what one cron subject holds: its last message, and the
// last of its messages that is a schedule.
type cronSubject struct {
	last     jsapi.Stored
	schedule *jsapi.Stored
}

// read returns what the cron subjects matching filter hold, by subject.
func (s *Manager) read(ctx context.Context, filter string) (map[string]*cronSubject, error) {
	out := make(map[string]*cronSubject)
	err := jsapi.Scan(ctx, s.nc, s.names.ScheduleStream(), filter, 0, 0, time.Time{}, 1000,
		func(m jsapi.Stored) (bool, error) {
			c := out[m.Subject]
			if c == nil {
				c = &cronSubject{}
				out[m.Subject] = c
			}
			c.last = m
			if m.Header.Get(jetstream.ScheduleHeader) != "" {
				c.schedule = &m
			}
			return true, nil
		})
	return out, err
}

// last returns the last message stored on subject, nil when there is none.
func (s *Manager) last(ctx context.Context, subject string) (*jsapi.Stored, error) {
	var last *jsapi.Stored
	_, err := jsapi.DirectGet(ctx, s.nc, s.names.ScheduleStream(), jsapi.GetRequest{MultiLastFor: []string{subject}, Batch: 1},
		func(m jsapi.Stored) error {
			last = &m
			return nil
		})
	return last, err
}

// report describes what a cron subject holds: its last schedule, broken
// when the subject's last message is not a schedule jetflow wrote.
func (s *Manager) report(c *cronSubject, now time.Time) Info {
	name := strings.TrimPrefix(c.last.Subject, s.names.CronSubject(""))
	info := Info{Name: name, Subject: c.last.Subject, Sequence: c.last.Seq, Stored: c.last.Time}
	if c.schedule != nil {
		info = s.info(*c.schedule, now)
	}
	if info.Broken = s.problem(name, c.last); info.Broken != "" {
		info.BrokenAt = c.last.Time
		if c.schedule == nil || c.schedule.Seq != c.last.Seq {
			info.Next = time.Time{} // the server dropped it
		}
	}
	return info
}

// problem returns why m, the last message on the subject of the schedule
// called name, is not a schedule jetflow wrote, or "" when it is one.
func (s *Manager) problem(name string, m jsapi.Stored) string {
	return taskmsg.CronProblem(name, m.Header, m.Data, func(target string) bool {
		_, _, err := s.names.ParseScheduleTarget(target)
		return err == nil
	})
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
