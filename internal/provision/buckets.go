// Package provision ensures the key-value buckets of a deployment for
// framework.EnsureBuckets. It stands apart from internal/topology, which
// package access and the test helpers import, because it names the
// features that own some of the buckets (unique tasks, rate limits), whose
// own tests import those helpers.
package provision

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/ratelimit"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// EnsureBuckets ensures every key-value bucket of n: the task state and
// effects buckets with their retention ([EnsureRetention]), the unique
// reservations (markers expire after streamdefs.UniqueMarkerTTL) and the
// rate limits. It is framework.EnsureBuckets, which an operator runs once
// so that least-privilege programs (package access) find the buckets they
// may not create; it lives here so that the core names none of the
// features that use them.
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, n streams.Names, stateTTL, effectsTTL time.Duration) error {
	if err := topology.EnsureRetention(ctx, js, n, stateTTL, effectsTTL); err != nil {
		return err
	}
	if _, err := unique.EnsureBucket(ctx, js, n.UniqueBucket(), n.TaskStream(), streamdefs.UniqueMarkerTTL); err != nil {
		return err
	}
	_, err := ratelimit.EnsureBucket(ctx, js, n.LimitsBucket(), n.TaskStream())
	return err
}
