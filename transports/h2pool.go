package transports

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"crypto/tls"
	"net"
	"sync"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
)

// h2Conn is one HTTP/2 connection: x/net's ClientConn over the observed
// connection whose Wire shows adapters/h2 the frames.
type h2Conn struct {
	key  connKey
	cc   *http2.ClientConn
	wire *h2.Wire
	tls  *tls.ConnectionState // nil for h2c
	conn net.Conn             // the observed connection, for GotConn

	// Guarded by h2Pool.mu.
	streams int  // attempts ever started on it
	served  int  // attempts that ended in a clean, complete exchange
	active  int  // attempts running on it
	retired bool // takes no new attempt; closes when active reaches 0
	pooled  bool // in h2Pool.conns
}

// h2Pool holds the live HTTP/2 connections per route. A connection stays
// in it while x/net says it can take new streams; each attempt takes a
// stream on the first connection whose ClientConn.ReserveNewRequest
// succeeds, which respects the server's SETTINGS_MAX_CONCURRENT_STREAMS,
// and the caller dials a new connection when none can.
type h2Pool struct {
	keep bool // false: every connection closes once its streams are done

	gate dialGate // original attempts that missed the pool share a dial

	mu    sync.Mutex
	conns map[connKey][]*h2Conn
}

func newH2Pool(keep bool) *h2Pool {
	return &h2Pool{keep: keep, conns: map[connKey][]*h2Conn{}}
}

// take reserves a stream for one attempt on a pooled connection for key,
// or returns nil. Connections that closed or are closing (a GOAWAY
// arrived, x/net gave up on them) leave the pool on the way: those met
// before the one that takes the stream; any behind it leave at a later
// take.
//
// A connection is asked for a reservation first and for its State only
// when it refuses one: State takes x/net's write lock (v0.62 under Go
// 1.26), which a stream writing its frames holds across the system call,
// and take holds the pool's lock, so asking every time serialised every
// call of the pool behind the socket writes of the busiest connection.
func (p *h2Pool) take(key connKey) (*h2Conn, bool) {
	var dead []*h2Conn
	defer func() {
		for _, c := range dead {
			c.cc.Close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.conns[key]
	kept := list[:0]
	var got *h2Conn
	var reused bool
	for _, c := range list {
		if got != nil {
			kept = append(kept, c)
			continue
		}
		if c.cc.ReserveNewRequest() {
			// Reused as fsm means it: the connection served an earlier
			// exchange, not merely carries another stream right now.
			got, reused = c, c.served > 0
			c.streams++
			c.active++
			kept = append(kept, c)
			continue
		}
		if st := c.cc.State(); st.Closed || st.Closing {
			if p.retireLocked(c, false) {
				dead = append(dead, c)
			}
			continue
		}
		kept = append(kept, c) // full: at the server's concurrency limit
	}
	clear(list[len(kept):])
	if len(kept) == 0 {
		delete(p.conns, key)
	} else {
		p.conns[key] = kept
	}
	return got, reused
}

// add registers c, just dialed, with one attempt running on it.
func (p *h2Pool) add(c *h2Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.streams, c.active = 1, 1
	if !p.keep {
		c.retired = true
		return
	}
	c.pooled = true
	p.conns[c.key] = append(p.conns[c.key], c)
}

// done ends one attempt on c; clean reports a complete exchange.
func (p *h2Pool) done(c *h2Conn, clean bool) {
	p.mu.Lock()
	c.active--
	if clean {
		c.served++
	}
	closeIt := c.retired && c.active == 0
	p.mu.Unlock()
	if closeIt {
		c.cc.Close()
	}
}

// retire takes c out of the pool: no new attempt runs on it, and it
// closes once its running attempts are done.
func (p *h2Pool) retire(c *h2Conn) {
	p.mu.Lock()
	idle := p.retireLocked(c, true)
	p.mu.Unlock()
	if idle {
		c.cc.Close()
	}
}

// retireLocked marks c retired and reports whether it is idle, for the
// caller to close once it let go of p.mu; with unlist it also removes c
// from its key's list (take rebuilds the list itself).
func (p *h2Pool) retireLocked(c *h2Conn, unlist bool) bool {
	c.retired = true
	if unlist && c.pooled {
		list := p.conns[c.key]
		for i, x := range list {
			if x == c {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(p.conns, c.key)
		} else {
			p.conns[c.key] = list
		}
	}
	c.pooled = false
	return c.active == 0
}

// closeIdle closes every pooled connection without a running attempt.
func (p *h2Pool) closeIdle() {
	p.mu.Lock()
	var idle []*h2Conn
	for key, list := range p.conns {
		kept := list[:0]
		for _, c := range list {
			if c.active == 0 {
				c.retired, c.pooled = true, false
				idle = append(idle, c)
			} else {
				kept = append(kept, c)
			}
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(p.conns, key)
		} else {
			p.conns[key] = kept
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.cc.Close()
	}
}

// idleCount returns the number of pooled connections without a running
// attempt.
func (p *h2Pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.conns {
		for _, c := range list {
			if c.active == 0 {
				n++
			}
		}
	}
	return n
}
