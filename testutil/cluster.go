package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is an embedded JetStream cluster of several nats-servers on
// loopback, each with its own store, joined by routes. Nodes can be stopped
// and restarted on the same store and ports to test failover and recovery.
//
// Build one with [RunCluster] in tests or [StartCluster] in programs. The
// methods are safe for concurrent use, but stopping and restarting the same
// node from two goroutines at once is a test bug.
type Cluster struct {
	name string

	mu    sync.Mutex
	nodes []*Server         // nil while a node is stopped
	opts  []*server.Options // options to restart each node with
}

// DefaultClusterWait bounds how long the cluster helpers wait for a meta
// leader, a stream or consumer leader, or a node to be current (each ends as
// soon as the cluster is: the bound is for a busy machine).
const DefaultClusterWait = time.Minute

// GlobalAccount is the account that clients without configured accounts use.
// The leader helpers of [Cluster] look streams and consumers up in it.
const GlobalAccount = server.DEFAULT_GLOBAL_ACCOUNT

// RunCluster starts an n-node JetStream cluster on 127.0.0.1 with every
// node's store under tb.TempDir, waits until it has elected a meta leader
// ([Cluster.WaitJetStreamReady]) and shuts it down when the test ends. opts
// apply to every node; nodes always listen on loopback, so [WithListen] is
// implied. Use n = 3 for R3 streams.
//
// The cluster and client ports are picked at random; a node restarted with
// [Cluster.RestartNode] keeps its ports, so clients and routes reconnect by
// themselves.
func RunCluster(tb TB, n int, opts ...ServerOption) *Cluster {
	tb.Helper()
	c, err := StartCluster(n, tb.TempDir(), opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(c.Shutdown)
	ctx, cancel := context.WithTimeout(tb.Context(), DefaultClusterWait)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		tb.Fatalf("%v", err)
	}
	return c
}

// StartCluster is [RunCluster] without a test: it starts n nodes with their
// stores in sub-directories of dir (created if needed) and returns once every
// node accepts connections. Call [Cluster.WaitReady] before using JetStream,
// and [Cluster.Shutdown] when done.
func StartCluster(n int, dir string, opts ...ServerOption) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testutil: cluster of %d nodes, want ≥ 1", n)
	}
	if dir == "" {
		return nil, fmt.Errorf("testutil: cluster store directory must be set (the default is shared under %s)", os.TempDir())
	}
	// The ports are picked before the nodes start, so that every node can
	// route to every other; a socket elsewhere on the machine can take one
	// in between. The node then fails to listen: start again on new ports
	// and clean stores.
	return startClusterRetrying(n, dir, opts, freePorts)
}

// startClusterRetrying is [StartCluster] with the port reservation passed
// in, so that a test can hand it a taken port.
func startClusterRetrying(n int, dir string, opts []ServerOption, reserve func(int) ([]int, error)) (*Cluster, error) {
	var err error
	for range clusterStartAttempts {
		var c *Cluster
		c, err = startCluster(n, dir, opts, reserve)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, ErrServerFatal) {
			return nil, err
		}
		for i := range n {
			if rerr := os.RemoveAll(nodeStore(dir, i)); rerr != nil {
				return nil, fmt.Errorf("testutil: cluster store: %w", rerr)
			}
		}
	}
	return nil, err
}

// clusterStartAttempts bounds how often [StartCluster] starts over on new
// ports after a node could not listen.
const clusterStartAttempts = 3

func nodeStore(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("n%d", i+1)) }

func startCluster(n int, dir string, opts []ServerOption, reserve func(int) ([]int, error)) (*Cluster, error) {
	ports, err := reserve(n)
	if err != nil {
		return nil, err
	}
	routes := make([]*url.URL, n)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(p))}
	}
	c := &Cluster{name: "jetflow", nodes: make([]*Server, n), opts: make([]*server.Options, n)}
	for i := range n {
		store := nodeStore(dir, i)
		if err := os.MkdirAll(store, 0o700); err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("testutil: cluster store: %w", err)
		}
		o := &server.Options{
			ServerName:         fmt.Sprintf("%s-n%d", c.name, i+1),
			Host:               "127.0.0.1",
			Port:               server.RANDOM_PORT,
			JetStream:          true,
			StoreDir:           store,
			NoLog:              true,
			NoSigs:             true,
			JetStreamMaxMemory: 256 << 20,
			JetStreamMaxStore:  1 << 30,
		}
		for _, opt := range opts {
			opt(o)
		}
		// Whatever the options said, a cluster node listens on loopback
		// and routes to every node (itself included: the server skips it).
		o.DontListen = false
		if o.Host == "" {
			o.Host = "127.0.0.1"
		}
		o.Cluster.Name = c.name
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = ports[i]
		o.Routes = routes
		s, err := StartServer(o)
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("testutil: start cluster node %d (cluster port %d): %w", i, ports[i], err)
		}
		// Restart with the client port the node got, so that its URL
		// stays; the running server's options stay untouched.
		ro := o.Clone()
		ro.Port = s.Addr().(*net.TCPAddr).Port
		c.nodes[i] = &Server{Server: s, Opts: o}
		c.opts[i] = ro
	}
	return c, nil
}

