package faulttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// procCluster is a NATS cluster of separate nats-server processes, so that
// a node can be killed with SIGKILL: no leadership hand-over, no flush.
type procCluster struct {
	bin    string
	names  []string
	confs  []string
	urls   []string
	procs  []*exec.Cmd
	exited []chan error
	logs   []*syncBuffer
}

// buildNATSServer builds the nats-server of the module's dependencies.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found, cannot build nats-server: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	return bin
}

// freeLoopbackPorts reserves n loopback ports by listening on port 0.
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

const procClusterConf = `server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_mem_store: 256MB, max_file_store: 1GB }
cluster { name: jetflow-proc, listen: 127.0.0.1:%d, routes: [%s] }
`

// startProcCluster starts n nats-server processes joined by routes and
// waits until JetStream answers on each. Its ports are picked before the
// processes start, so that each can route to every other; a socket elsewhere
// on the machine can take one in between. That node then exits: the cluster
// starts over on new ports.
func startProcCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	bin := buildNATSServer(t)
	const attempts = 3
	for attempt := 1; ; attempt++ {
		pc := newProcCluster(t, bin, n)
		for i := range n {
			pc.start(t, i)
		}
		if pc.waitReady(t) {
			return pc
		}
		if attempt == attempts {
			t.Fatalf("process cluster: a node could not listen on its ports in %d attempts", attempts)
		}
		for i := range pc.procs {
			pc.kill(i)
		}
	}
}

// newProcCluster writes the configuration of n nodes on freshly reserved
// ports and stores; it starts nothing.
func newProcCluster(t *testing.T, bin string, n int) *procCluster {
	t.Helper()
	pc := &procCluster{bin: bin}
	ports := freeLoopbackPorts(t, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		name := fmt.Sprintf("p%d", i+1)
		conf := filepath.Join(t.TempDir(), name+".conf")
		body := fmt.Sprintf(procClusterConf, name, ports[i], t.TempDir(), ports[n+i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		pc.names = append(pc.names, name)
		pc.confs = append(pc.confs, conf)
		pc.urls = append(pc.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		pc.procs = append(pc.procs, nil)
		pc.exited = append(pc.exited, nil)
		pc.logs = append(pc.logs, &syncBuffer{})
	}
	t.Cleanup(func() {
		for i := range pc.procs {
			pc.kill(i)
		}
		if t.Failed() {
			for i, l := range pc.logs {
				s := l.String()
				t.Logf("nats-server %s log (last 4 KiB):\n%s", pc.names[i], s[max(0, len(s)-4096):])
			}
		}
	})
	return pc
}

func (pc *procCluster) start(t *testing.T, i int) {
	t.Helper()
	cmd := exec.Command(pc.bin, "-c", pc.confs[i])
	cmd.Stdout, cmd.Stderr = pc.logs[i], pc.logs[i]
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server %s: %v", pc.names[i], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pc.procs[i], pc.exited[i] = cmd, exited
}

// kill sends SIGKILL to node i and waits for it to die.
func (pc *procCluster) kill(i int) {
	if pc.procs[i] == nil {
		return
	}
	_ = pc.procs[i].Process.Kill()
	<-pc.exited[i]
	pc.procs[i] = nil
}

func (pc *procCluster) connect(t *testing.T, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	nc, err := nats.Connect(strings.Join(pc.urls, ","), append(base, opts...)...)
	if err != nil {
		t.Fatalf("connect to process cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// waitReady waits until JetStream answers on every node. It returns false
// when a node exited because a port of its was taken, and fails the test
// when one exited for another reason.
func (pc *procCluster) waitReady(t *testing.T) bool {
	t.Helper()
	portTaken := false
	for i, u := range pc.urls {
		testutil.Wait(t, time.Minute, "JetStream ready on "+pc.names[i], func() bool {
			if pc.exitedEarly(t) {
				portTaken = true
				return true
			}
			nc, err := nats.Connect(u, nats.MaxReconnects(0))
			if err != nil {
				return false
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
			return err == nil
		})
		if portTaken {
			return false
		}
	}
	return true
}

// exitedEarly reports whether a node has exited because it could not
// listen on a port, and fails the test when one exited for another reason.
func (pc *procCluster) exitedEarly(t *testing.T) bool {
	t.Helper()
	for i, exited := range pc.exited {
		if pc.procs[i] == nil {
			continue
		}
		select {
		case err := <-exited:
			pc.procs[i] = nil
			if strings.Contains(pc.logs[i].String(), "address already in use") {
				return true
			}
			t.Fatalf("nats-server %s exited while starting: %v", pc.names[i], err)
		default:
		}
	}
	return false
}

func (pc *procCluster) index(name string) int {
	for i, n := range pc.names {
		if n == name {
			return i
		}
	}
	return -1
}

// leader waits for a leader of the stream (or of its consumer, when
// consumer is set) other than the node not, and returns its index.
func (pc *procCluster) leader(t *testing.T, js jetstream.JetStream, stream, consumer string, not int) int {
	t.Helper()
	idx := -1
	testutil.Wait(t, time.Minute, "a leader for "+stream+" "+consumer, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var ci *jetstream.ClusterInfo
		if consumer == "" {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return false
			}
			ci = s.CachedInfo().Cluster
		} else {
			c, err := js.Consumer(ctx, stream, consumer)
			if err != nil {
				return false
			}
			ci = c.CachedInfo().Cluster
		}
		if ci == nil {
			return false
		}
		idx = pc.index(ci.Leader)
		return idx >= 0 && idx != not
	})
	return idx
}

// waitCurrent waits until every replica of the stream is current.
func (pc *procCluster) waitCurrent(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	testutil.Wait(t, time.Minute, "every replica of "+stream+" current", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		ci := s.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != len(pc.names)-1 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
}

// TestStreamLeaderCrashDuringEnqueueAndProcessing is the leader-loss test
// with a real crash: the cluster runs as three nats-server processes and
// the task stream's leader (in the heavy variant also a consumer leader,
// three times in a row) is killed with SIGKILL while tasks are enqueued and
// processed. The followers elect a new leader after their election timeout;
// producers retry meanwhile.
func TestStreamLeaderCrashDuringEnqueueAndProcessing(t *testing.T) {
	t.Parallel()
	n, rounds := 2000, 1
	if heavy() {
		n, rounds = 10000, 3
	}
	names := streams.MustNames("")
	consumer := names.ConsumerName(leaderLossType, framework.PriorityNormal)
	pc := startProcCluster(t, 3)
	admin := pc.connect(t)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	runLeaderLoss(t, n, rounds, leaderLoss{
		connect: pc.connect,
		fault: func(t *testing.T, r int) failover {
			fo := failover{what: "stream leader", node: pc.leader(t, js, names.TaskStream(), "", -1)}
			if r%2 == 1 {
				fo.what, fo.node = "consumer leader", pc.leader(t, js, names.TaskStream(), consumer, -1)
			}
			fo.what += " killed"
			fo.at = time.Now()
			pc.kill(fo.node)
			fo.down = time.Since(fo.at)
			pc.leader(t, js, names.TaskStream(), "", fo.node)
			pc.leader(t, js, names.TaskStream(), consumer, fo.node)
			fo.elect = time.Since(fo.at)
			pc.start(t, fo.node)
			pc.waitCurrent(t, js, names.TaskStream())
			return fo
		},
	})
}
