package lanes

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// model drives a gate with random interleavings of deliveries (new tasks,
// redeliveries of awaited, held and settled sequences), settlements,
// limit changes and failovers, keeps what the gate should hold, and checks
// at every start:
//
//   - the gate is open and the delivery is the one it holds for the seq;
//   - the key runs fewer tasks than its limit (1 when ordered);
//   - no delivery of the key with a lower seq waits (FIFO per key), and,
//     when ordered, no lower seq of the key is awaited;
//   - per key, a start below the key's last started seq is a redelivery
//     (a seq delivered before): new tasks start in stream order.
//
// After every step it checks that nothing startable is left waiting while
// the gate is open, and the gate's counts against the model's; at the end
// it drains the gate and checks that no key state is left.
type model struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	g       *Gate[string]
	ordered bool
	limits  map[string]int

	state     state
	byV       map[string]mdeliv
	queued    map[uint64]mdeliv
	running   map[uint64]mdeliv
	awaited   map[uint64]string // seq → key
	gone      []mdeliv          // settled or redelivered elsewhere: may come back late
	delivered map[uint64]int
	lastStart map[string]uint64
	seq, dseq uint64
}

type mdeliv struct {
	key       string
	seq, dseq uint64
	v         string
}

var modelKeys = []string{"a", "b", "c", "d"}

func newModel(t *testing.T, seed uint64, ordered bool) *model {
	m := &model{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 1)), ordered: ordered, limits: map[string]int{},
		byV: map[string]mdeliv{}, queued: map[uint64]mdeliv{}, running: map[uint64]mdeliv{},
		awaited: map[uint64]string{}, delivered: map[uint64]int{}, lastStart: map[string]uint64{},
	}
	for _, k := range modelKeys {
		m.limits[k] = 1 + m.rng.IntN(3)
	}
	m.g = New[string](Config{Ordered: ordered, Limit: func(k string) int { return m.limits[k] }})
	return m
}

func (m *model) limit(key string) int {
	if m.ordered {
		return 1
	}
	return m.limits[key]
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d: "+format, append([]any{m.seed}, args...)...)
}

// deliver makes a delivery of seq with a new delivery sequence.
func (m *model) deliver(key string, seq uint64) mdeliv {
	m.dseq++
	d := mdeliv{key, seq, m.dseq, fmt.Sprintf("%s/%d/%d", key, seq, m.dseq)}
	m.byV[d.v] = d
	return d
}

func (m *model) receive(d mdeliv) {
	m.t.Helper()
	m.delivered[d.seq]++
	start, stale, isStale := m.g.Receive(Item[string]{Key: d.key, Seq: d.seq, DSeq: d.dseq, V: d.v})
	want, wantStale := "", true
	if r, ok := m.running[d.seq]; ok && m.state != isLost {
		want, r.dseq = d.v, max(r.dseq, d.dseq)
		m.running[d.seq] = r
	} else if q, ok := m.queued[d.seq]; ok && m.state != isLost {
		want = d.v
		if d.dseq > q.dseq {
			want, m.queued[d.seq] = q.v, d
		}
	} else if m.state == isLost {
		want = d.v
	} else {
		wantStale = false
		m.queued[d.seq] = d
		delete(m.awaited, d.seq)
	}
	if isStale != wantStale || stale != want {
		m.fail("Receive(%s) stale %q %v, want %q %v", d.v, stale, isStale, want, wantStale)
	}
	m.started(start)
}

// started checks and applies the starts the gate returned, in order.
func (m *model) started(start []string) {
	m.t.Helper()
	for _, v := range start {
		d := m.byV[v]
		if m.state != isOpen {
			m.fail("%s started while the gate is not open", v)
		}
		if q, ok := m.queued[d.seq]; !ok || q.v != v {
			m.fail("%s started, not the delivery held for its seq (%v)", v, q)
		}
		if n := m.runningOf(d.key); n >= m.limit(d.key) {
			m.fail("%s started with %d of its key running, limit %d", v, n, m.limit(d.key))
		}
		for s, q := range m.queued {
			if q.key == d.key && s < d.seq {
				m.fail("%s started before %s", v, q.v)
			}
		}
		for s, k := range m.awaited {
			if m.ordered && k == d.key && s < d.seq {
				m.fail("%s started while %s/%d is awaited", v, k, s)
			}
		}
		if d.seq < m.lastStart[d.key] && m.delivered[d.seq] < 2 {
			m.fail("%s started after %s/%d, and is no redelivery", v, d.key, m.lastStart[d.key])
		}
		m.lastStart[d.key] = d.seq
		delete(m.queued, d.seq)
		m.running[d.seq] = d
	}
}

func (m *model) runningOf(key string) int {
	n := 0
	for _, r := range m.running {
		if r.key == key {
			n++
		}
	}
	return n
}

// pick returns a random key of a map, in a seeded order.
func pick[V any](m *model, from map[uint64]V) (uint64, bool) {
	if len(from) == 0 {
		return 0, false
	}
	seqs := slices.Sorted(maps.Keys(from))
	return seqs[m.rng.IntN(len(seqs))], true
}

