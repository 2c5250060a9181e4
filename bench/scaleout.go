package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// The scale_out figure: does a cluster drain faster with jetflow's tasks
// spread over task partitions (decision 046)? On a 2-core machine three
// servers do not get three times the CPU, so the servers are made the
// bottleneck as they are in production: each nats-server process runs in
// a cgroup of its own with a CPU quota (quotaPct of one CPU). Clients are
// spread over the servers as a fleet's are: three producers and three
// workers, each connected to a different server. The same tasks are
// drained with one partition and with three, and raw JetStream does the
// same with one work-queue stream and with three, which is the ceiling.

const (
	figScaleOut     = "scale_out"
	scaleOutServers = 3
	scaleOutQuota   = 20 // % of one CPU per server
	scaleOutType    = "scale.noop"
	cgroupCPU       = "/sys/fs/cgroup/cpu"
)

// cpuGroups are cgroup v1 CPU groups, one per server process.
type cpuGroups struct{ dirs []string }

// newCPUGroups creates n CPU groups capped at pct % of one CPU, or says
// why it cannot (no cgroup v1 CPU controller, not root).
func newCPUGroups(n, pct int) (*cpuGroups, error) {
	if fi, err := os.Stat(cgroupCPU); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("no cgroup v1 CPU controller at %s", cgroupCPU)
	}
	g := &cpuGroups{}
	for i := range n {
		dir := filepath.Join(cgroupCPU, fmt.Sprintf("jetflow-bench-%d-n%d", os.Getpid(), i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroups not writable (run as root): %w", err)
		}
		g.dirs = append(g.dirs, dir)
		if err := errors.Join(
			os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000"), 0o644),
			os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(pct*1000)), 0o644),
		); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup quota: %w", err)
		}
	}
	return g, nil
}

