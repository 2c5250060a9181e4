package topology

// EnsureConsumerWithin is EnsureConsumer with attempts of at most per, for
// tests that lose a request.
var EnsureConsumerWithin = ensureConsumerWithin
