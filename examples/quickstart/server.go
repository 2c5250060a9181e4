package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/testutil"
)

// connect connects to the server at cfg.url, or starts the embedded one and
// connects to it. The returned cleanup stops an embedded server and removes
// a temporary store.
func connect(cfg config, stdout io.Writer) (*nats.Conn, string, func(), error) {
	if cfg.url != "" {
		nc, err := nats.Connect(cfg.url, nats.Name("jetflow-quickstart"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, "", nil, fmt.Errorf("connect to %s: %w", cfg.url, err)
		}
		fmt.Fprintf(stdout, "using the NATS server at %s\n", nc.ConnectedUrlRedacted())
		return nc, nc.ConnectedUrlRedacted(), func() {}, nil
	}
	srv, storeDir, cleanup, err := startServer(cfg, stdout)
	if err != nil {
		return nil, "", nil, err
	}
	url := srv.ClientURL()
	fmt.Fprintf(stdout, "nats-server %s listening on %s, store %s\n", server.VERSION, url, storeDir)
	nc, err := testutil.ConnectServer(srv, nats.Name("jetflow-quickstart"))
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("connect: %w", err)
	}
	return nc, url, cleanup, nil
}

// startServer starts the embedded nats-server. The returned cleanup stops it
// and removes a temporary store.
func startServer(cfg config, stdout io.Writer) (*server.Server, string, func(), error) {
	port := cfg.port
	if port <= 0 {
		port = server.RANDOM_PORT
	} else if !portFree(port) {
		if cfg.explicit {
			return nil, "", nil, fmt.Errorf("port %d is in use; pass -port -1 for a random free port", port)
		}
		fmt.Fprintf(stdout, "port %d is in use; listening on a random free port instead\n", port)
		port = server.RANDOM_PORT
	}
	dir := cfg.store
	removeDir := false
	if dir == "" {
		d, err := os.MkdirTemp("", "jetflow-quickstart-")
		if err != nil {
			return nil, "", nil, err
		}
		dir, removeDir = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", nil, err
	}
	srv, err := testutil.StartServer(&server.Options{
		ServerName:         "jetflow-quickstart",
		Host:               "127.0.0.1",
		Port:               port,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
		NoLog:              true,
		NoSigs:             true,
	})
	if err != nil {
		if removeDir {
			os.RemoveAll(dir)
		}
		return nil, "", nil, err
	}
	cleanup := func() {
		testutil.ShutdownServer(srv)
		if removeDir {
			os.RemoveAll(dir)
		}
	}
	return srv, dir, cleanup, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
