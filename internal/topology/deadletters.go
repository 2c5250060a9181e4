package topology

import (
	"strconv"

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
			typ, slot, err := n.ParseOrderedSubject(subject)
			if err != nil {
				return false
			}
			for partitions := 1; partitions <= streamdefs.OrderedSlots; partitions *= 2 {
				if n.OrderedConsumerName(typ, partitions, slot%partitions) == consumer {
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
