package fleet

import (
	"cmp"
	"slices"
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
