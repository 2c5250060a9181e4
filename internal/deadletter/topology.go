package deadletter

// Topology names the streams and subjects the dead-letter machinery reads
// and writes. Package framework fills it from streams.Names.
type Topology struct {
	TaskStream, DLQStream, AdvisoryStream, ErrorsBucket string
	// TaskWildcard matches every work subject, OrderedWildcard every slot
	// subject of ordered tasks.
	TaskWildcard, OrderedWildcard string
	// DLQSubject is the subject of the records of a task type.
	DLQSubject func(taskType string) string
	// Work parses a work subject into its task type, its priority's name
	// and the durable name of the consumer serving it; ok is false for any
	// other subject.
	Work func(subject string) (taskType, priority, consumer string, ok bool)
	// Ordered parses a slot subject of ordered tasks into its task type;
	// ok is false for any other subject.
	Ordered func(subject string) (taskType string, ok bool)
	// ReadsSlot reports whether consumer is the name of the partition
	// consumer that reads slot subject subject, under any partition count.
	ReadsSlot func(subject, consumer string) bool
	// ErrorKeys is the prefix of this task stream's keys in the errors
	// bucket: "" for the first task stream, "p<k>." for task partition k,
	// whose stream sequences overlap the first's.
	ErrorKeys string
}

// task returns the task type and priority of a task stored on subject, a
// work subject or a slot subject of ordered tasks (which have the normal
// priority).
func (t Topology) task(subject string) (taskType, priority string, ok bool) {
	if typ, prio, _, ok := t.Work(subject); ok {
		return typ, prio, true
	}
	if t.Ordered != nil {
		if typ, ok := t.Ordered(subject); ok {
			return typ, "normal", true
		}
	}
	return "", "", false
}
