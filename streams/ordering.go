package streams

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Ordered tasks: a task with an ordering key is published to one of
// streamdefs.OrderedSlots slot subjects of its type, "<prefix>.ord.<type>.<slot>",
// chosen by a hash of the key. Workers consume the slots in partitions: one
// durable consumer per partition, filtering every slot s with
// s mod partitions == partition, with MaxAckPending 1, so that the tasks of
// a partition (and so of each key) run one at a time, in stream order,
// across the cluster.

// OrderedSubject returns the slot subject of an ordered task type:
// "<prefix>.ord.<type>.<slot>". It does not validate its arguments.
func (n Names) OrderedSubject(taskType string, slot int) string {
	return n.base() + ".ord." + taskType + "." + strconv.Itoa(slot)
}

// OrderedWildcard returns the subject matching every slot subject:
// "<prefix>.ord.>".
func (n Names) OrderedWildcard() string { return n.base() + ".ord.>" }

// ParseOrderedSubject splits a slot subject into its task type and slot. It
// is the inverse of [Names.OrderedSubject] and validates both parts.
func (n Names) ParseOrderedSubject(subject string) (string, int, error) {
	rest, _, ok := n.cut(subject)
	if ok {
		rest, ok = strings.CutPrefix(rest, "ord.")
	}
	if !ok {
		return "", 0, fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.base()+".ord.")
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: %q has no slot", ErrInvalidSubject, subject)
	}
	taskType, slotText := rest[:i], rest[i+1:]
	slot, err := strconv.Atoi(slotText)
	if err != nil || slot < 0 || slot >= streamdefs.OrderedSlots || strconv.Itoa(slot) != slotText {
		return "", 0, fmt.Errorf("%w: %q: slot %q is not 0 to %d", ErrInvalidSubject, subject, slotText, streamdefs.OrderedSlots-1)
	}
	if err := ValidateTaskType(taskType); err != nil {
		return "", 0, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return taskType, slot, nil
}

// OrderingBucket returns the name of the KV bucket recording ordered tasks
// that block their key, for example "JETFLOW_ORDERING".
func (n Names) OrderingBucket() string { return n.upper + "_ORDERING" }

// OrderedConsumerName returns the durable name of partition p of
// partitions of an ordered task type, for example "orders-ord16-3".
func (n Names) OrderedConsumerName(taskType string, partitions, p int) string {
	return strings.ReplaceAll(taskType, ".", "_") + "-ord" + strconv.Itoa(partitions) + "-" + strconv.Itoa(p)
}
