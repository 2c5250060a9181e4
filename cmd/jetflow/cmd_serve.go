package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

func serveCommands() []*command {
	var ui struct {
		listen     string
		readOnly   bool
		allowHosts string
	}
	var dev struct {
		store      string
		port       int
		listen     string
		noUI       bool
		allowHosts string
	}
	return []*command{
		{
			name:    "ui",
			summary: "serve the web dashboard (and /metrics) for the server -s points at",
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&ui.listen, "listen", "127.0.0.1:8233", "HTTP address to listen on")
				fs.BoolVar(&ui.readOnly, "read-only", false, "no replay, purge, pause or resume from the dashboard")
				fs.StringVar(&ui.allowHosts, "allow-host", "", "comma-separated host names the dashboard answers besides localhost, IP addresses and the --listen host")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("ui takes no arguments")
				}
				s, err := c.connect()
				if err != nil {
					return err
				}
				defer s.Close()
				return serveDashboard(ctx, c, s.nc, ui.listen, ui.readOnly, ui.allowHosts)
			},
		},
		{
			name:    "dev",
			summary: "run an embedded nats-server with JetStream (file store) and the dashboard, for local development",
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&dev.store, "store", defaultDevStore(), "JetStream store directory, kept between runs")
				fs.IntVar(&dev.port, "port", 4222, "NATS client port on 127.0.0.1 (-1: a free port)")
				fs.StringVar(&dev.listen, "listen", "127.0.0.1:8233", "dashboard HTTP address")
				fs.BoolVar(&dev.noUI, "no-ui", false, "do not serve the dashboard")
				fs.StringVar(&dev.allowHosts, "allow-host", "", "comma-separated host names the dashboard answers besides localhost, IP addresses and the --listen host")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 0 {
					return usagef("dev takes no arguments")
				}
				if err := os.MkdirAll(dev.store, 0o755); err != nil {
					return fmt.Errorf("store directory: %w", err)
				}
				port := dev.port
				if port <= 0 {
					port = server.RANDOM_PORT
				}
				srv, err := server.NewServer(&server.Options{
					ServerName: "jetflow-dev", Host: "127.0.0.1", Port: port,
					JetStream: true, StoreDir: dev.store, NoLog: true, NoSigs: true,
				})
				if err != nil {
					return fmt.Errorf("nats-server: %w", err)
				}
				go srv.Start()
				defer func() {
					srv.Shutdown()
					srv.WaitForShutdown()
				}()
				if !srv.ReadyForConnections(10 * time.Second) {
					return fmt.Errorf("nats-server did not start on 127.0.0.1:%d (is the port taken? pass --port -1)", dev.port)
				}
				url := srv.ClientURL()
				nc, err := nats.Connect(url, nats.Name("jetflow-dev"))
				if err != nil {
					return err
				}
				defer nc.Close()
				js, err := jetstream.New(nc)
				if err != nil {
					return err
				}
				cfg := streams.Config{Prefix: c.conn.prefix}
				ectx, cancel := context.WithTimeout(ctx, c.conn.timeout)
				_, err = streams.Ensure(ectx, js, cfg)
				cancel()
				if err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "nats-server %s with JetStream on %s, store %s\n\n", server.VERSION, url, dev.store)
				fmt.Fprintf(c.stdout, "Point your workers and the CLI at it:\n\n  export NATS_URL=%s\n  jetflow status\n  jetflow enqueue emails.send '{\"to\":\"you@example.com\"}'\n\n", url)
				if dev.noUI {
					fmt.Fprintln(c.stdout, "Stop with Ctrl-C.")
					<-ctx.Done()
					return nil
				}
				return serveDashboard(ctx, c, nc, dev.listen, false, dev.allowHosts)
			},
		},
	}
}

func defaultDevStore() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "jetflow", "dev")
	}
	return filepath.Join(os.TempDir(), "jetflow-dev")
}

// serveDashboard serves the dashboard on addr until ctx ends, to requests
// for the hosts hostGuard lets through.
func serveDashboard(ctx context.Context, c *cli, nc *nats.Conn, addr string, readOnly bool, allowHosts string) error {
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := dashboardHandler(nc, c.conn.prefix, readOnly, logger)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pass --listen HOST:PORT)", addr, err)
	}
	listenHost, _, _ := net.SplitHostPort(addr)
	hs := &http.Server{Handler: hostGuard(h, listenHost, allowHosts), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	host, port, _ := net.SplitHostPort(l.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	base := "http://" + net.JoinHostPort(host, port)
	mode := ""
	if readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(c.stdout, "Dashboard%s: %s/   metrics: %s/metrics\nStop with Ctrl-C.\n", mode, base, base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// hostGuard answers 403 to a request whose Host is a name other than
// localhost, the listen host and the allowed ones (comma-separated). The
// dashboard has no login: it is meant for a loopback address. A page on
// another site cannot call it (its mutations need a header a cross-origin
// request cannot send), except through DNS rebinding: its name, resolved
// again to 127.0.0.1, makes the page same-origin with the dashboard, and
// the browser then sends the page's own name as the Host. So names are
// checked; an IP address is always accepted (rebinding needs a name).
func hostGuard(h http.Handler, listenHost, allowHosts string) http.Handler {
	allowed := map[string]bool{"localhost": true}
	if listenHost != "" {
		allowed[strings.ToLower(listenHost)] = true
	}
	for _, a := range strings.Split(allowHosts, ",") {
		if a = strings.ToLower(strings.TrimSpace(a)); a != "" {
			allowed[a] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
		if net.ParseIP(host) == nil && !allowed[host] {
			http.Error(w, fmt.Sprintf("jetflow dashboard: host %q is not one it serves (start it with --allow-host %s to allow it)",
				host, host), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
