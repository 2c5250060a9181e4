package streamdefs

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
)

// Default retention of the KV buckets streams.Ensure creates. A worker
// applies its own settings when it starts (framework.WithStateTTL,
// framework.WithEffectsTTL, framework.Timings.ErrorRetention).
const (
	DefaultStateTTL       = 7 * 24 * time.Hour
	DefaultEffectsTTL     = 30 * 24 * time.Hour
	DefaultErrorRetention = 72 * time.Hour
)

// UniqueMarkerTTL is how long the unique-task bucket keeps the marker of a
// reservation that expired or was released (its LimitMarkerTTL, which
// enables per-key TTLs).
const UniqueMarkerTTL = time.Minute

// BucketNames names the KV buckets of a deployment; streams.Names
// implements it.
type BucketNames interface {
	StateBucket() string
	EffectsBucket() string
	ErrorsBucket() string
	BreakerBucket() string
	UniqueBucket() string
	LimitsBucket() string
	OrderingBucket() string
	WorkersBucket() string
}

// BucketConfigs returns the KV buckets of a deployment: task state, the
// effects ledger, failed attempts (read when a task is dead-lettered),
// circuit breaker states, unique-task reservations (per-key TTLs), rate
// limits and blocked ordered tasks, and the worker registry, with the
// given storage and replica count.
func BucketConfigs(n BucketNames, storage jetstream.StorageType, replicas int) []jetstream.KeyValueConfig {
	kv := func(bucket, description string, history uint8, ttl time.Duration) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: bucket, Description: description, History: history, TTL: ttl,
			Storage: storage, Replicas: replicas}
	}
	unique := kv(n.UniqueBucket(), "jetflow unique tasks: one reservation per uniqueness key, expiring with its period", 1, 0)
	unique.LimitMarkerTTL = UniqueMarkerTTL
	workers := fleet.BucketConfig(n.WorkersBucket())
	workers.Storage, workers.Replicas = storage, replicas
	return []jetstream.KeyValueConfig{
		kv(n.StateBucket(), "jetflow task state: one record per task ID", 1, DefaultStateTTL),
		kv(n.EffectsBucket(), "jetflow effects ledger: side effects applied per task (effects.Once)", 1, DefaultEffectsTTL),
		kv(n.ErrorsBucket(), "jetflow: failed attempts of tasks, read when a task is dead-lettered", 1, DefaultErrorRetention),
		kv(n.BreakerBucket(), "jetflow circuit breakers: latest state change per dependency", 8, 0),
		unique,
		kv(n.LimitsBucket(), "jetflow rate limits: one GCRA token bucket per task type or dependency", 1, 0),
		kv(n.OrderingBucket(), "jetflow ordered tasks blocked after failing for good, by type and task ID", 1, 0),
		workers,
	}
}