// freePorts reserves n distinct loopback ports by listening on port 0, then
// releases them for the servers. Another socket can take one before its node
// listens; [StartCluster] then starts over.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testutil: reserve a cluster port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Size returns the number of nodes, running or stopped.
func (c *Cluster) Size() int { return len(c.opts) }

// Servers returns the running nodes; a stopped node is nil at its index.
func (c *Cluster) Servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.nodes...)
}

// Server returns node i, or nil while it is stopped.
func (c *Cluster) Server(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// ClientURLs returns the client URL of every node, stopped ones included (a
// restarted node keeps its URL unless another socket took its port).
func (c *Cluster) ClientURLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = fmt.Sprintf("nats://%s", net.JoinHostPort(o.Host, fmt.Sprint(o.Port)))
	}
	return urls
}

// URL returns the client URLs joined by commas, the form [nats.Connect] and
// the nats CLI's --server flag take.
func (c *Cluster) URL() string { return strings.Join(c.ClientURLs(), ",") }

// Connect opens a connection that knows every node, so it fails over when its
// node stops, and closes it when the test ends. Extra options are appended to
// jetflow's defaults (unlimited reconnects, 50 ms reconnect wait).
func (c *Cluster) Connect(tb TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := c.ConnectURL(opts...)
	if err != nil {
		tb.Fatalf("testutil: connect to cluster: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// ConnectURL is [Cluster.Connect] without a test: the caller closes the
// connection.
func (c *Cluster) ConnectURL(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	return nats.Connect(c.URL(), append(base, opts...)...)
}

// JetStream returns a JetStream context on a new connection to the cluster.
func (c *Cluster) JetStream(tb TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc := c.Connect(tb, opts...)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("testutil: jetstream: %v", err)
	}
	return nc, js
}

// StopNode shuts node i down gracefully (it hands its Raft leaderships over
// first, as a rolling restart does) and waits until it has stopped. Its store
// stays on disk for [Cluster.RestartNode]. Stopping a stopped node does
// nothing.
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		ShutdownServer(s.Server)
	}
}

// RestartNode starts node i again on the same store and ports (new ports if
// another socket took one meanwhile), stopping it first if it runs, and
// returns once it accepts connections. It does not wait for the node to
// catch up; use [Cluster.WaitReady] or [Cluster.WaitStreamCurrent] for that.
func (c *Cluster) RestartNode(tb TB, i int) *Server {
	tb.Helper()
	s, err := c.Restart(i)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return s
}

// Restart is [Cluster.RestartNode] without a test.
//
// If another socket took one of the node's ports while it was down, the
// node comes back on new ports: the other nodes learn its new route from
// the node itself, and clients its new URL from the cluster's gossip (and
// from [Cluster.ClientURLs]).
func (c *Cluster) Restart(i int) (*Server, error) {
	c.StopNode(i)
	c.mu.Lock()
	o := c.opts[i].Clone()
	c.mu.Unlock()
	s, err := StartServer(o)
	moved := errors.Is(err, ErrServerFatal)
	if moved {
		o.Port, o.Cluster.Port = server.RANDOM_PORT, server.RANDOM_PORT
		s, err = StartServer(o)
	}
	if err != nil {
		return nil, fmt.Errorf("testutil: restart cluster node %d: %w", i, err)
	}
	ns := &Server{Server: s, Opts: o}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[i] = ns
	if moved {
		c.movePorts(i, s)
	}
	return ns, nil
}

