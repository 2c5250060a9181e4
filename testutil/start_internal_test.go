package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// holdPort listens on a loopback port until the test ends and returns it.
func holdPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestStartServerFailsOnTakenPort: a server whose port is taken reports
// the server's reason at once instead of waiting out ReadyTimeout.
func TestStartServerFailsOnTakenPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(o *server.Options, port int)
	}{
		{"client", func(o *server.Options, port int) { o.Port = port }},
		{"cluster", func(o *server.Options, port int) {
			o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "jetflow", "127.0.0.1", port
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := holdPort(t)
			o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
			tc.set(o, port)
			s, err := StartServer(o)
			if err == nil {
				ShutdownServer(s)
				t.Fatal("started on a taken port")
			}
			if !errors.Is(err, ErrServerFatal) || !strings.Contains(err.Error(), fmt.Sprint(port)) {
				t.Fatalf("error %v, want ErrServerFatal naming port %d", err, port)
			}
		})
	}
}

// TestStartClusterStartsOverOnTakenPort: when a port picked for a node is
// taken before the node listens, StartCluster starts over on new ports
// and the cluster comes up.
func TestStartClusterStartsOverOnTakenPort(t *testing.T) {
	taken := holdPort(t)
	calls := 0
	reserve := func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if calls == 1 && err == nil {
			ports[1] = taken
		}
		return ports, err
	}
	c, err := startClusterRetrying(3, t.TempDir(), nil, reserve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	if calls != 2 {
		t.Errorf("ports reserved %d times, want 2", calls)
	}
	ctx, cancel := context.WithTimeout(t.Context(), DefaultClusterWait)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i, o := range c.opts {
		if o.Cluster.Port == taken {
			t.Errorf("node %d kept the taken port %d", i, taken)
		}
	}
}

// TestClusterRestartOnTakenPort: a node whose client or cluster port was
// taken while it was down comes back on new ports and rejoins the cluster.
func TestClusterRestartOnTakenPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		port func(o *server.Options) int
	}{
		{"client", func(o *server.Options) int { return o.Port }},
		{"cluster", func(o *server.Options) int { return o.Cluster.Port }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := RunCluster(t, 3)
			before := c.ClientURLs()[2]
			c.StopNode(2)
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", tc.port(c.opts[2])))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := c.Restart(2); err != nil {
				t.Fatal(err)
			}
			if tc.name == "client" && c.ClientURLs()[2] == before {
				t.Errorf("client URL still %s", before)
			}
			ctx, cancel := context.WithTimeout(t.Context(), DefaultClusterWait)
			defer cancel()
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			// The moved node's new route reaches the options the others
			// restart with.
			want := fmt.Sprint(c.opts[2].Cluster.Port)
			found := false
			for _, r := range c.opts[0].Routes {
				found = found || r.Port() == want
			}
			if !found {
				t.Errorf("node 0 restarts with routes %v, none to port %s", c.opts[0].Routes, want)
			}
		})
	}
}
