package streams

// EnsureConsumerWithin is EnsureConsumer with attempts of at most per, for
// tests that lose a request.
var EnsureConsumerWithin = ensureConsumerWithin

// BucketConfigs is bucketConfigs, for tests that compare the buckets
// Ensure creates.
var BucketConfigs = bucketConfigs
