package pull_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/testutil"
)

// pinGroup is a consumer of the pinned_client policy on a fresh server.
type pinGroup struct {
	s    *testutil.Server
	js   jetstream.JetStream
	cons jetstream.Consumer
	// got receives what the members' Next returned, acknowledged.
	got chan delivered
	nc  *nats.Conn
	// requests gets a copy of each pull request sent for the consumer.
	requests chan *nats.Msg
	// expires, when set, is the members' request expiry (SetExpires).
	expires time.Duration
}

// newPinGroup starts a server with stream S and its durable consumer C of
// the pinned_client policy with group "g" and the given PinnedTTL.
func newPinGroup(t *testing.T, ttl time.Duration) *pinGroup {
	t.Helper()
	g := &pinGroup{s: testutil.RunServer(t), got: make(chan delivered, 100), requests: make(chan *nats.Msg, 100)}
	nc := testutil.Connect(t, g.s)
	g.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	g.js = js
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	g.cons, err = js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable:        "C",
		AckPolicy:      jetstream.AckExplicitPolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{"g"},
		PinnedTTL:      ttl,
	})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT.S.C", g.requests)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return g
}

// pullRequest is what the tests read of a pull request.
type pullRequest struct {
	Group string `json:"group"`
	ID    string `json:"id"`
}

// sent returns the pull requests sent for the consumer since the last
// call, in order: all that the server received before the call (a request
// reaches the consumer after its copy was queued to the test's connection,
// which the flush drains).
func (g *pinGroup) sent(t *testing.T) []pullRequest {
	t.Helper()
	if err := g.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var rs []pullRequest
	for {
		select {
		case m := <-g.requests:
			var r pullRequest
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		default:
			return rs
		}
	}
}

