package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// PartitionLeader is where one task partition's stream is led.
type PartitionLeader struct {
	Partition int
	Stream    string
	// Leader is the server leading the stream ("" on a single server, or
	// while it has no leader); Peers are the servers holding it, sorted.
	Leader string
	Peers  []string
}

// Leaders returns where the task stream of each partition of the
// deployment is led.
func Leaders(ctx context.Context, js jetstream.JetStream, prefix string) ([]PartitionLeader, error) {
	n, err := NewNames(prefix)
	if err != nil {
		return nil, err
	}
	count, _, err := deployedPartitions(ctx, js, n)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionLeader, 0, count)
	for _, p := range n.Partitions(count) {
		l, err := leaderWithin(ctx, js, p)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// leaderWithin is leaderOf, each attempt bounded by stepDownRequest and
// retried until ctx ends (a lookup can go unanswered while a leadership
// changes).
func leaderWithin(ctx context.Context, js jetstream.JetStream, p Names) (PartitionLeader, error) {
	wait := streamdefs.Backoff()
	for {
		rctx, cancel := context.WithTimeout(ctx, stepDownRequest)
		l, err := leaderOf(rctx, js, p)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return l, err
		}
		if !retry.Sleep(ctx, wait.NextBackOff()) {
			return l, err
		}
	}
}

// leaderOf reads where the task stream of p's partition is led.
func leaderOf(ctx context.Context, js jetstream.JetStream, p Names) (PartitionLeader, error) {
	s, err := js.Stream(ctx, p.TaskStream())
	if err != nil {
		return PartitionLeader{}, fmt.Errorf("streams: look up %s: %w", p.TaskStream(), err)
	}
	l := PartitionLeader{Partition: p.part, Stream: p.TaskStream()}
	if ci := s.CachedInfo().Cluster; ci != nil {
		l.Leader = ci.Leader
		if ci.Leader != "" {
			l.Peers = append(l.Peers, ci.Leader)
		}
		for _, r := range ci.Replicas {
			if r != nil {
				l.Peers = append(l.Peers, r.Name)
			}
		}
		slices.Sort(l.Peers)
	}
	return l, nil
}

// BalanceLeaders spreads the leaders of the partitions' replicated task
// streams over their servers: partition k is led by the server at k mod
// the number of its peers, in name order, so that N partitions on N
// servers have one leader each. It asks the current leader of each other
// one to step down in favour of that server, and waits until it did.
// Single-replica streams are placed, not led (see [Config].PartitionTags):
// they are left alone. [Ensure] balances the partitions it creates; call
// BalanceLeaders (or `jetflow partitions balance`) after a server restart
// moved leaders. It returns where each partition is led afterwards.
func BalanceLeaders(ctx context.Context, js jetstream.JetStream, prefix string) ([]PartitionLeader, error) {
	leaders, err := Leaders(ctx, js, prefix)
	if err != nil {
		return nil, err
	}
	n, _ := NewNames(prefix)
	for i, l := range leaders {
		if len(l.Peers) < 2 {
			continue
		}
		want := l.Peers[l.Partition%len(l.Peers)]
		if l.Leader == want {
			continue
		}
		if leaders[i], err = stepDownTo(ctx, js, n.Partition(l.Partition), want); err != nil {
			return leaders, err
		}
	}
	return leaders, nil
}

// stepDownTo asks the leader of p's task stream to hand its leadership to
// server want, and waits until want leads it. It asks again when another
// server took the leadership instead (or the request failed), at most every
// stepDownAgain.
func stepDownTo(ctx context.Context, js jetstream.JetStream, p Names, want string) (PartitionLeader, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, streamdefs.RetryFor)
		defer cancel()
	}
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + p.TaskStream()
	wait := streamdefs.Backoff()
	var (
		asked   time.Time
		askedOf string // the leader asked to step down
		last    = errors.New("the leadership did not move")
	)
	// Each request is bounded on its own: one lost while the leadership
	// changes must not hold the loop until the caller's deadline.
	for {
		rctx, cancel := context.WithTimeout(ctx, stepDownRequest)
		l, err := leaderOf(rctx, js, p)
		cancel()
		switch {
		case err != nil:
			last = err
		case l.Leader == want:
			return l, nil
		case l.Leader != "" && (l.Leader != askedOf || time.Since(asked) >= stepDownAgain):
			asked, askedOf = time.Now(), l.Leader
			var resp struct {
				Error *jetstream.APIError `json:"error"`
			}
			rctx, cancel := context.WithTimeout(ctx, stepDownRequest)
			m, rerr := js.Conn().RequestWithContext(rctx, subject, body)
			cancel()
			switch {
			case rerr != nil:
				last = rerr
			case json.Unmarshal(m.Data, &resp) != nil:
				last = errors.New("unreadable answer")
			case resp.Error != nil:
				last = resp.Error
			}
		}
		if !retry.Sleep(ctx, wait.NextBackOff()) {
			return l, fmt.Errorf("streams: move the leader of %s to %s: %w (%w)", p.TaskStream(), want, last, ctx.Err())
		}
	}
}

// stepDownAgain is how long stepDownTo waits for a step-down to take
// effect before it asks again, and stepDownRequest bounds each of its
// requests.
const (
	stepDownAgain   = 2 * time.Second
	stepDownRequest = 2 * time.Second
)

// balanceCreated balances the leaders when this Ensure created partition
// streams: a deployment that did not change keeps its leaders.
func balanceCreated(ctx context.Context, js jetstream.JetStream, c Config, rep *Report) error {
	if c.Partitions < 2 || c.Replicas < 2 {
		return nil
	}
	n, _ := NewNames(c.Prefix)
	for _, p := range n.Partitions(c.Partitions) {
		if slices.Contains(rep.Created, p.TaskStream()) {
			_, err := BalanceLeaders(ctx, js, c.Prefix)
			return err
		}
	}
	return nil
}