// add moves process pid into group i.
func (g *cpuGroups) add(i, pid int) error {
	return os.WriteFile(filepath.Join(g.dirs[i], "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// remove moves what is left in the groups back to the root group and
// deletes them.
func (g *cpuGroups) remove() {
	for _, dir := range g.dirs {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(cgroupCPU, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		_ = os.Remove(dir)
	}
}

// scaleCluster is the capped cluster and one connection per server.
type scaleCluster struct {
	conns []*nats.Conn
	jss   []jetstream.JetStream
	stop  func()
}

func runScaleOut(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	skip := func(why string) error {
		fmt.Fprintf(stdout, "RESULT %s skipped=%q\n", figScaleOut, why)
		return nil
	}
	groups, err := newCPUGroups(scaleOutServers, scaleOutQuota)
	if err != nil {
		return skip(err.Error())
	}
	defer groups.remove()
	bin, err := findNATSServer()
	if err != nil {
		return skip(err.Error())
	}
	// Each server is tagged with its name, for the placement of the
	// single-replica streams.
	servers, err := startTaggedCluster(ctx, bin, scaleOutServers, stderr)
	if err != nil {
		return err
	}
	c := &scaleCluster{stop: func() { stopAll(servers) }}
	defer func() {
		for _, nc := range c.conns {
			nc.Close()
		}
		c.stop()
	}()
	for i, s := range servers {
		if err := groups.add(i, s.cmd.Process.Pid); err != nil {
			return skip(fmt.Sprintf("cgroup: %v", err))
		}
		nc, err := nats.Connect(s.url, nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		c.conns, c.jss = append(c.conns, nc), append(c.jss, js)
	}
	// JetStream answers once the capped servers elected a meta leader.
	ready := time.Now().Add(time.Minute)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.jss[0].AccountInfo(actx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(ready) {
			return fmt.Errorf("jetstream not ready: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n := cfg.n
	if n < 3000 {
		n = 3000
	}
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "  "+format+"\n", args...) }
	type side struct{ raw, jf map[int][]float64 }
	measure := func(replicas, count int) (side, string, error) {
		s := side{raw: map[int][]float64{}, jf: map[int][]float64{}}
		var leaders string
		for r := 1; r <= cfg.runs; r++ {
			for _, parts := range []int{1, 3} {
				rate, lead, err := c.rawDrain(ctx, fmt.Sprintf("rso%d%d%d", replicas, parts, r), parts, replicas, count)
				if err != nil {
					return s, "", fmt.Errorf("raw, %d streams: %w", parts, err)
				}
				progress("%s R%d run %d/%d raw, %d streams:        %8.0f/s  leaders %s", figScaleOut, replicas, r, cfg.runs, parts, rate, lead)
				s.raw[parts] = append(s.raw[parts], rate)
				rate, lead, err = c.jetflowDrain(ctx, fmt.Sprintf("jso%d%d%d", replicas, parts, r), parts, replicas, count, cfg.concurrency)
				if err != nil {
					return s, "", fmt.Errorf("jetflow, %d partitions: %w", parts, err)
				}
				progress("%s R%d run %d/%d jetflow, %d partitions: %8.0f/s  leaders %s", figScaleOut, replicas, r, cfg.runs, parts, rate, lead)
				s.jf[parts] = append(s.jf[parts], rate)
				if parts == 3 {
					leaders, _, _ = strings.Cut(lead, " ")
				}
			}
		}
		return s, leaders, nil
	}
	r1, leaders, err := measure(1, n)
	if err != nil {
		return err
	}
	r3, _, err := measure(3, n/3)
	if err != nil {
		return err
	}
	ratio := func(m map[int][]float64) float64 { return median(m[3]) / median(m[1]) }
	fmt.Fprintf(stdout, "RESULT %s servers=%d quota_pct=%d p1_per_s=%.0f p3_per_s=%.0f ratio=%.2f raw_p1_per_s=%.0f raw_p3_per_s=%.0f raw_ratio=%.2f r3_p1_per_s=%.0f r3_p3_per_s=%.0f r3_ratio=%.2f r3_raw_ratio=%.2f leaders=%s n=%d runs=%d\n",
		figScaleOut, scaleOutServers, scaleOutQuota, median(r1.jf[1]), median(r1.jf[3]), ratio(r1.jf),
		median(r1.raw[1]), median(r1.raw[3]), ratio(r1.raw), median(r3.jf[1]), median(r3.jf[3]), ratio(r3.jf), ratio(r3.raw),
		leaders, n, cfg.runs)
	return nil
}

// leaders returns the servers leading streams, in order, for the RESULT
// line ("n1,n2,n3").
func (c *scaleCluster) leaders(ctx context.Context, names []string) string {
	var out []string
	for _, name := range names {
		leader := "?"
		if s, err := c.jss[0].Stream(ctx, name); err == nil {
			if ci := s.CachedInfo().Cluster; ci != nil {
				leader = strings.TrimPrefix(ci.Leader, "bench-")
			}
		}
		out = append(out, leader)
	}
	return strings.Join(out, ",")
}

// deleteStreams deletes streams, ignoring errors: each run starts on
// streams of its own, and what a finished run leaves must not cost the
// next one.
func (c *scaleCluster) deleteStreams(ctx context.Context, prefix string) {
	for name := range c.jss[0].StreamNames(ctx).Name() {
		if strings.HasPrefix(name, prefix) {
			_ = c.jss[0].DeleteStream(ctx, name)
		}
	}
}

// rawDrain stores count messages with task IDs over parts work-queue
// streams (async publish with nats.go's default window, one publisher per
// server), then drains them with one consumer per stream, each consumed
// from every connection with Consume's defaults and an explicit ack. It
// returns the drain rate and the streams' leaders.
func (c *scaleCluster) rawDrain(ctx context.Context, prefix string, parts, replicas, count int) (float64, string, error) {
	upper := strings.ToUpper(prefix)
	defer c.deleteStreams(context.Background(), upper)
	var names []string
	for k := range parts {
		name := fmt.Sprintf("%s_%d", upper, k)
		sc := jetstream.StreamConfig{Name: name, Subjects: []string{fmt.Sprintf("%s.%d.>", prefix, k)},
			Retention: jetstream.WorkQueuePolicy, Replicas: replicas, Storage: jetstream.FileStorage}
		if replicas == 1 {
			sc.Placement = &jetstream.Placement{Tags: []string{serverName(k)}}
		}
		if _, err := c.jss[0].CreateStream(ctx, sc); err != nil {
			return 0, "", err
		}
		if replicas > 1 {
			if err := c.lead(ctx, name, serverName(k)); err != nil {
				return 0, "", err
			}
		}
		if _, err := c.jss[0].CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			return 0, "", err
		}
		names = append(names, name)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.jss))
	for i, js := range c.jss {
		wg.Go(func() {
			for j := i; j < count; j += len(c.jss) {
				m := &nats.Msg{Subject: fmt.Sprintf("%s.%d.task", prefix, j%parts), Data: []byte("{}"),
					Header: nats.Header{jetstream.MsgIDHeader: {fmt.Sprintf("%s-%d", prefix, j)}}}
				// A window of nats.go's default size; the capped servers
				// take a while to acknowledge a full one.
				if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
					errs[i] = err
					return
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				errs[i] = ctx.Err()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, "", err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	var clock drainClock
	var ccs []jetstream.ConsumeContext
	for _, js := range c.jss {
		for _, name := range names {
			cons, err := js.Consumer(ctx, name, "c")
			if err != nil {
				return 0, "", err
			}
			cc, err := cons.Consume(func(m jetstream.Msg) {
				if m.Ack() == nil && clock.tick(done.Add(1), count) {
					close(finished)
				}
			})
			if err != nil {
				return 0, "", err
			}
			ccs = append(ccs, cc)
		}
	}
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		return 0, "", ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, "", fmt.Errorf("drained %d of %d in 5m", done.Load(), count)
	}
	return clock.rate(count), fmt.Sprintf("%s  clients %.2f cores", c.leaders(ctx, names), clock.clientCores()), nil
}

// jetflowDrain ensures a jetflow topology of parts task partitions under
// prefix, enqueues count no-op tasks (one producer per server, EnqueueMany),
// then drains them with one worker per server and returns the drain rate
// and the partitions' leaders. The workers' consumers are created before
// the clock starts, by workers that ran on the empty streams.
func (c *scaleCluster) jetflowDrain(ctx context.Context, prefix string, parts, replicas, count, concurrency int) (float64, string, error) {
	scfg := streams.Config{Prefix: prefix, Partitions: parts, Replicas: replicas, AllowTaskPurge: true}
	if replicas == 1 {
		scfg.PartitionTags = []string{serverName(0), serverName(1), serverName(2)}
	}
	defer c.deleteStreams(context.Background(), strings.ToUpper(prefix)+"_")
	defer c.deleteStreams(context.Background(), "KV_"+strings.ToUpper(prefix)+"_")
	if _, err := streams.Ensure(ctx, c.jss[0], scfg); err != nil {
		return 0, "", err
	}
	names := streams.MustNames(prefix)
	var streamNames []string
	for _, p := range names.Partitions(parts) {
		streamNames = append(streamNames, p.TaskStream())
	}
	var done atomic.Int64
	finished := make(chan struct{})
	var clock drainClock
	workers := func() ([]*framework.Worker, error) {
		var ws []*framework.Worker
		for _, nc := range c.conns {
			w, err := framework.NewWorker(nc, framework.WithPrefix(prefix), framework.WithConcurrency(concurrency),
				framework.WithDelayMover(false))
			if err != nil {
				return nil, err
			}
			w.HandleFunc(scaleOutType, func(context.Context, *framework.Task) error {
				if clock.tick(done.Add(1), count) {
					close(finished)
				}
				return nil
			})
			ws = append(ws, w)
		}
		return ws, nil
	}
	stop := func(ws []*framework.Worker) {
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = w.Shutdown(sctx)
			cancel()
		}
	}
	// Consumers first, on empty streams.
	ws, err := workers()
	if err != nil {
		return 0, "", err
	}
	for _, w := range ws {
		if err := w.Start(ctx); err != nil {
			return 0, "", err
		}
	}
	stop(ws)
	var wg sync.WaitGroup
	errs := make([]error, len(c.conns))
	for i, nc := range c.conns {
		wg.Go(func() {
			cl, err := framework.NewClient(nc, framework.WithPrefix(prefix), framework.WithStateTracking(false))
			if err != nil {
				errs[i] = err
				return
			}
			var specs []framework.TaskSpec
			for j := i; j < count; j += len(c.conns) {
				specs = append(specs, framework.TaskSpec{Type: scaleOutType, Payload: struct{}{}})
			}
			_, errs[i] = cl.EnqueueMany(ctx, specs)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, "", err
	}
	if ws, err = workers(); err != nil {
		return 0, "", err
	}
	for _, w := range ws {
		if err := w.Start(ctx); err != nil {
			return 0, "", err
		}
	}
	defer stop(ws)
	select {
	case <-finished:
	case <-ctx.Done():
		return 0, "", ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, "", fmt.Errorf("drained %d of %d in 5m", done.Load(), count)
	}
	return clock.rate(count), fmt.Sprintf("%s  clients %.2f cores", c.leaders(ctx, streamNames), clock.clientCores()), nil
}

// drainClock times a drain from its first task to its last, on both
// sides: the set-up before the first task (consumer look-ups on capped
// servers, a worker's start) is not the drain.
type drainClock struct {
	first atomic.Int64 // Unix nanoseconds
	last  atomic.Int64
	// cpu is the bench process's CPU time at the first and the last task:
	// the clients' share of the machine (the servers are processes of
	// their own).
	cpuFirst, cpuLast atomic.Int64
}

// clientCores returns how many cores the bench process (the clients) used
// during the drain.
func (c *drainClock) clientCores() float64 {
	return float64(c.cpuLast.Load()-c.cpuFirst.Load()) / float64(c.last.Load()-c.first.Load())
}

// tick counts the done-th task of count and reports whether it was the
// last.
func (c *drainClock) tick(done int64, count int) bool {
	now := time.Now().UnixNano()
	if done == 1 {
		c.first.Store(now)
		c.cpuFirst.Store(int64(processCPU()))
	}
	if done == int64(count) {
		c.last.Store(now)
		c.cpuLast.Store(int64(processCPU()))
		return true
	}
	return false
}

// rate returns tasks per second between the first and the last.
func (c *drainClock) rate(count int) float64 {
	return float64(count-1) / time.Duration(c.last.Load()-c.first.Load()).Seconds()
}

// serverName is the name (and tag) of server k of the bench's clusters.
func serverName(k int) string { return "bench-n" + strconv.Itoa(k%scaleOutServers+1) }

// startTaggedCluster is startCluster with each server tagged with its
// name (server_tags, from a configuration file).
func startTaggedCluster(ctx context.Context, binary string, n int, stderr io.Writer) ([]*standalone, error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-tags-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // read at start
	var confs [][]string
	for i := range n {
		conf := filepath.Join(dir, serverName(i)+".conf")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf("server_tags: [%q]\n", serverName(i))), 0o600); err != nil {
			return nil, err
		}
		confs = append(confs, []string{"-c", conf})
	}
	if err := checkServerVersion(ctx, binary, stderr); err != nil {
		return nil, err
	}
	return withFreshPorts(func() ([]*standalone, error) { return startClusterOnce(ctx, binary, n, confs...) })
}

// lead makes server the leader of stream, as a raw JetStream user spreads
// the leaders of replicated streams (a step-down with a preferred server).
func (c *scaleCluster) lead(ctx context.Context, stream, server string) error {
	for range 50 {
		s, err := c.jss[0].Stream(ctx, stream)
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == server {
			return nil
		}
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
			body := fmt.Sprintf(`{"placement":{"preferred":%q}}`, server)
			_, _ = c.conns[0].RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(body))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s did not become its leader", stream, server)
}