// publish stores n messages; each carries a forged pin header.
func (g *pinGroup) publish(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		m := nats.NewMsg("s.x")
		m.Data = fmt.Appendf(nil, "%d", i)
		m.Header.Set("Nats-Pin-Id", "forged")
		if _, err := g.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// waiting waits until the consumer holds n pull requests.
func (g *pinGroup) waiting(t *testing.T, n int) {
	t.Helper()
	testutil.Wait(t, 10*time.Second, fmt.Sprintf("%d waiting pull requests", n), func() bool {
		info, err := g.cons.Info(t.Context())
		return err == nil && info.NumWaiting == n
	})
}

// pinned returns the pin ID the server reports for group "g".
func (g *pinGroup) pinned(t *testing.T) string {
	t.Helper()
	info, err := g.cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.PriorityGroups {
		if s.Group == "g" {
			return s.PinnedClientID
		}
	}
	return ""
}

// unpin asks the server to unpin group "g".
func (g *pinGroup) unpin(t *testing.T) {
	t.Helper()
	st, err := g.js.Stream(t.Context(), "S")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UnpinConsumer(t.Context(), "C", "g"); err != nil {
		t.Fatal(err)
	}
}

// member is an iterator of group "g" on a connection of its own, pulling
// and acknowledging in a goroutine of its own until stopped.
type member struct {
	name string
	it   *pull.Iter
	pins chan string // what onPin was told, in order
	done chan struct{}
}

// delivered is a message a member received.
type delivered struct {
	by *member
	q  *pull.Msg
}

// member starts a member of batches of 4, stopped at the test's end.
func (g *pinGroup) member(t *testing.T, name string) *member {
	t.Helper()
	nc := testutil.Connect(t, g.s)
	it, err := pull.NewIter(nc, "S", "C", func() int { return 4 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{
		name: name, it: it,
		pins: make(chan string, 16),
		done: make(chan struct{}),
	}
	it.SetGroup("g", func(pin string) { m.pins <- pin })
	it.SetExpires(g.expires)
	go func() {
		defer close(m.done)
		for {
			q, err := it.Next(100 * time.Millisecond)
			switch {
			case errors.Is(err, nats.ErrTimeout):
			case err != nil:
				if !errors.Is(err, pull.ErrClosed) {
					t.Errorf("%s: Next: %v", name, err)
				}
				return
			default:
				if err := q.Ack(); err != nil {
					t.Errorf("%s: Ack: %v", name, err)
				}
				g.got <- delivered{m, q.(*pull.Msg)}
			}
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop stops the iterator and waits for its goroutine.
func (m *member) stop() {
	m.it.Stop()
	<-m.done
}

// nextPin waits for onPin's next call.
func (m *member) nextPin(t *testing.T) string {
	t.Helper()
	select {
	case p := <-m.pins:
		return p
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no onPin call", m.name)
		return ""
	}
}

// noPin fails if onPin was called and not yet read.
func (m *member) noPin(t *testing.T) {
	t.Helper()
	select {
	case p := <-m.pins:
		t.Fatalf("%s: onPin(%q) unexpected", m.name, p)
	default:
	}
}

// pinOf returns the pin ID the server put on q: the last value of the
// header, after the one its producer stored.
func pinOf(t *testing.T, q *pull.Msg) string {
	t.Helper()
	v := q.Headers().Values("Nats-Pin-Id")
	if len(v) != 2 || v[0] != "forged" {
		t.Fatalf("pin headers %q, want the forged one and the server's", v)
	}
	return v[1]
}

// receive waits for n messages and returns who got each.
func (g *pinGroup) receive(t *testing.T, n int) map[*member][]*pull.Msg {
	t.Helper()
	got := map[*member][]*pull.Msg{}
	timeout := time.After(20 * time.Second)
	for i := range n {
		select {
		case d := <-g.got:
			got[d.by] = append(got[d.by], d.q)
		case <-timeout:
			t.Fatalf("timed out with %d of %d messages", i, n)
		}
	}
	return got
}

// While two members pull, the server serves one: all messages go to the
// first to be pinned, which tells its pin once, the one on the messages
// (the server's header, after the producer's), and the other's requests
// wait without a pin.
func TestGroupServesOnePinnedMember(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Minute)
	a, b := g.member(t, "a"), g.member(t, "b")
	g.waiting(t, 2)
	const n = 20 // five batches: the pinned member's later requests carry its pin
	g.publish(t, n)
	got := g.receive(t, n)
	if len(got) != 1 {
		t.Fatalf("a got %d messages, b %d: want all at one", len(got[a]), len(got[b]))
	}
	won, lost := a, b
	if len(got[b]) == n {
		won, lost = b, a
	}
	pin := won.nextPin(t)
	if pin == "" || pin == "forged" {
		t.Fatalf("onPin(%q)", pin)
	}
	for _, q := range got[won] {
		if p := pinOf(t, q); p != pin {
			t.Fatalf("message under pin %q, onPin told %q", p, pin)
		}
	}
	if p := won.it.PinID(); p != pin {
		t.Fatalf("PinID %q, want %q", p, pin)
	}
	if p := g.pinned(t); p != pin {
		t.Fatalf("server's pin %q, want %q", p, pin)
	}
	won.noPin(t)
	lost.noPin(t)
	withPin := 0
	for _, r := range g.sent(t) {
		if r.Group != "g" || r.ID != "" && r.ID != pin {
			t.Fatalf("request %+v in group %q, pin %q", r, "g", pin)
		}
		if r.ID == pin {
			withPin++
		}
	}
	if withPin == 0 {
		t.Fatal("no request carried the pin")
	}
	if p := lost.it.PinID(); p != "" {
		t.Fatalf("unpinned member's PinID %q", p)
	}
}

// When the pinned member stops pulling, the server unpins it after the
// PinnedTTL and pins the other, whose requests waited: it tells a new pin
// and receives the messages.
func TestGroupPinMovesWhenPinnedStops(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Second)
	a := g.member(t, "a")
	g.waiting(t, 1)
	g.publish(t, 1)
	first := g.receive(t, 1)[a][0]
	p1 := a.nextPin(t)
	if pinOf(t, first) != p1 {
		t.Fatalf("message under pin %q, onPin told %q", pinOf(t, first), p1)
	}
	b := g.member(t, "b")
	g.waiting(t, 2)
	a.stop()
	const n = 5
	g.publish(t, n)
	got := g.receive(t, n)
	if len(got[b]) != n {
		t.Fatalf("b got %d of %d messages", len(got[b]), n)
	}
	p2 := b.nextPin(t)
	if p2 == "" || p2 == p1 {
		t.Fatalf("b told pin %q after a's %q", p2, p1)
	}
	for _, q := range got[b] {
		if p := pinOf(t, q); p != p2 {
			t.Fatalf("message under pin %q, onPin told %q", p, p2)
		}
	}
	b.noPin(t)
}

// A member whose pin the server withdrew is refused its next request
// (status 423): it tells the loss, asks again without a pin ID, and is
// pinned anew, without a storm of requests.
func TestGroupRegainsPinAfterUnpin(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Minute)
	a := g.member(t, "a")
	g.waiting(t, 1)
	g.publish(t, 1)
	g.receive(t, 1)
	p1 := a.nextPin(t)
	g.unpin(t)
	g.publish(t, 1)
	if p := a.nextPin(t); p != "" {
		t.Fatalf("onPin(%q) after the unpin, want the loss first", p)
	}
	q := g.receive(t, 1)[a][0]
	p2 := a.nextPin(t)
	if p2 == "" || p2 == p1 || pinOf(t, q) != p2 {
		t.Fatalf("pins %q then %q, message under %q", p1, p2, pinOf(t, q))
	}
	if p := a.it.PinID(); p != p2 {
		t.Fatalf("PinID %q, want %q", p, p2)
	}
	// The first request, pinned by the server, was refused; the next went
	// without the lost pin ID (a request with it would be refused at
	// once), and was pinned anew.
	if rs := g.sent(t); len(rs) != 2 || rs[0] != (pullRequest{Group: "g"}) || rs[1] != (pullRequest{Group: "g"}) {
		t.Fatalf("pull requests %+v, want two in group g without a pin ID", rs)
	}
}

// When the server moves the pin to another member, the member that held it
// is refused (423) once the messages reach its request's turn, and tells the
// loss; the pin can come back to it.
func TestGroupPinMovesOnUnpin(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Minute)
	a, b := g.member(t, "a"), g.member(t, "b")
	g.waiting(t, 2)
	g.publish(t, 1)
	got := g.receive(t, 1)
	x, y := a, b
	if len(got[b]) == 1 {
		x, y = b, a
	}
	p1 := x.nextPin(t)
	// Each round: unpin, then two messages, so that the request of the
	// member that held the pin comes up: to be pinned anew (the first
	// message) or refused (the second).
	round := func(from, to *member, old string) string {
		t.Helper()
		g.unpin(t)
		g.publish(t, 2)
		if p := from.nextPin(t); p != "" {
			t.Fatalf("%s: onPin(%q) after the unpin, want the loss", from.name, p)
		}
		got := g.receive(t, 2)
		if len(got[from]) != 0 {
			t.Fatalf("%s got %d messages after losing its pin", from.name, len(got[from]))
		}
		p := to.nextPin(t)
		if p == "" || p == old {
			t.Fatalf("%s: pin %q after %q", to.name, p, old)
		}
		for _, q := range got[to] {
			if pinOf(t, q) != p {
				t.Fatalf("message under pin %q, onPin told %q", pinOf(t, q), p)
			}
		}
		return p
	}
	p2 := round(x, y, p1)
	round(y, x, p2)
	x.noPin(t)
	y.noPin(t)
}

// The server renews a pin only when a request carrying it arrives: a member
// idle for longer than the PinnedTTL loses its pin, and learns it from the
// 423 that refuses its request when the next message comes.
func TestGroupIdleMemberLosesPin(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Second)
	a := g.member(t, "a")
	g.waiting(t, 1)
	g.publish(t, 1)
	g.receive(t, 1)
	p1 := a.nextPin(t)
	testutil.Wait(t, 20*time.Second, "the server to unpin the idle member", func() bool {
		return g.pinned(t) == ""
	})
	if p := a.it.PinID(); p != p1 {
		t.Fatalf("PinID %q before any refusal, want %q", p, p1)
	}
	g.publish(t, 1)
	if p := a.nextPin(t); p != "" {
		t.Fatalf("onPin(%q), want the loss first", p)
	}
	q := g.receive(t, 1)[a][0]
	if p2 := a.nextPin(t); p2 == "" || p2 == p1 || pinOf(t, q) != p2 {
		t.Fatalf("pins %q then %q, message under %q", p1, p2, pinOf(t, q))
	}
}

// A member whose requests expire sooner than the PinnedTTL (SetExpires)
// keeps its pin while idle: the next message comes under the same pin.
func TestGroupIdleMemberKeepsPinWithShortRequests(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, time.Second)
	g.expires = 250 * time.Millisecond
	a := g.member(t, "a")
	g.waiting(t, 1)
	g.publish(t, 1)
	g.receive(t, 1)
	p1 := a.nextPin(t)
	seen := 0
	testutil.Wait(t, 20*time.Second, "twelve requests carrying the pin (three PinnedTTLs)", func() bool {
		for _, r := range g.sent(t) {
			if r.ID == p1 {
				seen++
			}
		}
		return seen >= 12
	})
	if p := g.pinned(t); p != p1 {
		t.Fatalf("server pins %q after an idle while, want %q", p, p1)
	}
	g.publish(t, 1)
	q := g.receive(t, 1)[a][0]
	a.noPin(t)
	if pinOf(t, q) != p1 {
		t.Fatalf("message under %q, want %q", pinOf(t, q), p1)
	}
}

// A paused member sends no further request; its outstanding one still
// brings what the server delivers, and Outstanding tells when it is done.
func TestGroupPausedMemberStopsRequesting(t *testing.T) {
	t.Parallel()
	g := newPinGroup(t, 10*time.Second)
	g.expires = 500 * time.Millisecond
	a := g.member(t, "a")
	g.waiting(t, 1)
	a.it.Pause()
	testutil.Wait(t, 10*time.Second, "the outstanding request to end", func() bool { return !a.it.Outstanding() })
	g.sent(t) // what was sent until now
	g.publish(t, 1)
	if rs := g.sent(t); len(rs) != 0 {
		t.Fatalf("a paused member sent %d pull requests", len(rs))
	}
	info, err := g.cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumWaiting != 0 || info.NumPending != 1 {
		t.Fatalf("after the pause: %d waiting requests, %d pending messages; want 0 and 1", info.NumWaiting, info.NumPending)
	}
}
