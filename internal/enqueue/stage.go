package enqueue

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/stage"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// HeaderKey carries a task's key (framework.WithKey), which a staging
// route may use to choose where the task waits.
const HeaderKey = "Jetflow-Key"

// Stage redirects msg, built with b for a task of taskType and priority p
// with ID id, to where route r says instead of its work subject (package
// fairness, through internal/stage), and returns the stream that stores
// it. l is the deployment's layout ([Router.Layout]). Only an immediate
// task with an ID, no uniqueness and no ordering key, on the first task
// partition, can be staged: what moves it later republishes it to the
// work subject of its type and priority, with its ID as the deduplication
// ID. Its errors wrap b.ErrInvalid or the route's error; msg is unchanged
// then.
func (b *Builder) Stage(r stage.Route, l streams.Layout, msg *nats.Msg, taskType string, p streams.Priority, id string) (string, error) {
	switch {
	case l.Partitions > 1:
		return "", fmt.Errorf("%w: tasks cannot be staged in a deployment with task partitions", b.ErrInvalid)
	case msg.Subject != b.Names.TaskSubject(p, taskType):
		return "", fmt.Errorf("%w: a staged task is immediate, unordered and on the first task partition (%s)", b.ErrInvalid, msg.Subject)
	case id == "" || msg.Header.Get(jetstream.MsgIDHeader) == "":
		return "", fmt.Errorf("%w: a staged task needs an ID: combine it with WithID when the client has WithDedup(false)", b.ErrInvalid)
	case msg.Header.Get(unique.HeaderKey) != "":
		return "", fmt.Errorf("%w: a staged task cannot be unique", b.ErrInvalid)
	}
	stream, subject, err := r(taskType, p.String(), msg.Header.Get(HeaderKey))
	if err != nil {
		return "", err
	}
	msg.Subject = subject
	return stream, nil
}
