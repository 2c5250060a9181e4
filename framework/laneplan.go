package framework

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Lanes over the fleet: the server pins a lane to the first worker that
// asks, so a type's lanes would all go to the first worker to start. Each
// lane instead belongs to one of the live workers that serve its type, by
// rendezvous hashing over the worker registry: the worker whose hash of
// (type, lane, worker ID) is highest. A worker pulls only its own lanes
// (lanes.RunnerConfig.Candidate) and gives up a lane that a worker which
// joined now owns; a dead worker's lanes move once its record expires
// (three registry intervals). Without a registry listing every worker
// pulls every lane, as the server's pins alone would have it.

// lanePlanAge is how old a registry listing the plan decides on may be.
const lanePlanAge = time.Second

// lanePlan is the worker's view of which workers serve which types.
type lanePlan struct {
	w *Worker

	mu         sync.Mutex
	read       time.Time           // when serving was read
	serving    map[string][]string // type → IDs of the live workers serving it; nil: unknown
	refreshing bool
}

// owns reports whether the worker should own lane l of taskType now. A
// stale listing is read again in the background; the first read waits.
func (p *lanePlan) owns(taskType string, l int) bool {
	p.mu.Lock()
	first, stale := p.read.IsZero(), time.Since(p.read) > lanePlanAge
	if stale && !p.refreshing {
		p.refreshing = true
		if first {
			p.mu.Unlock()
			p.refresh()
			p.mu.Lock()
		} else {
			go p.refresh()
		}
	}
	ids := p.serving[taskType]
	p.mu.Unlock()
	self := p.w.opts.fleet.id
	if !slices.Contains(ids, self) {
		ids = append(ids[:len(ids):len(ids)], self) // listed before its first record
	}
	return laneOwner(taskType, l, ids) == self
}

// refresh reads the registry.
func (p *lanePlan) refresh() {
	ctx, cancel := context.WithTimeout(p.w.hardCtx, 5*time.Second)
	defer cancel()
	var serving map[string][]string
	if ls, err := fleetRules.List(ctx, p.w.js, p.w.names.WorkersBucket()); err == nil {
		serving = make(map[string][]string)
		for _, rec := range ls.Records {
			for _, s := range rec.Types {
				serving[s.Type] = append(serving[s.Type], rec.ID)
			}
		}
	}
	p.mu.Lock()
	p.read, p.serving, p.refreshing = time.Now(), serving, false
	p.mu.Unlock()
}

// laneOwner returns the worker of ids that owns lane l of taskType: the
// one with the highest hash (rendezvous hashing), so that a worker joining
// or leaving moves only the lanes it gains or had.
func laneOwner(taskType string, l int, ids []string) string {
	var best string
	var bestHash uint64
	for _, id := range ids {
		h := fnv.New64a()
		h.Write([]byte(taskType))
		h.Write([]byte{0})
		h.Write(strconv.AppendInt(nil, int64(l), 10))
		h.Write([]byte{0})
		h.Write([]byte(id))
		if v := h.Sum64(); best == "" || v > bestHash || (v == bestHash && id < best) {
			best, bestHash = id, v
		}
	}
	return best
}