// movePorts records the new ports of node i, restarted on random ones, in
// the options every node restarts with. c.mu must be held.
func (c *Cluster) movePorts(i int, s *server.Server) {
	ro := c.opts[i].Clone()
	ro.Port = s.Addr().(*net.TCPAddr).Port
	old := ro.Cluster.Port
	ro.Cluster.Port = s.ClusterAddr().Port
	c.opts[i] = ro
	for _, o := range c.opts {
		for k, r := range o.Routes {
			if r.Port() == fmt.Sprint(old) {
				o.Routes[k] = &url.URL{Scheme: r.Scheme, Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(ro.Cluster.Port))}
			}
		}
	}
}

// Shutdown stops every running node. It is safe to call more than once.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.opts {
		wg.Add(1)
		go func() { defer wg.Done(); c.StopNode(i) }()
	}
	wg.Wait()
}

// StreamLeader waits for the stream of the global account to have a leader
// among the running nodes and returns that node's index. It fails the test
// after [DefaultClusterWait].
func (c *Cluster) StreamLeader(tb TB, stream string) int {
	tb.Helper()
	i, err := c.waitLeader(tb.Context(), func(s *Server) bool {
		return s.JetStreamIsStreamLeader(GlobalAccount, stream)
	})
	if err != nil {
		tb.Fatalf("testutil: no leader for stream %s: %v", stream, err)
	}
	return i
}

// ConsumerLeader is [Cluster.StreamLeader] for a consumer of stream.
func (c *Cluster) ConsumerLeader(tb TB, stream, consumer string) int {
	tb.Helper()
	i, err := c.waitLeader(tb.Context(), func(s *Server) bool {
		return s.JetStreamIsConsumerLeader(GlobalAccount, stream, consumer)
	})
	if err != nil {
		tb.Fatalf("testutil: no leader for consumer %s on %s: %v", consumer, stream, err)
	}
	return i
}

// WaitStreamCurrent waits until every running replica of the stream of the
// global account has caught up with its leader, and fails the test after
// [DefaultClusterWait]. Use it after [Cluster.RestartNode] before stopping
// another node, or the stream may lose its quorum.
func (c *Cluster) WaitStreamCurrent(tb TB, stream string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), DefaultClusterWait)
	defer cancel()
	err := c.poll(ctx, func() bool {
		for _, s := range c.Servers() {
			if s != nil && s.JetStreamIsStreamAssigned(GlobalAccount, stream) && !s.JetStreamIsStreamCurrent(GlobalAccount, stream) {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("testutil: replicas of stream %s not current: %v", stream, err)
	}
}

// StepDownStream asks the stream's leader to hand its leadership to another
// replica (as an operator's "nats stream cluster step-down" does) and returns
// the index of the new leader. When no other replica is healthy enough to take
// the leadership over, the replicas hold an election that the old leader may
// win again; StepDownStream then asks it again, until another replica leads or
// [DefaultClusterWait] has passed.
func (c *Cluster) StepDownStream(tb TB, stream string) int {
	tb.Helper()
	oldSrv := c.Server(c.StreamLeader(tb, stream))
	if err := oldSrv.JetStreamStepdownStream(GlobalAccount, stream); err != nil {
		tb.Fatalf("testutil: step down stream %s: %v", stream, err)
	}
	asked := time.Now()
	i, err := c.waitLeader(tb.Context(), func(s *Server) bool {
		if s != oldSrv {
			return s.JetStreamIsStreamLeader(GlobalAccount, stream)
		}
		// The old leader leads still, or again after winning the
		// election: ask again, at most twice a second.
		if time.Since(asked) > 500*time.Millisecond && s.JetStreamIsStreamLeader(GlobalAccount, stream) {
			_ = s.JetStreamStepdownStream(GlobalAccount, stream)
			asked = time.Now()
		}
		return false
	})
	if err != nil {
		tb.Fatalf("testutil: no new leader for stream %s: %v", stream, err)
	}
	return i
}

func (c *Cluster) waitLeader(ctx context.Context, isLeader func(*Server) bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultClusterWait)
	defer cancel()
	idx := -1
	err := c.poll(ctx, func() bool {
		for i, s := range c.Servers() {
			if s != nil && isLeader(s) {
				idx = i
				return true
			}
		}
		return false
	})
	return idx, err
}

// poll calls cond every 20 ms until it returns true or ctx ends.
func (c *Cluster) poll(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out: %w", ctx.Err())
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}
