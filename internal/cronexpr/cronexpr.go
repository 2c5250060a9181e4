package cronexpr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("cronexpr: invalid schedule expression")

// MaxSpecLen is the longest accepted expression, in bytes.
const MaxSpecLen = 256

// horizon is how far Next and Prev search, like the server.
const horizonYears = 5

// Expr is a parsed schedule expression. It is immutable and safe for
// concurrent use.
type Expr struct {
	spec  string
	every time.Duration
	// bit sets of the six cron fields; bit 63 marks a "*" (or "?") field.
	sec, min, hour, dom, month, dow uint64
}

const starBit = 1 << 63

type bounds struct {
	name     string
	min, max uint
	names    map[string]uint
}

var fieldBounds = [6]bounds{
	{name: "second", min: 0, max: 59},
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: map[string]uint{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}},
	{name: "day of week", min: 0, max: 6, names: map[string]uint{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}},
}

var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// Parse parses spec. The error wraps [ErrInvalid] and names the offending
// field. A cron expression that can never fire (for example "0 0 0 30 2 *")
// is rejected, because the server rejects it too.
func Parse(spec string) (*Expr, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: empty (want for example \"0 */5 * * * *\", \"*/5 * * * *\", \"@every 30s\" or \"@hourly\")", ErrInvalid)
	}
	if len(s) > MaxSpecLen {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalid, len(s), MaxSpecLen)
	}
	if strings.HasPrefix(s, "@") {
		return parseDescriptor(s)
	}
	fields := strings.Fields(s)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("%w: %q has %d fields, want 6 (sec min hour dom month dow) or 5 (min hour dom month dow)", ErrInvalid, spec, len(fields))
	}
	e := &Expr{spec: strings.Join(fields, " ")}
	dst := [6]*uint64{&e.sec, &e.min, &e.hour, &e.dom, &e.month, &e.dow}
	for i, f := range fields {
		bits, err := parseField(f, fieldBounds[i])
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %s field %q: %v", ErrInvalid, spec, fieldBounds[i].name, f, err)
		}
		*dst[i] = bits
	}
	// Reject expressions that never fire, from a fixed reference point
	// that covers every weekday/leap-year combination within the horizon.
	if e.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC).IsZero() &&
		e.Next(time.Date(2004, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC).IsZero() {
		return nil, fmt.Errorf("%w: %q never fires", ErrInvalid, spec)
	}
	return e, nil
}

func parseDescriptor(s string) (*Expr, error) {
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		rest = strings.TrimSpace(rest)
		d, err := time.ParseDuration(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
		}
		if d < time.Second {
			return nil, fmt.Errorf("%w: %q: interval below the server's minimum of 1s", ErrInvalid, s)
		}
		if d%time.Second != 0 {
			return nil, fmt.Errorf("%w: %q: interval must be a whole number of seconds", ErrInvalid, s)
		}
		return &Expr{spec: "@every " + d.String(), every: d}, nil
	}
	if strings.HasPrefix(s, "@at") {
		return nil, fmt.Errorf("%w: %q: one-shot times are not repeating schedules (enqueue the task with a delay instead)", ErrInvalid, s)
	}
	six, ok := descriptors[s]
	if !ok {
		return nil, fmt.Errorf("%w: unknown descriptor %q (known: @every <duration>, @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)", ErrInvalid, s)
	}
	e, err := Parse(six)
	if err != nil {
		return nil, err
	}
	e.spec = s
	return e, nil
}

func parseField(f string, b bounds) (uint64, error) {
	var bits uint64
	for part := range strings.SplitSeq(f, ",") {
		if part == "" {
			return 0, errors.New("empty list element")
		}
		v, err := parseRange(part, b)
		if err != nil {
			return 0, err
		}
		bits |= v
	}
	return bits, nil
}

func parseRange(expr string, b bounds) (uint64, error) {
	rangePart, stepPart, hasStep := strings.Cut(expr, "/")
	if strings.Contains(stepPart, "/") {
		return 0, fmt.Errorf("too many slashes in %q", expr)
	}
	var start, end uint
	var extra uint64
	single := false
	if rangePart == "*" || rangePart == "?" {
		start, end, extra = b.min, b.max, starBit
	} else {
		lo, hi, isRange := strings.Cut(rangePart, "-")
		var err error
		if start, err = parseValue(lo, b); err != nil {
			return 0, err
		}
		end = start
		single = !isRange
		if isRange {
			if strings.Contains(hi, "-") {
				return 0, fmt.Errorf("too many hyphens in %q", expr)
			}
			if end, err = parseValue(hi, b); err != nil {
				return 0, err
			}
		}
	}
	step := uint(1)
	if hasStep {
		n, err := parseNumber(stepPart)
		if err != nil {
			return 0, fmt.Errorf("step: %v", err)
		}
		if n == 0 {
			return 0, fmt.Errorf("step of %q must be positive", expr)
		}
		step = n
		if single {
			end = b.max // "a/n" means "a-max/n"
		}
		if step > 1 {
			extra = 0
		}
	}
	if start < b.min {
		return 0, fmt.Errorf("%d below minimum %d", start, b.min)
	}
	if end > b.max {
		return 0, fmt.Errorf("%d above maximum %d", end, b.max)
	}
	if start > end {
		return 0, fmt.Errorf("range start %d after end %d", start, end)
	}
	var bits uint64
	for i := start; i <= end; i += step {
		bits |= 1 << i
	}
	return bits | extra, nil
}

