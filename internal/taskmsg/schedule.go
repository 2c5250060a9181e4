package taskmsg

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/cronexpr"
)

// HeaderScheduleTimeZone is the server's time zone header of a schedule
// (nats.go has no constant for it).
const HeaderScheduleTimeZone = "Nats-Schedule-Time-Zone"

// Schedule describes the message of a repeating schedule: one message per
// schedule on its subject, from which the stream leader publishes a copy to
// Target at every tick. Its fields are validated by the caller.
type Schedule struct {
	Name    string // the schedule's name
	Subject string // "<prefix>.cron.<name>"
	Spec    string // normalised expression (cronexpr)
	Zone    string // IANA zone, or ""
	Target  string // the work subject of the tasks it fires
	// Encoding is the payload codec's name, "" for JSON; Data the payload.
	Encoding string
	Data     []byte
	// Headers are custom headers copied onto every task.
	Headers map[string]string
}

// BuildSchedule returns the message of s and the fingerprint of its
// definition, also set as [HeaderScheduleHash], so that registering an
// identical definition again changes nothing.
func BuildSchedule(s Schedule) (*nats.Msg, string) {
	hdr := make(nats.Header, 8+len(s.Headers))
	keys := make([]string, 0, len(s.Headers))
	for k := range s.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hdr.Set(k, s.Headers[k])
	}
	hdr.Set(jetstream.ScheduleHeader, s.Spec)
	hdr.Set(jetstream.ScheduleTargetHeader, s.Target)
	hdr.Set(HeaderSchedule, s.Name)
	hdr.Set(HeaderScheduleSpec, s.Spec)
	if s.Zone != "" {
		hdr.Set(HeaderScheduleTimeZone, s.Zone)
		hdr.Set(HeaderScheduleZone, s.Zone)
	}
	if s.Encoding != "" {
		hdr.Set(HeaderEncoding, s.Encoding)
	}
	// The fingerprint covers everything a fired task carries.
	h := sha256.New()
	for _, part := range []string{s.Spec, s.Zone, s.Target, s.Encoding, string(s.Data)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	for _, k := range keys {
		h.Write([]byte(hdr.Get(k)))
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	hash := hex.EncodeToString(h.Sum(nil)[:16])
	hdr.Set(HeaderScheduleHash, hash)
	return &nats.Msg{Subject: s.Subject, Header: hdr, Data: s.Data}, hash
}

// LoadZone loads an IANA zone, refusing "Local" (which would mean the
// server's zone, not the caller's).
func LoadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New(`time zone "Local" is ambiguous between client and server; name the zone, for example "Europe/Paris"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as \"America/New_York\"): %w", name, err)
	}
	return loc, nil
}

// NextFire computes a schedule's next fire time after now, as the server
// does: an "@every d" schedule stored at t fires at round(t)+d, then every
// d; a cron expression fires at its next match in its zone.
func NextFire(spec, zone string, stored, now time.Time) time.Time {
	expr, err := cronexpr.Parse(spec)
	if err != nil {
		return time.Time{}
	}
	if d, ok := expr.Every(); ok {
		base := stored.Round(time.Second)
		next := base.Add(d)
		if !next.After(now) {
			k := now.Sub(base)/d + 1
			next = base.Add(k * d)
		}
		return next
	}
	loc := time.UTC
	if zone != "" {
		l, err := LoadZone(zone)
		if err != nil {
			return time.Time{}
		}
		loc = l
	}
	return expr.Next(now, loc)
}
