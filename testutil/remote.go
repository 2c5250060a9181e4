package testutil

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// Setup prepares the server a demo program runs on. With url empty it is
// [StartEmbedded]. Otherwise it connects to the existing server at url
// (opts are added to the defaults: unlimited reconnects), ensures the
// topology of cfg there and returns an Embedded whose Server is nil:
// [Embedded.Connect] then opens connections to url, and Close closes the
// connection but leaves the server and its data alone, so that the program's
// tasks, dead letters and schedules can be inspected afterwards (for example
// with the jetflow CLI).
func Setup(ctx context.Context, url string, cfg streams.Config, opts ...nats.Option) (*Embedded, error) {
	if url == "" {
		return StartEmbedded(ctx, cfg, opts...)
	}
	e := &Embedded{url: url}
	var err error
	if e.Conn, err = connectURL(url, opts...); err != nil {
		return nil, fmt.Errorf("testutil: connect to %s: %w", url, err)
	}
	if e.JetStream, err = jetstream.New(e.Conn); err != nil {
		e.Close()
		return nil, fmt.Errorf("testutil: jetstream: %w", err)
	}
	if _, err := streams.Ensure(ctx, e.JetStream, cfg); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// URL returns the URL of the existing server [Setup] connected to, or ""
// for an embedded server, which other processes cannot reach.
func (e *Embedded) URL() string { return e.url }

func connectURL(url string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	return nats.Connect(url, append(base, opts...)...)
}
