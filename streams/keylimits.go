package streams

// KeyLimitsBucket returns the name of the bucket of per-key limits
// (package keylimit): the slots running tasks hold, and the limits set at
// run time. "JETFLOW_KEYLIMITS" by default.
func (n Names) KeyLimitsBucket() string { return n.upper + "_KEYLIMITS" }
