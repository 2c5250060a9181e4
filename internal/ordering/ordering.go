package ordering

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// HeaderKey carries the ordering key of an ordered task.
const HeaderKey = "Jetflow-Ordering-Key"

// MaxKeyLen is the longest ordering key, in bytes.
const MaxKeyLen = 256

// ValidateKey accepts 1 to [MaxKeyLen] bytes of printable ASCII (space to
// '~'). Callers wrap the error with their own sentinel.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("ordering key of %d bytes, want 1 to %d", len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' {
			return fmt.Errorf("ordering key has byte %#x at %d; allowed: printable ASCII", c, i)
		}
	}
	return nil
}

// Slot returns the slot of key: an FNV-1a hash modulo slots.
func Slot(key string, slots int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(slots))
}

// Names are the topology names the package reads back.
type Names interface {
	OrderedConsumerName(taskType string, partitions, partition int) string
	ParseOrderedSubject(subject string) (taskType string, slot int, err error)
}

// Rules validate what is read back from the server; framework fills them
// from package streams.
type Rules struct {
	Names         Names
	MetaTaskType  string // consumer metadata key of the task type
	MetaPartition string // consumer metadata key of "<partition>/<partitions>"
	TaskType      func(string) error
	ID            func(string) error
	Partitions    func(int) error
}

// PartitionState is one partition of an ordered type.
type PartitionState struct {
	Type                  string
	Partition, Partitions int
	Pending               uint64
	Head                  *Head
	PausedUntil           string
}

// Head is the task a partition waits for.
type Head struct {
	TaskID, Key string
	Sequence    uint64
	Retrying    bool
}

// Partition reads the state of the partition of consumer ci, or false when
// the consumer does not look like a jetflow partition consumer. The head is
// read from stream when a message is in flight; values are validated.
func (r Rules) Partition(ctx context.Context, stream jetstream.Stream, ci *jetstream.ConsumerInfo) (PartitionState, bool) {
	typ := ci.Config.Metadata[r.MetaTaskType]
	ps, ok := ci.Config.Metadata[r.MetaPartition]
	if !ok || r.TaskType(typ) != nil {
		return PartitionState{}, false
	}
	pt, nt, ok := strings.Cut(ps, "/")
	p, err1 := strconv.Atoi(pt)
	n, err2 := strconv.Atoi(nt)
	if !ok || err1 != nil || err2 != nil || r.Partitions(n) != nil || p < 0 || p >= n ||
		ci.Name != r.Names.OrderedConsumerName(typ, n, p) {
		return PartitionState{}, false
	}
	op := PartitionState{Type: typ, Partition: p, Partitions: n, Pending: ci.NumPending}
	if ci.Paused {
		op.PausedUntil = ci.Config.PauseUntil.String()
	}
	if ci.NumAckPending > 0 {
		// One message in flight at most: the last one delivered.
		seq := ci.Delivered.Stream
		if m, err := stream.GetMsg(ctx, seq); err == nil {
			if t, slot, perr := r.Names.ParseOrderedSubject(m.Subject); perr == nil && t == typ && slot%n == p {
				head := &Head{Sequence: seq, Retrying: ci.NumRedelivered > 0}
				if k := m.Header.Get(HeaderKey); ValidateKey(k) == nil {
					head.Key = k
				}
				if id := m.Header.Get(jetstream.MsgIDHeader); r.ID(id) == nil {
					head.TaskID = id
				}
				op.Head = head
			}
		}
	}
	return op, true
}
