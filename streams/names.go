package streams

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Sentinel errors of the streams package.
var (
	// ErrInvalidTaskType reports a task type that is not a dotted name of
	// tokens made of [a-z0-9_-].
	ErrInvalidTaskType = errors.New("streams: invalid task type")
	// ErrInvalidPriority reports a priority outside critical, high, normal, low.
	ErrInvalidPriority = errors.New("streams: invalid priority")
	// ErrInvalidPrefix reports a subject prefix that is not a single token of
	// [a-z0-9_-].
	ErrInvalidPrefix = errors.New("streams: invalid prefix")
	// ErrInvalidSubject reports a subject that is not part of the jetflow
	// subject scheme.
	ErrInvalidSubject = errors.New("streams: subject not in the jetflow scheme")
	// ErrInvalidID reports a task ID or schedule name that cannot be used as a
	// subject token.
	ErrInvalidID = errors.New("streams: invalid id")
	// ErrDrift reports an existing resource whose configuration differs from
	// the spec in a way that cannot be updated in place.
	ErrDrift = errors.New("streams: configuration drift")
	// ErrPartitions reports an invalid partition count, or a change of the
	// count that [Ensure] does not make.
	ErrPartitions = streamdefs.ErrPartitions
)

// ValidateTaskType checks that t is a dotted name whose tokens are non-empty
// and made of lower-case ASCII letters, digits, '_' and '-', for example
// "payments.charge", at most 128 bytes. The error wraps [ErrInvalidTaskType]
// and says what is wrong.
func ValidateTaskType(t string) error {
	if t == "" {
		return fmt.Errorf("%w: empty (use a dotted name such as \"payments.charge\")", ErrInvalidTaskType)
	}
	if len(t) > streamdefs.MaxTaskTypeLen {
		return fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrInvalidTaskType, t, len(t), streamdefs.MaxTaskTypeLen)
	}
	tokStart := 0
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '.':
			if i == tokStart {
				return fmt.Errorf("%w: %q has an empty token at byte %d (tokens are separated by single dots)", ErrInvalidTaskType, t, i)
			}
			tokStart = i + 1
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: %q contains %q at byte %d (allowed: a-z 0-9 _ - and . between tokens)", ErrInvalidTaskType, t, rune(c), i)
		}
	}
	if tokStart == len(t) {
		return fmt.Errorf("%w: %q ends with a dot", ErrInvalidTaskType, t)
	}
	return nil
}

// ValidateID checks that id can be used as a single subject token: 1 to
// 128 bytes of ASCII letters, digits, '_', '-', '=' or ':'. Task IDs and
// schedule names must pass it. The error wraps [ErrInvalidID].
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if len(id) > taskmsg.MaxIDLen {
		return fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrInvalidID, id, len(id), taskmsg.MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '=', c == ':':
		default:
			return fmt.Errorf("%w: %q contains %q at byte %d (allowed: A-Z a-z 0-9 _ - = :)", ErrInvalidID, id, rune(c), i)
		}
	}
	return nil
}

func validatePrefix(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty", ErrInvalidPrefix)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q contains %q (allowed: a-z 0-9 _ -)", ErrInvalidPrefix, p, rune(c))
		}
	}
	return nil
}

// Names derives every subject, stream, consumer and bucket name from a prefix.
// The zero value is not usable; build one with [NewNames]. Names is a small
// immutable value, safe to copy and to use from many goroutines.
type Names struct {
	prefix string // e.g. "jetflow"
	upper  string // e.g. "JETFLOW"
	part   int    // the task partition these names address (partitions.go)
}

// NewNames returns the names for prefix; an empty prefix means [DefaultPrefix].
// The prefix must be a single token of [a-z0-9_-].
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return Names{}, err
	}
	// Keep '-' (valid in stream and bucket names): mapping it to '_' would
	// give "my-app" and "my_app" the same streams.
	return Names{prefix: prefix, upper: strings.ToUpper(prefix)}, nil
}

