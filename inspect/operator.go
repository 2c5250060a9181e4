package inspect

import (
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// Operator runs an operator's queries and controls on a client's topology.
// Get one with [New]. It is safe for concurrent use.
type Operator struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	log   *slog.Logger
	ins   *framework.Inspector // task records (FindTask)
	// client is the client New was given, for the packages that read
	// through one (keylimit, debounce).
	client *framework.Client
}

// New returns the operator's view of c's topology (its prefix, see
// [framework.WithPrefix]).
func New(c *framework.Client) *Operator {
	return &Operator{nc: c.Conn(), js: c.JetStream(), names: c.Names(), log: c.Logger(), ins: c.Inspector(), client: c}
}

// uniqueRules validates what the unique bucket holds, with the rules the
// client reserves by.
var uniqueRules = unique.Validators{
	TaskType:   streams.ValidateTaskType,
	ID:         streams.ValidateID,
	MaxTypeLen: streamdefs.MaxTaskTypeLen,
}

// orderingRules validates what ordered consumers and the ordering bucket
// hold, with the rules the worker writes them by.
func orderingRules(names streams.Names) ordering.Rules {
	return ordering.Rules{Names: names, MetaTaskType: topology.MetaTaskType, MetaPartition: topology.MetaPartition,
		TaskType: streams.ValidateTaskType, ID: streams.ValidateID, Partitions: topology.ValidatePartitions}
}
