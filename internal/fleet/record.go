package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
	"unicode/utf8"
)

// Limits of a record. A record beyond them is refused when written and
// skipped when read.
const (
	// MaxRecordBytes bounds the encoded record.
	MaxRecordBytes = 64 << 10
	// MaxIDLen bounds a worker ID (it is the record's key).
	MaxIDLen = 64
	// MaxTextLen bounds the host and version strings.
	MaxTextLen = 256
	// MaxTypes bounds the types one record lists.
	MaxTypes = 1024
	// MaxVersions bounds the payload versions one type lists, and
	// MaxRefused the refusals one record lists.
	MaxVersions = 64
	MaxRefused  = 64
	// MaxLanes bounds the lanes one record lists, MaxLaneCount the lanes
	// of a type, and MaxPinLen a lane's pin ID.
	MaxLanes     = 1024
	MaxLaneCount = 256
	MaxPinLen    = 64
	// MaxLaneKeys bounds the keys a lane lists.
	MaxLaneKeys = 8
	// MaxPayloadVersion is the highest payload version.
	MaxPayloadVersion = 1<<16 - 1
)

// ErrInvalid is wrapped by every error of a record that breaks the rules.
var ErrInvalid = errors.New("fleet: invalid worker record")

// Record is what a worker says about itself in the registry.
type Record struct {
	// ID identifies the worker; it is the record's key.
	ID string `json:"id"`
	// Host is the worker's host name.
	Host string `json:"host"`
	// PID is the worker's process ID.
	PID int `json:"pid"`
	// Version is the worker's build or the version its program set.
	Version string `json:"version"`
	// Types are the task types the worker serves, in registration order.
	Types []Serves `json:"types"`
	// Concurrency is the worker's total slot count; Busy the slots running
	// a handler when the record was written.
	Concurrency int `json:"concurrency"`
	Busy        int `json:"busy"`
	// Started is when the worker started; Heartbeat when the record was
	// written.
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// TTLSeconds is how long the record lives after Heartbeat unless it is
	// written again.
	TTLSeconds int `json:"ttl_seconds"`
	// Refused are the payload versions the worker handed back because its
	// handler does not accept them, most recent first.
	Refused []Refusal `json:"refused,omitempty"`
	// Lanes are the lanes of ordered types the worker holds
	// (framework.Ordering.Lanes).
	Lanes []Lane `json:"lanes,omitempty"`
}

// Lane is a lane a worker holds: the server pinned it to the worker.
type Lane struct {
	Type string `json:"type"`
	// Partition is the task partition whose consumer it is; Lane and
	// Lanes locate it among the type's lanes.
	Partition int `json:"partition,omitempty"`
	Lane      int `json:"lane"`
	Lanes     int `json:"lanes"`
	// Pin is the pin ID the server gave the worker.
	Pin string `json:"pin"`
	// Open is false while the worker waits for a former owner's tasks.
	Open bool `json:"open"`
	// Running counts its tasks started and not settled, Queued those
	// waiting behind their key, Awaited those handed back and awaited
	// again, Keys the keys it holds any of.
	Running int `json:"running"`
	Queued  int `json:"queued"`
	Awaited int `json:"awaited,omitempty"`
	Keys    int `json:"keys"`
	// Busiest are the keys holding the most of its tasks, at most
	// MaxLaneKeys.
	Busiest []LaneKey `json:"busiest,omitempty"`
}

// FitLanes returns the first of lanes whose JSON takes at most budget
// bytes in all, and at most [MaxLanes]: the keys of the lanes past the
// budget are dropped first, the lanes themselves next, so that a record
// never outgrows [MaxRecordBytes] (it would not be written, and its worker
// would leave the registry).
func FitLanes(lanes []Lane, budget int) []Lane {
	size := func(l Lane) int {
		b, _ := json.Marshal(l)
		return len(b) + 1 // and its comma
	}
	out := make([]Lane, 0, min(len(lanes), MaxLanes))
	used := 0
	for _, l := range lanes {
		if len(out) == MaxLanes {
			break
		}
		if n := size(l); used+n <= budget {
			used += n
			out = append(out, l)
			continue
		}
		l.Busiest = nil
		if n := size(l); used+n <= budget {
			used += n
			out = append(out, l)
		}
	}
	return out
}

