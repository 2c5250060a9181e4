package lanes

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Lanes over the fleet: the server pins a lane to the first worker that
// asks, so a type's lanes would all go to the first worker to start. A
// [Plan] gives each lane to one of the live workers that serve its type
// ([Assign]: rendezvous hashing over the worker registry, at most
// ceil(lanes/workers) each). A worker pulls only its own lanes
// ([RunnerConfig].Candidate) and gives up a lane that a worker which joined
// now owns; a dead worker's lanes move once its record expires.

// PlanAge is how old a registry listing a [Plan] decides on may be.
const PlanAge = time.Second

// Plan is one worker's view of which workers serve which task types. The
// zero value is not usable: set Self and List.
type Plan struct {
	// Self is the worker's ID in the registry.
	Self string
	// List reads the registry: the IDs of the live workers serving each
	// type. An error leaves the worker pulling every lane, as the server's
	// pins alone would have it.
	List func(ctx context.Context) (map[string][]string, error)
	// Timeout bounds a List call. Default 5 s.
	Timeout time.Duration
	// Ctx, when set, ends the reads (the worker's life).
	Ctx context.Context

	mu         sync.Mutex
	read       time.Time            // when serving was read
	serving    map[string][]string  // nil: unknown
	owners     map[planKey][]string // Assign's answers for serving
	refreshing bool
}

// planKey names the lanes of a type: lanes of taskType.
type planKey struct {
	taskType string
	lanes    int
}

// Owns reports whether the worker should own lane l of the lanes of
// taskType now. A listing older than [PlanAge] is read again in the
// background; the first read waits.
func (p *Plan) Owns(taskType string, l, lanes int) bool {
	p.mu.Lock()
	if time.Since(p.read) > PlanAge && !p.refreshing {
		p.refreshing = true
		if p.read.IsZero() {
			p.mu.Unlock()
			p.refresh()
			p.mu.Lock()
		} else {
			go p.refresh()
		}
	}
	// The runner asks between deliveries: the owners are computed once
	// per listing.
	k := planKey{taskType, lanes}
	owners, ok := p.owners[k]
	if !ok {
		ids := p.serving[taskType]
		if !slices.Contains(ids, p.Self) {
			ids = append(ids[:len(ids):len(ids)], p.Self) // listed before its first record
		}
		owners = Assign(taskType, lanes, ids)
		if p.owners == nil {
			p.owners = make(map[planKey][]string)
		}
		p.owners[k] = owners
	}
	p.mu.Unlock()
	return l >= 0 && l < len(owners) && owners[l] == p.Self
}

// refresh reads the registry.
func (p *Plan) refresh() {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	parent := p.Ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	serving, err := p.List(ctx)
	if err != nil {
		serving = nil
	}
	p.mu.Lock()
	p.read, p.serving, p.owners, p.refreshing = time.Now(), serving, nil, false
	p.mu.Unlock()
}

// Assign returns the owner of each of the lanes of taskType among the
// workers ids: lane by lane, the worker with the highest hash of (type,
// lane, ID) that owns fewer than ceil(lanes/workers) lanes so far
// (rendezvous hashing with a bound), so that the lanes spread evenly and a
// worker joining or leaving moves few of them. Every worker computes the
// same owners from the same IDs, in any order. Nil when ids is empty.
func Assign(taskType string, lanes int, ids []string) []string {
	if len(ids) == 0 || lanes <= 0 {
		return nil
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	bound := (lanes + len(ids) - 1) / len(ids)
	count := make(map[string]int, len(ids))
	owners := make([]string, lanes)
	ranked := make([]ranking, len(ids))
	for l := range lanes {
		for i, id := range ids {
			ranked[i] = ranking{id: id, hash: laneHash(taskType, l, id)}
		}
		slices.SortFunc(ranked, func(a, b ranking) int {
			if a.hash != b.hash {
				if a.hash > b.hash {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		for _, r := range ranked {
			if count[r.id] < bound {
				owners[l] = r.id
				count[r.id]++
				break
			}
		}
	}
	return owners
}

// ranking is a worker's hash for one lane.
type ranking struct {
	id   string
	hash uint64
}

// laneHash is the rendezvous hash of a worker for a lane.
func laneHash(taskType string, l int, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(taskType))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(l), 10))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return h.Sum64()
}
