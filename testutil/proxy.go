package testutil

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP proxy on loopback between clients and a server, used to cut
// a client's network and restore it: [Proxy.Cut] drops every connection
// through the proxy and refuses new ones until [Proxy.Restore]. A NATS client
// connected through it sees a network failure and keeps trying to reconnect,
// as it would across a real outage.
//
// [Proxy.Mute] silences the server instead: what the clients send still
// reaches it, but nothing it sends reaches them (replies and
// acknowledgements are lost on the way) until the next Cut.
//
// A Proxy is safe for concurrent use.
type Proxy struct {
	l      net.Listener
	target string
	muted  atomic.Bool

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target ("host:port", for example
// srv.Addr().String() of a server started with [WithListen]) and closes it
// when the test ends.
func NewProxy(tb TB, target string) *Proxy {
	tb.Helper()
	p, err := StartProxy(target)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// StartProxy is [NewProxy] without a test: the caller closes the proxy.
func StartProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testutil: proxy listen: %w", err)
	}
	p := &Proxy{l: l, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's "host:port".
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// URL returns the proxy's address as a NATS URL, for [nats.Connect].
func (p *Proxy) URL() string { return "nats://" + p.Addr() }

// Cut closes every connection through the proxy and refuses new ones until
// [Proxy.Restore]. Cutting a cut proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = make(map[net.Conn]struct{})
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.muted.Store(false)
}

// Mute drops everything the server sends to the clients from now on, while
// what they send still reaches it, until [Proxy.Cut]: a publish is stored
// but its acknowledgement is lost. The connections stay up; a client sees
// nothing until its own timeouts or the Cut.
func (p *Proxy) Mute() { p.muted.Store(true) }

// Restore lets connections through again after [Proxy.Cut].
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy, drops its connections and waits for its goroutines.
// It is safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.l.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			continue
		}
		p.conns[in] = struct{}{}
		p.conns[out] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(out, in, false)
		go p.pipe(in, out, true)
	}
}

// pipe copies src to dst until either side fails, then closes both; toClient
// is the direction that Mute silences.
func (p *Proxy) pipe(dst, src net.Conn, toClient bool) {
	defer p.wg.Done()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 && !(toClient && p.muted.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
