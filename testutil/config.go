package testutil

import (
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
)

// RunConfigServer starts an embedded nats-server from conf, the text of a
// nats-server configuration file (accounts, users, permissions, imports and
// exports), like [RunServer]: JetStream on with its store in a fresh
// directory under tb.TempDir (a jetstream block in conf is replaced), not
// listening unless an option says so, shut down when the test ends.
// Accounts that use JetStream say so in conf ("jetstream: enabled").
func RunConfigServer(tb TB, conf string, opts ...ServerOption) *Server {
	tb.Helper()
	dir := tb.TempDir()
	file := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		tb.Fatalf("testutil: write server configuration: %v", err)
	}
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		tb.Fatalf("testutil: server configuration: %v", err)
	}
	o.JetStream = true
	o.StoreDir = filepath.Join(dir, "store")
	o.DontListen, o.NoLog, o.NoSigs = true, true, true
	o.JetStreamMaxMemory, o.JetStreamMaxStore = 256<<20, 1<<30
	for _, opt := range opts {
		opt(o)
	}
	s, err := StartServer(o)
	if err != nil {
		tb.Fatalf("testutil: start nats-server: %v", err)
	}
	tb.Cleanup(func() { ShutdownServer(s) })
	return &Server{Server: s, Opts: o}
}
