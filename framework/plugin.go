package framework

import (
	"log/slog"

	"github.com/nats-io/nats.go"
)

// Accessors for packages built on the client (package dlq, the CLI, the
// dashboard): they reach the client's connection and settings without
// copying them. JetStream and Names are in client.go.

// Conn returns the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Logger returns the client's logger ([WithLogger]).
func (c *Client) Logger() *slog.Logger { return c.opts.logger }

// MaxPending returns the most publishes the client keeps unacknowledged at
// once ([WithMaxPending]).
func (c *Client) MaxPending() int { return c.opts.maxPending }

// Codec returns the codec the client encodes payloads with ([WithCodec]).
func (c *Client) Codec() Codec { return c.opts.codec }
