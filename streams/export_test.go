package streams

// BucketConfigs is bucketConfigs, for tests that compare the buckets
// Ensure creates.
var BucketConfigs = bucketConfigs
