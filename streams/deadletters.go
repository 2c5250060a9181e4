package streams

import "github.com/jetflow-io/jetflow/internal/deadletter"

// DeadLetterTopology returns the names and subjects the dead-letter
// machinery works on, derived from n. It is for jetflow's own packages
// (framework, dlq, inspect): its type is internal.
func DeadLetterTopology(n Names) deadletter.Topology {
	return deadletter.Topology{
		TaskStream: n.TaskStream(), DLQStream: n.DLQStream(), AdvisoryStream: n.AdvisoryStream(),
		ErrorsBucket: n.ErrorsBucket(), TaskWildcard: n.TaskWildcard(), DLQSubject: n.DLQSubject,
		Work: func(subject string) (string, string, string, bool) {
			p, typ, err := n.ParseTaskSubject(subject)
			if err != nil {
				return "", "", "", false
			}
			return typ, p.String(), n.ConsumerName(typ, p), true
		},
	}
}
