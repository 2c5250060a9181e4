package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// byTypePrefix is the subject prefix of the deployment spread by type that
// the drain_types figure measures beside the default one.
const byTypePrefix = "bytype"

// drainByType is the jetflow drain of the drain_types figure on a
// deployment of parts task partitions spread by type (decision 047),
// ensured under its own prefix and deleted after: the consumers of k idle
// types at every priority are where workers serving them create them (in
// partition 0 and their type's partition), the drain's tasks are
// enqueued by a client that reads the layout, and one worker drains them,
// timed from Start to the n-th acknowledged task as the other drains are.
func (e *env) drainByType(ctx context.Context, k, parts int) (runResult, error) {
	upper := strings.ToUpper(byTypePrefix) + "_"
	defer e.deleteStreamsWith(context.Background(), upper, "KV_"+upper)
	cfg := streams.Config{Prefix: byTypePrefix, Partitions: parts, PartitionBy: streams.PartitionByType,
		Storage: jetstream.FileStorage, AllowTaskPurge: true}
	if _, err := streams.Ensure(ctx, e.js, cfg); err != nil {
		return runResult{}, fmt.Errorf("bench: ensure %d partitions by type: %w", parts, err)
	}
	names := streams.MustNames(byTypePrefix)
	l := streams.Layout{Partitions: parts, Ordered: parts, By: streams.PartitionByType}
	ensure := func(taskType string) error {
		for _, part := range l.ServedBy(taskType) {
			for _, p := range streams.Priorities {
				if _, err := topology.EnsureConsumer(ctx, e.js, names.Partition(part), topology.ConsumerSpec{TaskType: taskType, Priority: p}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range k {
		if err := ensure(fmt.Sprintf("%s%d", typeIdle, i)); err != nil {
			return runResult{}, err
		}
	}
	if err := ensure(typeDrain); err != nil {
		return runResult{}, err
	}
	n := e.cfg.n
	prefix := framework.WithPrefix(byTypePrefix)
	opts := append([]framework.ClientOption{prefix, framework.WithStateTracking(false)}, e.jfClientOpts...)
	if err := e.enqueueJobsClient(ctx, opts, typeDrain, n, e.payload); err != nil {
		return runResult{}, err
	}
	w, stop, _, finished, err := e.drainWorker(typeDrain, n, nil, prefix)
	if err != nil {
		return runResult{}, err
	}
	tm := startTimer()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return runResult{}, err
	}
	werr := e.waitFor(ctx, finished, "the jetflow drain spread by type")
	res := tm.result(n)
	if err := errors.Join(werr, stop()); err != nil {
		return runResult{}, err
	}
	if s := w.Stats(); s.AckErrors > 0 {
		return runResult{}, fmt.Errorf("bench: %d jetflow acks failed", s.AckErrors)
	}
	return res, nil
}

// deleteStreamsWith deletes the streams whose names start with one of
// prefixes.
func (e *env) deleteStreamsWith(ctx context.Context, prefixes ...string) {
	for name := range e.js.StreamNames(ctx).Name() {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				_ = e.js.DeleteStream(ctx, name)
				break
			}
		}
	}
}
