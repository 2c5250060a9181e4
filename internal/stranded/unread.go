package stranded

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jetflow-io/jetflow/streams"
)

// Served is what [Unread] needs of a task type the worker registered.
type Served struct {
	// Priorities are the priorities the worker serves for the type.
	Priorities []streams.Priority
	// Ordered is true when the worker reads the type's ordered tasks;
	// OldOrdered when it reads them on the slot subjects of earlier
	// versions too (ordered partitions in a deployment one of them
	// created: streams.Layout.OldOrderedSubjects).
	Ordered, OldOrdered bool
}

// Unread returns the type of subject, a task or ordered-task subject of
// names, and why a worker whose registered types served looks up (ok false
// for a type it does not register) does not read it: empty when it does,
// or when the type is not its own (another worker may serve it), and for a
// subject that is neither. It is the worker's [Checker.Unread].
func Unread(names streams.Names, subject string, served func(taskType string) (s Served, ok bool)) (taskType, why string) {
	if p, typ, err := names.ParseTaskSubject(subject); err == nil {
		s, ok := served(typ)
		if !ok || slices.Contains(s.Priorities, p) {
			return typ, ""
		}
		list := make([]string, len(s.Priorities))
		for i, q := range s.Priorities {
			list[i] = q.String()
		}
		return typ, fmt.Sprintf("tasks of priority %s, which no worker serves: this worker serves %s of the type (framework.WithServedPriorities)",
			p, strings.Join(list, ", "))
	}
	if typ, slot, err := names.ParseOrderedSubject(subject); err == nil {
		s, ok := served(typ)
		switch {
		case ok && !s.Ordered:
			return typ, "ordered tasks (framework.Ordered), which no worker reads: register the type with framework.WithOrdering"
		case ok && !s.OldOrdered && subject == names.LegacyOrderedSubject(typ, slot):
			return typ, "ordered tasks on the slot subject of an earlier version, which workers read only in a deployment such a version created (and lanes never): upgrade the producer that published them"
		}
		return typ, ""
	}
	return "", ""
}