// MustNames is [NewNames] that panics on an invalid prefix. Use it with
// constant prefixes.
func MustNames(prefix string) Names {
	n, err := NewNames(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

// Prefix returns the subject prefix, for example "jetflow".
func (n Names) Prefix() string { return n.prefix }

// TaskStream returns the name of the task stream, for example "JETFLOW_TASKS".
func (n Names) TaskStream() string {
	if n.part == 0 {
		return n.upper + "_TASKS"
	}
	return n.upper + "_TASKS_P" + strconv.Itoa(n.part)
}

// DLQStream returns the name of the dead-letter stream, for example "JETFLOW_DLQ".
func (n Names) DLQStream() string { return n.upper + "_DLQ" }

// AdvisoryStream returns the name of the stream capturing the task stream's
// advisories, for example "JETFLOW_ADVISORIES".
func (n Names) AdvisoryStream() string { return n.upper + "_ADVISORIES" }

// StateBucket returns the name of the task-state KV bucket, for example "JETFLOW_STATE".
func (n Names) StateBucket() string { return n.upper + "_STATE" }

// TaskSubject returns the work subject of a task type at a priority:
// "<prefix>.task.<priority>.<type>". It does not validate its arguments.
func (n Names) TaskSubject(p Priority, taskType string) string {
	return n.base() + ".task." + p.String() + "." + taskType
}

// TaskWildcard returns the subject matching all work subjects: "<prefix>.task.>".
func (n Names) TaskWildcard() string { return n.base() + ".task.>" }

// ScheduleSubject returns the subject holding the one-shot schedule of a
// delayed task: "<prefix>.sched.<id>".
func (n Names) ScheduleSubject(id string) string { return n.prefix + ".sched." + id }

// CronSubject returns the subject holding a repeating schedule: "<prefix>.cron.<name>".
func (n Names) CronSubject(name string) string { return n.prefix + ".cron." + name }

// RunStream returns the name of the stream holding the state documents of
// workflow runs, one per run, for example "JETFLOW_RUNS".
func (n Names) RunStream() string { return n.upper + "_RUNS" }

// RunSubject returns the subject holding the state document of a workflow
// run in the run stream ([Names.RunStream]): "<prefix>.wf.<runID>". It does
// not validate its argument.
func (n Names) RunSubject(runID string) string { return n.prefix + ".wf." + runID }

// BreakerBucket returns the name of the KV bucket holding the circuit
// breaker state of each dependency, for example "JETFLOW_BREAKERS".
func (n Names) BreakerBucket() string { return n.upper + "_BREAKERS" }

// ErrorsBucket returns the name of the KV bucket where workers record failed
// attempts for the dead-letter records, for example "JETFLOW_ERRORS".
func (n Names) ErrorsBucket() string { return n.upper + "_ERRORS" }

// EffectsBucket returns the name of the KV bucket of the effects ledger
// (effects.Once), for example "JETFLOW_EFFECTS".
func (n Names) EffectsBucket() string { return n.upper + "_EFFECTS" }

// UniqueBucket returns the name of the KV bucket holding the reservations
// of unique tasks (framework.Unique), for example "JETFLOW_UNIQUE".
func (n Names) UniqueBucket() string { return n.upper + "_UNIQUE" }

// LimitsBucket returns the name of the KV bucket holding the cluster-wide
// rate limits (package ratelimit), for example "JETFLOW_LIMITS".
func (n Names) LimitsBucket() string { return n.upper + "_LIMITS" }

// DLQSubject returns the dead-letter subject of a task type: "<prefix>.dlq.<type>".
func (n Names) DLQSubject(taskType string) string { return n.prefix + ".dlq." + taskType }

// ConsumerName returns the durable consumer name for a (type, priority) pair,
// for example "payments_charge-critical" for ("payments.charge", critical).
// Dots become underscores, so "a.b" and "a_b" share a name; a worker
// detects that collision through the consumer's filter subject and refuses it.
func (n Names) ConsumerName(taskType string, p Priority) string {
	return strings.ReplaceAll(taskType, ".", "_") + "-" + p.String()
}

// ParseTaskSubject splits a work subject into its priority and task type. It
// is the inverse of [Names.TaskSubject] and validates both parts.
func (n Names) ParseTaskSubject(subject string) (Priority, string, error) {
	rest, _, ok := n.cut(subject)
	if ok {
		rest, ok = strings.CutPrefix(rest, "task.")
	}
	if !ok {
		return 0, "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.base()+".task.")
	}
	ps, taskType, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", fmt.Errorf("%w: %q has no task type after the priority", ErrInvalidSubject, subject)
	}
	p, err := ParsePriority(ps)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	if err := ValidateTaskType(taskType); err != nil {
		return 0, "", fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return p, taskType, nil
}
