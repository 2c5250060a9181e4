package streams

import "github.com/nats-io/nats.go/jetstream"

// BucketConfigs is bucketConfigs, for tests that compare the buckets
// Ensure creates.
var BucketConfigs = bucketConfigs

// FiredConsumerConfig is the configuration of the schedule stream's
// sourcing consumer of c, for tests that compare it.
func FiredConsumerConfig(c Config) (jetstream.ConsumerConfig, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return firedConsumerConfig(c, n), nil
}

// Metadata keys of the first task stream, for tests that read them.
const (
	MetaPartitions        = metaPartitions
	MetaOrderedPartitions = metaOrderedPartitions
	MetaOrderedSubjects   = metaOrderedSubjects
)
