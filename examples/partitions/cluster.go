package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// nodes is the number of servers of the embedded cluster.
const nodes = 3

// servers is where the run's servers are: an embedded cluster, or the
// existing ones at -url.
type servers struct {
	cluster *testutil.Cluster // nil with -url
	dir     string
	url     string
	names   []string // the embedded nodes' server names, by index
}

// startServers starts the embedded cluster and waits until it has a meta
// leader, or takes the servers at url.
func startServers(ctx context.Context, url string) (*servers, error) {
	if url != "" {
		return &servers{url: url}, nil
	}
	dir, err := os.MkdirTemp("", "jetflow-partitions-")
	if err != nil {
		return nil, err
	}
	c, err := testutil.StartCluster(nodes, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &servers{cluster: c, dir: dir}
	if err := c.WaitReady(ctx); err != nil {
		s.close()
		return nil, err
	}
	for _, n := range c.Servers() {
		s.names = append(s.names, n.Name())
	}
	return s, nil
}

func (s *servers) close() {
	if s.cluster != nil {
		s.cluster.Shutdown()
		os.RemoveAll(s.dir)
	}
}

// embedded reports whether the servers run in this process, so that one
// can be stopped.
func (s *servers) embedded() bool { return s.cluster != nil }

// describe says where the servers are.
func (s *servers) describe() string {
	if s.cluster == nil {
		return "using the NATS servers at " + s.url
	}
	return fmt.Sprintf("embedded cluster of %d nodes (%s) at %s", nodes, strings.Join(s.names, ", "), s.cluster.URL())
}

// dial connects to the servers, to the embedded node first first and to
// the others when it goes down. With -url the client library picks.
func (s *servers) dial(name string, first int, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if s.cluster == nil {
		return nats.Connect(s.url, append(base, opts...)...)
	}
	urls := s.cluster.ClientURLs()
	first %= len(urls)
	urls = append(urls[first:], urls[:first]...)
	return nats.Connect(strings.Join(urls, ","), append(append(base, nats.DontRandomize()), opts...)...)
}

// node returns the index of the embedded node named name, or -1.
func (s *servers) node(name string) int { return slices.Index(s.names, name) }

// stop shuts node i down (gracefully: it hands its leaderships over, as in
// a rolling restart) and waits until it stopped.
func (s *servers) stop(i int) { s.cluster.StopNode(i) }

// restart starts node i again on its store and ports.
func (s *servers) restart(i int) error {
	_, err := s.cluster.Restart(i)
	return err
}

// waitLeaders waits until every task partition's stream has a leader other
// than avoid, and returns them.
func waitLeaders(ctx context.Context, js jetstream.JetStream, avoid string) ([]streams.PartitionLeader, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		// A request in flight when its server stops gets no answer: ask
		// again rather than wait for the run's deadline.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ls, err := streams.Leaders(actx, js, "")
		cancel()
		if err == nil && !slices.ContainsFunc(ls, func(l streams.PartitionLeader) bool {
			return l.Leader == avoid || (l.Leader == "" && len(l.Peers) > 0)
		}) {
			return ls, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("partition leaders other than %q: %w (last: %v)", avoid, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// leaderLines describes where each partition is led.
func leaderLines(ls []streams.PartitionLeader) []string {
	var out []string
	for _, l := range ls {
		if l.Leader == "" {
			out = append(out, fmt.Sprintf("partition %d %-18s on a single server", l.Partition, l.Stream))
			continue
		}
		out = append(out, fmt.Sprintf("partition %d %-18s led by %s (replicas %s)", l.Partition, l.Stream, l.Leader, strings.Join(l.Peers, ",")))
	}
	return out
}