func (m *model) step() {
	m.t.Helper()
	switch n := m.rng.IntN(100); {
	case n < 30:
		m.seq++
		m.receive(m.deliver(modelKeys[m.rng.IntN(len(modelKeys))], m.seq))
	case n < 40:
		if s, ok := pick(m, m.awaited); ok {
			m.receive(m.deliver(m.awaited[s], s))
		}
	case n < 45:
		held := maps.Clone(m.queued)
		maps.Copy(held, m.running)
		if s, ok := pick(m, held); ok {
			d := m.deliver(held[s].key, s)
			if m.rng.IntN(2) == 0 { // an older delivery arrives last
				d.dseq = held[s].dseq - 1
			}
			m.receive(d)
		}
	case n < 48:
		if len(m.gone) > 0 {
			g := m.gone[m.rng.IntN(len(m.gone))]
			m.receive(m.deliver(g.key, g.seq))
		}
	case n < 78:
		if s, ok := pick(m, m.running); ok {
			m.done(m.running[s], m.rng.IntN(10) < 3)
		} else if got := m.g.Done("a", m.seq+1, false); got != nil {
			m.fail("Done of nothing started %v", got)
		}
	case n < 82:
		if s, ok := pick(m, m.awaited); ok {
			key := m.awaited[s]
			delete(m.awaited, s)
			m.gone = append(m.gone, mdeliv{key: key, seq: s})
			m.started(m.g.Forget(key, s))
		}
	case n < 86:
		if !m.ordered {
			m.limits[modelKeys[m.rng.IntN(len(modelKeys))]] = 1 + m.rng.IntN(3)
			m.started(m.g.Recheck())
		}
	case n < 88:
		m.lost()
	case n < 91:
		m.g.Acquired()
		m.state = isClosed
	default:
		delivered := m.dseq - min(m.dseq, uint64(m.rng.IntN(3)))
		want := m.outstanding(delivered)
		m.check(max(0, want+m.rng.IntN(3)-1), delivered)
	}
	m.consistent()
}

func (m *model) done(d mdeliv, redelivered bool) {
	m.t.Helper()
	delete(m.running, d.seq)
	if redelivered && m.state != isLost {
		m.awaited[d.seq] = d.key
	} else {
		m.gone = append(m.gone, d)
	}
	m.started(m.g.Done(d.key, d.seq, redelivered))
}

func (m *model) lost() {
	m.t.Helper()
	var want []string
	for _, s := range slices.Sorted(maps.Keys(m.queued)) {
		want = append(want, m.queued[s].v)
		m.gone = append(m.gone, m.queued[s])
	}
	for s, k := range m.awaited {
		m.gone = append(m.gone, mdeliv{key: k, seq: s})
	}
	clear(m.queued)
	clear(m.awaited)
	m.state = isLost
	if got := m.g.Lost(); !slices.Equal(got, want) {
		m.fail("Lost = %v, want %v", got, want)
	}
}

func (m *model) outstanding(delivered uint64) int {
	n := len(m.awaited)
	for _, held := range []map[uint64]mdeliv{m.queued, m.running} {
		for _, d := range held {
			if d.dseq <= delivered {
				n++
			}
		}
	}
	return n
}

func (m *model) check(pending int, delivered uint64) {
	m.t.Helper()
	wantOpen := m.state == isOpen || m.state == isClosed && pending == m.outstanding(delivered)
	wasClosed := m.state == isClosed
	if wantOpen {
		m.state = isOpen
	}
	start, open := m.g.Check(pending, delivered)
	if open != wantOpen || !wasClosed && start != nil {
		m.fail("Check(%d, %d) = %v %v, want open %v", pending, delivered, start, open, wantOpen)
	}
	m.started(start)
}

// consistent compares the gate's counts with the model's and, when the
// gate is open, checks that every key that could start something does.
func (m *model) consistent() {
	m.t.Helper()
	if h := m.g.Held(); h != len(m.queued)+len(m.running) {
		m.fail("Held = %d, want %d", h, len(m.queued)+len(m.running))
	}
	want := map[string]*KeyStats{}
	stats := func(k string) *KeyStats {
		if want[k] == nil {
			want[k] = &KeyStats{Key: k}
		}
		return want[k]
	}
	head := map[string]uint64{}
	for s, d := range m.queued {
		stats(d.key).Waiting++
		if h, ok := head[d.key]; !ok || s < h {
			head[d.key] = s
		}
	}
	for _, d := range m.running {
		stats(d.key).Running++
	}
	for _, k := range m.awaited {
		stats(k).Awaited++
	}
	got := m.g.Keys()
	if len(got) != len(want) {
		m.fail("Keys = %v, want %d keys", got, len(want))
	}
	for _, ks := range got {
		if w := want[ks.Key]; w == nil || *w != ks {
			m.fail("Keys has %+v, want %+v", ks, w)
		}
	}
	if m.state != isOpen {
		return
	}
	for k, h := range head {
		blocked := m.runningOf(k) >= m.limit(k)
		for s, ak := range m.awaited {
			blocked = blocked || m.ordered && ak == k && s < h
		}
		if !blocked {
			m.fail("key %s could start seq %d but waits", k, h)
		}
	}
}

// drain opens the gate, settles everything and checks that no state is
// left.
func (m *model) drain() {
	m.t.Helper()
	m.g.Acquired()
	m.state = isClosed
	m.check(m.outstanding(m.dseq), m.dseq)
	for len(m.running)+len(m.awaited) > 0 {
		for _, s := range slices.Sorted(maps.Keys(m.awaited)) {
			k := m.awaited[s]
			delete(m.awaited, s)
			m.started(m.g.Forget(k, s))
		}
		for _, s := range slices.Sorted(maps.Keys(m.running)) {
			m.done(m.running[s], false)
		}
	}
	if len(m.g.keys) != 0 || m.g.Held() != 0 || len(m.queued) != 0 {
		m.fail("after the drain the gate holds %v", m.g.Keys())
	}
}

func TestRandomInterleavings(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(300) {
				m := newModel(t, seed, ordered)
				for range 400 {
					m.step()
				}
				m.drain()
			}
		})
	}
}
