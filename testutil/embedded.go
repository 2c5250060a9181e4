package testutil

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// Embedded is an in-process nats-server with JetStream and a temporary
// store, one connection to it and the jetflow topology ensured: everything a
// demo program needs before it creates clients and workers. Close releases it
// all. Tests should prefer [RunServer], which cleans up with the test.
type Embedded struct {
	// Server is the embedded server; it does not listen on the network.
	Server *server.Server
	// Conn is a connection to Server, closed by Close.
	Conn *nats.Conn
	// JetStream is a JetStream context on Conn.
	JetStream jetstream.JetStream
	dir       string
	url       string // set by Setup for an existing server; Server is nil then
}

// StartEmbedded starts an embedded server with its store in a new temporary
// directory, connects to it (opts are added to [ConnectServer]'s defaults)
// and ensures the topology of cfg with [streams.Ensure].
func StartEmbedded(ctx context.Context, cfg streams.Config, opts ...nats.Option) (_ *Embedded, err error) {
	dir, err := os.MkdirTemp("", "jetflow-embedded-")
	if err != nil {
		return nil, fmt.Errorf("testutil: store directory: %w", err)
	}
	e := &Embedded{dir: dir}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	e.Server, err = StartServer(&server.Options{
		JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true,
		JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 1 << 30,
	})
	if err != nil {
		return nil, err
	}
	if e.Conn, err = ConnectServer(e.Server, opts...); err != nil {
		return nil, fmt.Errorf("testutil: connect: %w", err)
	}
	if e.JetStream, err = jetstream.New(e.Conn); err != nil {
		return nil, fmt.Errorf("testutil: jetstream: %w", err)
	}
	if _, err := streams.Ensure(ctx, e.JetStream, cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// Connect opens another connection to the server; the caller closes it.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	if e.Server == nil {
		return connectURL(e.url, opts...)
	}
	return ConnectServer(e.Server, opts...)
}

// Close closes the connection, shuts the server down and removes its store.
func (e *Embedded) Close() {
	if e.Conn != nil {
		e.Conn.Close()
	}
	if e.Server != nil {
		ShutdownServer(e.Server)
	}
	os.RemoveAll(e.dir)
}