func parseValue(s string, b bounds) (uint, error) {
	if b.names != nil {
		if v, ok := b.names[strings.ToLower(s)]; ok {
			return v, nil
		}
	}
	v, err := parseNumber(s)
	if err != nil {
		if b.name == "day of week" && s == "7" {
			return 0, errors.New("7 is not a day of week (use 0 for Sunday)")
		}
		return 0, err
	}
	if b.name == "day of week" && v == 7 {
		return 0, errors.New("7 is not a day of week (use 0 for Sunday)")
	}
	return v, nil
}

func parseNumber(s string) (uint, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	if len(s) > 4 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return uint(n), nil
}

// String returns the normalised expression sent to the server: six fields
// separated by single spaces, "@every <duration>", or the descriptor as given.
func (e *Expr) String() string { return e.spec }

// Every returns the interval of an "@every" expression and true, or 0 and
// false for a cron expression.
func (e *Expr) Every() (time.Duration, bool) { return e.every, e.every > 0 }

// Matches reports whether t, seen in loc (nil means UTC), is a fire time of
// a cron expression. It is false for "@every" expressions.
func (e *Expr) Matches(t time.Time, loc *time.Location) bool {
	if e.every > 0 {
		return false
	}
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	return t.Nanosecond() == 0 &&
		e.sec&(1<<uint(t.Second())) != 0 &&
		e.min&(1<<uint(t.Minute())) != 0 &&
		e.hour&(1<<uint(t.Hour())) != 0 &&
		e.month&(1<<uint(t.Month())) != 0 &&
		e.dayMatches(t)
}

func (e *Expr) dayMatches(t time.Time) bool {
	domOK := e.dom&(1<<uint(t.Day())) != 0
	dowOK := e.dow&(1<<uint(t.Weekday())) != 0
	if e.dom&starBit != 0 || e.dow&starBit != 0 {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// Next returns the first fire time of a cron expression strictly after
// after, evaluated in loc (nil means UTC), exactly as the server computes it
// (including its handling of daylight-saving transitions). It returns the
// zero time for "@every" expressions, whose phase only the server knows, and
// when nothing matches within five years.
func (e *Expr) Next(after time.Time, loc *time.Location) time.Time {
	if e.every > 0 {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	t := after.In(loc).Truncate(time.Second).Add(time.Second)
	reset := false // whether the lower fields were reset to their minimum
	limit := t.Year() + horizonYears
wrap:
	if t.Year() > limit {
		return time.Time{}
	}
	for e.month&(1<<uint(t.Month())) == 0 {
		if !reset {
			reset = true
			t = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc)
		}
		if t = t.AddDate(0, 1, 0); t.Month() == time.January {
			goto wrap
		}
	}
	for !e.dayMatches(t) {
		if !reset {
			reset = true
			t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
		}
		if t = t.AddDate(0, 0, 1); t.Day() == 1 {
			goto wrap
		}
	}
	for e.hour&(1<<uint(t.Hour())) == 0 {
		if !reset {
			reset = true
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, loc)
		}
		if t = t.Add(time.Hour); t.Hour() == 0 {
			goto wrap
		}
	}
	for e.min&(1<<uint(t.Minute())) == 0 {
		if !reset {
			reset = true
			t = t.Truncate(time.Minute)
		}
		if t = t.Add(time.Minute); t.Minute() == 0 {
			goto wrap
		}
	}
	for e.sec&(1<<uint(t.Second())) == 0 {
		if !reset {
			reset = true
			t = t.Truncate(time.Second)
		}
		if t = t.Add(time.Second); t.Second() == 0 {
			goto wrap
		}
	}
	return t
}

// Prev returns the last fire time of a cron expression strictly before
// before, evaluated in loc (nil means UTC). It returns the zero time for
// "@every" expressions and when nothing matches within five years.
func (e *Expr) Prev(before time.Time, loc *time.Location) time.Time {
	if e.every > 0 {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	t := before.In(loc).Truncate(time.Second)
	if !t.Before(before) {
		t = t.Add(-time.Second)
	}
	limit := t.Year() - horizonYears
	// back moves t to one second before start, which must not be after t.
	back := func(start time.Time) time.Time {
		if start.After(t) {
			start = t
		}
		return start.Add(-time.Second)
	}
	for t.Year() >= limit {
		switch {
		case e.month&(1<<uint(t.Month())) == 0:
			t = back(time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc))
		case !e.dayMatches(t):
			t = back(time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc))
		case e.hour&(1<<uint(t.Hour())) == 0:
			t = back(t.Add(-time.Duration(t.Minute())*time.Minute - time.Duration(t.Second())*time.Second))
		case e.min&(1<<uint(t.Minute())) == 0:
			t = back(t.Add(-time.Duration(t.Second()) * time.Second))
		case e.sec&(1<<uint(t.Second())) == 0:
			t = t.Add(-time.Second)
		default:
			return t
		}
	}
	return time.Time{}
}
