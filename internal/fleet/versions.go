package fleet

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Accepts reports whether a listed worker serving typ accepts its payload
// version v.
func (l *Listing) Accepts(typ string, v int) bool {
	for i := range l.Records {
		for j := range l.Records[i].Types {
			if s := &l.Records[i].Types[j]; s.Type == typ && s.Accepts(v) {
				return true
			}
		}
	}
	return false
}

// Unserved is a payload version of a type that live workers handed back
// and none of them accepts.
type Unserved struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	// RefusedBy are the IDs of the workers that handed it back; Count the
	// tasks they handed back, Last the latest.
	RefusedBy []string  `json:"refused_by"`
	Count     uint64    `json:"count"`
	Last      time.Time `json:"last"`
}

// Unserved returns the payload versions that a listed worker refused
// within the last recent and no listed worker accepts, sorted by type and
// version. now is the reference time of recent.
func (l *Listing) Unserved(now time.Time, recent time.Duration) []Unserved {
	type key struct {
		typ string
		v   int
	}
	found := make(map[key]*Unserved)
	for _, r := range l.Records {
		for _, f := range r.Refused {
			if now.Sub(f.Last) > recent || l.Accepts(f.Type, f.Version) {
				continue
			}
			k := key{f.Type, f.Version}
			u := found[k]
			if u == nil {
				u = &Unserved{Type: f.Type, Version: f.Version}
				found[k] = u
			}
			u.RefusedBy = append(u.RefusedBy, r.ID)
			u.Count += f.Count
			if f.Last.After(u.Last) {
				u.Last = f.Last
			}
		}
	}
	out := make([]Unserved, 0, len(found))
	for _, u := range found {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Unserved) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Version, b.Version))
	})
	return out
}

// Refusals is a worker's record of the payload versions it handed back,
// per type and version, at most MaxRefused of them (the oldest is
// forgotten first). Safe for concurrent use; the zero value is empty.
type Refusals struct {
	mu      sync.Mutex
	refused map[refusedKey]*Refusal
}

type refusedKey struct {
	typ string
	v   int
}

// Note counts a hand-back of version v of typ at now.
func (s *Refusals) Note(typ string, v int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = make(map[refusedKey]*Refusal)
	}
	k := refusedKey{typ, v}
	r := s.refused[k]
	if r == nil {
		if len(s.refused) >= MaxRefused {
			// Forget the oldest: the registry shows the recent ones.
			var oldest refusedKey
			first := true
			for k, r := range s.refused {
				if first || r.Last.Before(s.refused[oldest].Last) {
					oldest, first = k, false
				}
			}
			delete(s.refused, oldest)
		}
		r = &Refusal{Type: typ, Version: v}
		s.refused[k] = r
	}
	r.Count++
	r.Last = now.UTC()
}

// Snapshot returns the refusals, most recent first.
func (s *Refusals) Snapshot() []Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refusal, 0, len(s.refused))
	for _, r := range s.refused {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Refusal) int { return b.Last.Compare(a.Last) })
	return out
}

// Served answers, from a registry read kept for a while, whether a live
// worker accepts a payload version. The zero value is ready; safe for
// concurrent use (one read at a time).
type Served struct {
	mu       sync.Mutex
	listing  *Listing
	listedAt time.Time
}

// Accepts reports whether a listed worker accepts version v of typ. It
// reads the registry again with list when the last read is older than
// every, or than a second when it found no such worker (one that just
// started is found soon). When the registry cannot be read it returns
// false and the error.
func (s *Served) Accepts(typ string, v int, every time.Duration, list func() (*Listing, error)) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stale := s.listing == nil || time.Since(s.listedAt) > every
	if !stale && !s.listing.Accepts(typ, v) {
		stale = time.Since(s.listedAt) > time.Second
	}
	if stale {
		l, err := list()
		if err != nil {
			return false, err
		}
		s.listing, s.listedAt = l, time.Now()
	}
	return s.listing.Accepts(typ, v), nil
}
