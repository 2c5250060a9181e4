package topology

import (
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// DeadLetterTopology returns the names and subjects the dead-letter
// machinery works on, derived from n. It is for jetflow's own packages
// (framework, dlq, inspect): its type is internal.
func DeadLetterTopology(n streams.Names) deadletter.Topology {
	return deadletter.Topology{
		TaskStream: n.TaskStream(), DLQStream: n.DLQStream(), AdvisoryStream: n.AdvisoryStream(),
		ErrorsBucket: n.ErrorsBucket(), TaskWildcard: n.TaskWildcard(), OrderedWildcard: n.OrderedWildcard(),
		DLQSubject: n.DLQSubject,
		ErrorKeys:  errorKeys(n),
		Work: func(subject string) (string, string, string, bool) {
			p, typ, err := n.ParseTaskSubject(subject)
			if err != nil {
				return "", "", "", false
			}
			return typ, p.String(), n.ConsumerName(typ, p), true
		},
		Ordered: func(subject string) (string, bool) {
			typ, _, err := n.ParseOrderedSubject(subject)
			return typ, err == nil
		},
		ReadsSlot: func(subject, consumer string) bool {
			if readsBits(n, subject, consumer) {
				return true
			}
			typ, slot, err := n.ParseOrderedSubject(subject)
			if err != nil {
				return false
			}
			for partitions := 1; partitions <= streamdefs.OrderedSlots; partitions *= 2 {
				if n.OrderedConsumerName(typ, partitions, slot%partitions) == consumer ||
					n.LaneConsumerName(typ, partitions, slot%partitions) == consumer {
					return true
				}
			}
			return false
		},
	}
}

// errorKeys is the prefix of partition n's keys in the errors bucket: its
// stream sequences overlap the other partitions'.
func errorKeys(n streams.Names) string {
	if n.PartitionIndex() == 0 {
		return ""
	}
	return "p" + strconv.Itoa(n.PartitionIndex()) + "."
}

// readsBits reports whether filter is the bits filter of an ordered type's
// partition or lane ([streams.Names.OrderedFilter]) and consumer the
// partition or lane consumer that reads it.
func readsBits(n streams.Names, filter, consumer string) bool {
	rest, ok := strings.CutPrefix(filter, strings.TrimSuffix(n.OrderedWildcard(), ">"))
	if !ok {
		return false
	}
	typ, bits, ok := strings.Cut(rest, ".K")
	if !ok || streams.ValidateTaskType(typ) != nil {
		return false
	}
	bits = strings.TrimSuffix(bits, ".>")
	k, p := len(bits)/2, 0
	for i := range k {
		p |= int(bits[2*i+1]-'0') << i
	}
	parts := 1 << k
	if k > 8 || p >= parts || n.OrderedFilter(typ, parts, p) != filter {
		return false
	}
	return n.OrderedConsumerName(typ, parts, p) == consumer || n.LaneConsumerName(typ, parts, p) == consumer
}
