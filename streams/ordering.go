package streams

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// Ordered tasks: a task with an ordering key is published to one of
// streamdefs.OrderedSlots slot subjects of its type, chosen by a hash of the
// key: "<prefix>.ord.<type>.K.<b0>.<b1>…<b7>", the slot's eight bits as
// tokens, least significant first ("K" cannot be a token of a task type, so
// the two layouts below never meet). Partition p of 2^k partitions (or lane
// p of 2^k lanes) reads the slots whose k low bits are p with one wildcard
// filter, "<prefix>.ord.<type>.K.<k bits of p>.>" ([Names.OrderedFilter]):
// one filter per consumer whatever the count (decision 049).
//
// Earlier versions published to "<prefix>.ord.<type>.<slot>"; the serial
// partitions of a type still read those subjects, so that tasks enqueued
// before an upgrade run in order with the ones after it.

// orderedMarker separates an ordered subject's type from its slot bits.
const orderedMarker = "K"

// orderedBits is the number of slot bits: log2(streamdefs.OrderedSlots).
const orderedBits = 8

// OrderedSubject returns the slot subject of an ordered task type:
// "<prefix>.ord.<type>.K.<b0>…<b7>". It does not validate its arguments.
func (n Names) OrderedSubject(taskType string, slot int) string {
	var b strings.Builder
	b.Grow(len(n.base()) + len(".ord.") + len(taskType) + len(".K") + 2*orderedBits)
	b.WriteString(n.base())
	b.WriteString(".ord.")
	b.WriteString(taskType)
	b.WriteString("." + orderedMarker)
	for i := range orderedBits {
		b.WriteByte('.')
		b.WriteByte('0' + byte(slot>>i&1))
	}
	return b.String()
}

// LegacyOrderedSubject returns the slot subject earlier versions published
// an ordered task to: "<prefix>.ord.<type>.<slot>". It does not validate
// its arguments.
func (n Names) LegacyOrderedSubject(taskType string, slot int) string {
	return n.base() + ".ord." + taskType + "." + strconv.Itoa(slot)
}

// OrderedFilter returns the one filter subject of partition p of a count of
// partitions (a power of two up to streamdefs.OrderedSlots) of an ordered
// type: the slots whose low bits are p. It does not validate its
// arguments.
func (n Names) OrderedFilter(taskType string, partitions, p int) string {
	s := n.base() + ".ord." + taskType + "." + orderedMarker
	i := 0
	for ; 1<<i < partitions; i++ {
		s += "." + strconv.Itoa(p>>i&1)
	}
	if i == orderedBits {
		return s // every bit: one slot
	}
	return s + ".>"
}

// OrderedWildcard returns the subject matching every slot subject:
// "<prefix>.ord.>".
func (n Names) OrderedWildcard() string { return n.base() + ".ord.>" }

// ParseOrderedSubject splits a slot subject, of either layout, into its
// task type and slot. It is the inverse of [Names.OrderedSubject] and
// [Names.LegacyOrderedSubject] and validates both parts.
func (n Names) ParseOrderedSubject(subject string) (string, int, error) {
	rest, _, ok := n.cut(subject)
	if ok {
		rest, ok = strings.CutPrefix(rest, "ord.")
	}
	if !ok {
		return "", 0, fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.base()+".ord.")
	}
	var taskType string
	slot := 0
	if typ, bits, ok := strings.Cut(rest, "."+orderedMarker+"."); ok {
		if len(bits) != 2*orderedBits-1 {
			return "", 0, fmt.Errorf("%w: %q: want %d slot bits after %q", ErrInvalidSubject, subject, orderedBits, orderedMarker)
		}
		for i := range orderedBits {
			c := bits[2*i]
			if (c != '0' && c != '1') || (i > 0 && bits[2*i-1] != '.') {
				return "", 0, fmt.Errorf("%w: %q: slot bit %d is not 0 or 1", ErrInvalidSubject, subject, i)
			}
			slot |= int(c-'0') << i
		}
		taskType = typ
	} else {
		i := strings.LastIndexByte(rest, '.')
		if i < 0 {
			return "", 0, fmt.Errorf("%w: %q has no slot", ErrInvalidSubject, subject)
		}
		var slotText string
		var err error
		taskType, slotText = rest[:i], rest[i+1:]
		slot, err = strconv.Atoi(slotText)
		if err != nil || slot < 0 || slot >= streamdefs.OrderedSlots || strconv.Itoa(slot) != slotText {
			return "", 0, fmt.Errorf("%w: %q: slot %q is not 0 to %d", ErrInvalidSubject, subject, slotText, streamdefs.OrderedSlots-1)
		}
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

// LaneConsumerName returns the durable name of lane l of lanes of an
// ordered task type, for example "orders-lane16-3".
func (n Names) LaneConsumerName(taskType string, lanes, l int) string {
	return strings.ReplaceAll(taskType, ".", "_") + "-lane" + strconv.Itoa(lanes) + "-" + strconv.Itoa(l)
}
