package framework

import (
	"context"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/streams"
)

// Dead letters of every task partition (deadletter.Partitions): one router
// reads the advisories of all of them and routes each on the core of its
// task's own partition; each partition's core runs the reconciler of its
// stream. Partitions added while the worker runs
// (intake.Stage.CheckPartitions) get theirs then.

// grow adds the cores of the partitions of parts, checking their streams.
func (x *dlqExt) grow(ctx context.Context, w *Worker, parts []streams.Names) error {
	for _, names := range parts {
		c := w.deadLetterCore(names)
		if _, err := c.Stream(ctx, names.TaskStream()); err != nil {
			return err
		}
		x.parts.Add(c)
	}
	return nil
}

// coreOf returns the dead-letter core of t's partition.
func (x *dlqExt) coreOf(t *Task) *deadletter.Core {
	if c := x.parts.Of(t.Stream); c != nil {
		return c
	}
	return x.core
}
