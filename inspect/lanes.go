package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Lane is one lane of an ordered type ([framework.Ordering].Lanes) as
// [Operator.Lanes] reads it: the server's counts of its consumer and,
// from the worker registry, the worker holding it.
type Lane struct {
	Type string `json:"type"`
	// Partition is the task partition of the lane's consumer; Lane and
	// Lanes locate it among the type's lanes.
	Partition int    `json:"partition"`
	Lane      int    `json:"lane"`
	Lanes     int    `json:"lanes"`
	Consumer  string `json:"consumer"`
	// Waiting counts the lane's tasks stored and not delivered yet;
	// Delivered those its owner holds (running, or queued behind their
	// key); Redelivered those delivered more than once.
	Waiting     uint64 `json:"waiting"`
	Delivered   int    `json:"delivered"`
	Redelivered int    `json:"redelivered"`
	Paused      bool   `json:"paused,omitempty"`
	// Owner is the ID of the worker the server pinned the lane to, "" when
	// none is (no worker pulls it) or the pinned worker is not in the
	// registry; PinnedSince is when the server pinned it.
	Owner       string    `json:"owner,omitempty"`
	PinnedSince time.Time `json:"pinned_since,omitzero"`
	// The owner's figures from its last registry record (one registry
	// interval old at most): its tasks running, queued behind their key,
	// handed back and awaited; the keys it holds; and whether it starts
	// tasks (false while it waits for a former owner's tasks).
	Running int  `json:"running"`
	Queued  int  `json:"queued"`
	Awaited int  `json:"awaited,omitempty"`
	Keys    int  `json:"keys"`
	Open    bool `json:"open"`
	// Busiest are the keys holding the most of the lane's tasks, at most
	// eight, the busiest first.
	Busiest []LaneKey `json:"busiest,omitempty"`
}

// LaneKey is a key of a lane and its tasks there, as its owner last
// recorded them: running, and queued behind the key.
type LaneKey struct {
	Key     string `json:"key"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
}

// Lanes lists the lanes of the ordered types, by type, partition and
// lane, with the worker holding each. Consumers whose metadata does not
// look like a lane's are skipped; a registry that cannot be read leaves
// the owners unknown.
func (i *Operator) Lanes(ctx context.Context) ([]Lane, error) {
	layout, _, err := streams.DeployedLayout(ctx, i.js, i.names)
	if err != nil {
		return nil, fmt.Errorf("inspect: lanes: %w", err)
	}
	held := map[string]fleet.Lane{} // by pin ID
	owner := map[string]string{}
	if l, err := registryRules.List(ctx, i.js, i.names.WorkersBucket()); err == nil {
		for _, r := range l.Records {
			for _, h := range r.Lanes {
				held[h.Pin], owner[h.Pin] = h, r.ID
			}
		}
	} else if !errors.Is(err, fleet.ErrNoRegistry) {
		i.log.Debug("jetflow inspect: lane owners unknown: registry not read", "error", err)
	}
	out := []Lane{}
	for _, names := range i.names.Partitions(max(layout.Partitions, 1)) {
		stream, err := i.js.Stream(ctx, names.TaskStream())
		if err != nil {
			return nil, fmt.Errorf("inspect: lanes: %w", err)
		}
		lister := stream.ListConsumers(ctx)
		for ci := range lister.Info() {
			l, ok := laneOf(ci)
			if !ok {
				continue
			}
			l.Partition = names.PartitionIndex()
			for _, g := range ci.PriorityGroups {
				if g.Group != topology.LaneGroup || g.PinnedClientID == "" {
					continue
				}
				l.PinnedSince = g.PinnedTS
				if h, ok := held[g.PinnedClientID]; ok && h.Type == l.Type && h.Lane == l.Lane {
					l.Owner = owner[g.PinnedClientID]
					l.Running, l.Queued, l.Awaited, l.Keys, l.Open = h.Running, h.Queued, h.Awaited, h.Keys, h.Open
					for _, k := range h.Busiest {
						l.Busiest = append(l.Busiest, LaneKey(k))
					}
				}
			}
			out = append(out, l)
		}
		if err := lister.Err(); err != nil {
			return out, fmt.Errorf("inspect: lanes: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b Lane) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Lane, b.Lane))
	})
	return out, nil
}

// laneOf reads a lane consumer's info; false for a consumer that is not a
// valid lane.
func laneOf(ci *jetstream.ConsumerInfo) (Lane, bool) {
	typ := ci.Config.Metadata[topology.MetaTaskType]
	l, n, ok := topology.ParseLane(ci.Config.Metadata)
	if !ok || streams.ValidateTaskType(typ) != nil {
		return Lane{}, false
	}
	return Lane{Type: typ, Lane: l, Lanes: n, Consumer: ci.Name, Waiting: ci.NumPending, Delivered: ci.NumAckPending,
		Redelivered: ci.NumRedelivered, Paused: ci.Paused}, true
}
