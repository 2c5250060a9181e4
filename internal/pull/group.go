package pull

import (
	"time"

	"github.com/nats-io/nats.go"
)

// Priority groups with the pinned_client policy (ADR-42, nats-server 2.11
// and later).
//
// A consumer of that policy serves one client of a group at a time: the
// pinned one. A pull request names the group ("group") and, once the client
// knows it, the pin ID ("id"). The server pins the first request without an
// ID that a message finds while no client is pinned (the request then
// carries that ID), and appends the pin ID to the headers of every message
// it delivers under the pin ("Nats-Pin-Id", after any a producer stored).
// While a client is pinned, requests without an ID wait. A request with
// another ID is answered with status 423: at once ("Nats-Pin-Id mismatch")
// if it arrives while another ID is pinned, otherwise when a message finds
// it waiting ("Nats-Wrong-Pin-Id"). The server unpins a client that sent no
// request with its pin for the consumer's PinnedTTL, or on an
// administrator's request ($JS.API.CONSUMER.UNPIN).

// pinHeader is the header with which the server tells a delivery's pin ID.
const pinHeader = "Nats-Pin-Id"

// SetGroup makes the iterator pull as a member of group, a priority group of
// a consumer with the pinned_client policy: every request names the group
// and, once the iterator holds the consumer's pin, the pin ID.
//
// The iterator learns its pin from the messages delivered under it, and
// calls onPin with the new ID each time it changes (the first pin, or a new
// one after a loss): the messages delivered under a new pin may follow
// another client's unfinished ones. When a request is refused for its pin ID
// (status 423), the pin is lost: the iterator forgets it, calls onPin(""),
// and its next request, without an ID, makes it a candidate again. The
// messages already received stay queued; they were delivered under the lost
// pin. The server renews a pin only when a request carrying it arrives, and
// an iterator with nothing to fetch sends one every [Expires]: with a
// PinnedTTL shorter than that, an idle iterator loses its pin, and learns it
// when a message comes and its request is refused (see [Iter.SetExpires]).
//
// onPin runs without locks held on the subscription's goroutine, one call
// at a time in the order of the changes, before the message that brought a
// new pin is queued or offered to the direct path; it may call the
// iterator, and delays the deliveries behind it. A nil onPin is not called.
// An empty group leaves the iterator outside any group (the default). Set
// it before the first Next.
func (p *Iter) SetGroup(group string, onPin func(pinID string)) {
	p.mu.Lock()
	p.group, p.onPin = group, onPin
	p.mu.Unlock()
}

// SetExpires sets how long each pull request waits on the server, in place
// of [Expires]: a member of a pinned group sends requests more often than
// the consumer's PinnedTTL, so that it keeps its pin while idle. Set it
// before the first Next; d <= 0 restores the default. The requests' idle
// heartbeat is at most half of d (the server refuses a longer one).
func (p *Iter) SetExpires(d time.Duration) {
	p.mu.Lock()
	p.expires = d
	p.mu.Unlock()
}

func (p *Iter) expiresOrDefault() time.Duration {
	if p.expires > 0 {
		return p.expires
	}
	return Expires
}

// Pause stops asking for messages while the subscription stays: the
// request outstanding, if any, still brings what the server delivers for
// it, and Next returns it. A member of a pinned group that gives its pin up
// pauses, takes what comes until [Iter.Outstanding] is false (its last
// request expired or was served), and only then stops: a request left on
// the server after its subscription ended could be pinned and served into
// the void.
func (p *Iter) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Outstanding reports whether a pull request is outstanding.
func (p *Iter) Outstanding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.cur; r != nil && time.Now().After(r.expiresAt.Add(Heartbeat)) {
		p.cur = nil // its expiry status was lost
	}
	return p.cur != nil
}

// PinID returns the pin ID the iterator holds for its priority group, ""
// when it holds none or pulls outside a group. It is safe for concurrent
// use.
func (p *Iter) PinID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pin
}

// notePinLocked records the pin ID a delivery carries. When it is a new one,
// it returns the callback to tell it with (nil otherwise), to be called
// without locks. The server appends its header to the stored message's
// headers: the last value is the server's, whatever a producer stored.
func (p *Iter) notePinLocked(m *nats.Msg) (func(string), string) {
	if p.group == "" {
		return nil, ""
	}
	ids := m.Header.Values(pinHeader)
	if len(ids) == 0 || ids[len(ids)-1] == p.pin {
		return nil, ""
	}
	p.pin = ids[len(ids)-1]
	return p.onPin, p.pin
}

// forgetPinLocked forgets the pin after the outstanding request was refused
// for its pin ID. The ID a request carries may be the one the server gave it
// (a request sent without one and pinned), not only the one it was sent
// with: whatever the iterator holds is lost. It returns the callback to tell
// the loss with (nil when it held none), to be called without locks.
func (p *Iter) forgetPinLocked() func(string) {
	if p.pin == "" {
		return nil
	}
	p.pin = ""
	return p.onPin
}
