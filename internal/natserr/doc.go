// Package natserr owns the meaning of NATS and JetStream errors for jetflow:
// [Classify] sorts an error from nats.go or the server into a [Kind]
// (connection gone, topology missing, message too large, other), [Wrap]
// turns it into an error matching the corresponding jetflow sentinel, and
// [Transient] says whether retrying the same request may succeed (no
// leader for a moment, a lost acknowledgement, a cluster still forming).
//
// The sentinels ([ErrTopologyMissing], [ErrNotConnected],
// [ErrPayloadTooLarge]) are defined here and re-exported by package
// framework under the same names, so every package of the module maps
// errors the same way.
package natserr