// LaneKey is a key of a lane and its tasks there: running, and queued
// behind it.
type LaneKey struct {
	Key     string `json:"key"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
}

// Refusal is a payload version of a type a worker handed back.
type Refusal struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	// Count is how many tasks the worker handed back since it started;
	// Last when it handed back the last one.
	Count uint64    `json:"count"`
	Last  time.Time `json:"last"`
}

// Serves is one task type a worker serves.
type Serves struct {
	Type string `json:"type"`
	// Priorities are the priorities it pulls, highest first.
	Priorities []string `json:"priorities"`
	// Concurrency is the type's slot count on this worker.
	Concurrency int `json:"concurrency"`
	// Versions are the payload versions its handler accepts, ascending;
	// empty means every version.
	Versions []int `json:"versions,omitempty"`
}

// Accepts reports whether the type's handler accepts payload version v.
func (s *Serves) Accepts(v int) bool {
	if len(s.Versions) == 0 {
		return true
	}
	for _, a := range s.Versions {
		if a == v {
			return true
		}
	}
	return false
}

// Rules are the validators of what a record names: task types and
// priorities come from the caller (package streams).
type Rules struct {
	TaskType func(string) error
	Priority func(string) error
	// Key validates the keys a lane lists (ordering keys).
	Key func(string) error
}

// ValidID reports whether id can be a worker ID: 1 to [MaxIDLen] bytes of
// ASCII letters, digits, '-' and '_' (a KV key token of its own, and a
// permission subject an operator can write).
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidPin reports whether pin can be a lane's pin ID in a record: 1 to
// [MaxPinLen] bytes of printable text (the server's pin IDs are NUIDs).
func ValidPin(pin string) bool { return pin != "" && len(pin) <= MaxPinLen && printable(pin) }

// printable reports whether s is valid UTF-8 without control characters,
// of at most MaxTextLen bytes.
func printable(s string) bool {
	if len(s) > MaxTextLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Check returns an error wrapping [ErrInvalid] when rec breaks a rule.
func (r Rules) Check(rec *Record) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case !ValidID(rec.ID):
		return bad("id %q", rec.ID)
	case !printable(rec.Host):
		return bad("host")
	case !printable(rec.Version):
		return bad("version")
	case rec.PID < 0:
		return bad("pid %d", rec.PID)
	case rec.Concurrency < 0 || rec.Busy < 0 || rec.Busy > rec.Concurrency:
		return bad("busy %d of %d slots", rec.Busy, rec.Concurrency)
	case rec.TTLSeconds < 1:
		return bad("ttl %ds", rec.TTLSeconds)
	case len(rec.Types) > MaxTypes:
		return bad("%d types", len(rec.Types))
	case len(rec.Refused) > MaxRefused:
		return bad("%d refusals", len(rec.Refused))
	case len(rec.Lanes) > MaxLanes:
		return bad("%d lanes", len(rec.Lanes))
	}
	for _, l := range rec.Lanes {
		if r.TaskType != nil {
			if err := r.TaskType(l.Type); err != nil {
				return fmt.Errorf("%w: lane type: %w", ErrInvalid, err)
			}
		}
		switch {
		case l.Lanes < 1 || l.Lanes > MaxLaneCount || l.Lane < 0 || l.Lane >= l.Lanes || l.Partition < 0:
			return bad("lane %d of %d, partition %d", l.Lane, l.Lanes, l.Partition)
		case !ValidPin(l.Pin):
			return bad("lane %d pin", l.Lane)
		case l.Running < 0 || l.Queued < 0 || l.Awaited < 0 || l.Keys < 0:
			return bad("lane %d counts", l.Lane)
		case len(l.Busiest) > MaxLaneKeys:
			return bad("lane %d: %d keys", l.Lane, len(l.Busiest))
		}
		for _, k := range l.Busiest {
			if r.Key != nil {
				if err := r.Key(k.Key); err != nil {
					return fmt.Errorf("%w: lane %d key: %w", ErrInvalid, l.Lane, err)
				}
			} else if k.Key == "" || !printable(k.Key) {
				return bad("lane %d key", l.Lane)
			}
			if k.Running < 0 || k.Queued < 0 {
				return bad("lane %d key counts", l.Lane)
			}
		}
	}
	for _, f := range rec.Refused {
		if r.TaskType != nil {
			if err := r.TaskType(f.Type); err != nil {
				return fmt.Errorf("%w: refused type: %w", ErrInvalid, err)
			}
		}
		if f.Version < 1 || f.Version > MaxPayloadVersion {
			return bad("refused type %s: version %d", f.Type, f.Version)
		}
	}
	for _, s := range rec.Types {
		if r.TaskType != nil {
			if err := r.TaskType(s.Type); err != nil {
				return fmt.Errorf("%w: type: %w", ErrInvalid, err)
			}
		}
		if s.Concurrency < 0 || len(s.Priorities) == 0 || len(s.Priorities) > 8 {
			return bad("type %s: %d priorities, concurrency %d", s.Type, len(s.Priorities), s.Concurrency)
		}
		if len(s.Versions) > MaxVersions {
			return bad("type %s: %d versions", s.Type, len(s.Versions))
		}
		for _, v := range s.Versions {
			if v < 1 || v > MaxPayloadVersion {
				return bad("type %s: version %d", s.Type, v)
			}
		}
		for _, p := range s.Priorities {
			if r.Priority != nil {
				if err := r.Priority(p); err != nil {
					return fmt.Errorf("%w: type %s: %w", ErrInvalid, s.Type, err)
				}
			}
		}
	}
	return nil
}

// Encode checks rec and returns its JSON.
func (r Rules) Encode(rec *Record) ([]byte, error) {
	if err := r.Check(rec); err != nil {
		return nil, err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("fleet: encode record: %w", err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalid, len(b))
	}
	return b, nil
}

// Decode parses the record stored under key and checks it: its ID must be
// key. Unknown fields are ignored (a later version may add some).
func (r Rules) Decode(key string, data []byte) (*Record, error) {
	if len(data) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalid, len(data))
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if rec.ID != key {
		return nil, fmt.Errorf("%w: id %q under key %q", ErrInvalid, rec.ID, key)
	}
	if err := r.Check(&rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// DefaultVersion describes the running program's build: its main module's
// path and version, and the VCS revision when the build recorded one, for
// example "example.com/app@v1.4.0" or "example.com/app@(devel) rev 1a2b3c4d5e6f".
// It returns "unknown" when the binary carries no build information.
func DefaultVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Path
	if v == "" {
		v = bi.Path
	}
	if bi.Main.Version != "" {
		v += "@" + bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			rev := s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
			v += " rev " + rev
		}
	}
	if !printable(v) || v == "" {
		return "unknown"
	}
	return v
}
