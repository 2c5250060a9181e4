package framework

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// MaxJunkSubjects bounds [QueueStats].JunkSubjects.
const MaxJunkSubjects = 100

// isSchedule reports whether a message stored on a schedule or cron subject
// is a schedule the server fires. Anyone who may publish there can also
// store a plain message, which never fires.
func isSchedule(m jsapi.Stored) bool { return m.Header.Get(jetstream.ScheduleHeader) != "" }
