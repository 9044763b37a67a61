package transports

import (
	"context"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
)

// h3Conn is one HTTP/3 connection: quic-go's ClientConn over a QUIC
// connection that an adapters/h3 Watch observes.
type h3Conn struct {
	key   connKey
	qc    *quic.Conn
	cc    *http3.ClientConn
	watch *h3.Watch

	// Guarded by h3Pool.mu.
	served  int  // attempts that ended in a clean, complete exchange
	active  int  // attempts running on it
	retired bool // takes no new attempt; closes when active reaches 0
	pooled  bool // in h3Pool.conns
	// idleTimer, made once and reset, closes the connection after
	// idleTimeout without a request; idleSince is when the last one
	// ended. A timer that fires anyway finds the connection busy, or idle
	// for less than the limit, and does nothing.
	idleTimer *time.Timer
	idleSince time.Time
}

// close closes the QUIC connection with H3_NO_ERROR.
func (c *h3Conn) close() { c.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "") }

// open reports whether c can take a new request: the connection is alive
// and the server sent no GOAWAY (RFC 9114 §5.2: no new requests after
// one).
func (c *h3Conn) open() bool {
	if c.qc.Context().Err() != nil {
		return false
	}
	_, goAway := c.watch.GoAway()
	return !goAway
}

// h3Pool holds the live HTTP/3 connections per route. QUIC multiplexes
// requests, and quic-go makes a request wait for stream credit when the
// server's MAX_STREAMS is reached, so one open connection per route takes
// every attempt; a connection closes after IdleConnTimeout without one.
type h3Pool struct {
	keep        bool // false: every connection closes once its streams are done
	idleTimeout time.Duration
	gate        dialGate

	mu    sync.Mutex
	conns map[connKey][]*h3Conn
}

func newH3Pool(keep bool, idleTimeout time.Duration) *h3Pool {
	return &h3Pool{keep: keep, idleTimeout: idleTimeout, conns: map[connKey][]*h3Conn{}}
}

// take reserves a pooled connection for key for one attempt, or returns
// nil. Closed connections and those that got a GOAWAY leave the pool on
// the way.
func (p *h3Pool) take(key connKey) (*h3Conn, bool) {
	var dead []*h3Conn
	defer func() {
		for _, c := range dead {
			c.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.conns[key]
	kept := list[:0]
	var got *h3Conn
	for _, c := range list {
		if !c.open() {
			c.retired, c.pooled = true, false
			if c.active == 0 {
				dead = append(dead, c)
			}
			continue
		}
		kept = append(kept, c)
		if got == nil {
			got = c
			c.active++
			c.stopIdleLocked()
		}
	}
	clear(list[len(kept):])
	if len(kept) == 0 {
		delete(p.conns, key)
	} else {
		p.conns[key] = kept
	}
	if got == nil {
		return nil, false
	}
	// Reused as fsm means it: the connection served an earlier exchange.
	return got, got.served > 0
}

// add registers c, just dialed, with one attempt running on it.
func (p *h3Pool) add(c *h3Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.active = 1
	if !p.keep {
		c.retired = true
		return
	}
	c.pooled = true
	p.conns[c.key] = append(p.conns[c.key], c)
}

// done ends one attempt on c; clean reports a complete exchange.
func (p *h3Pool) done(c *h3Conn, clean bool) {
	p.mu.Lock()
	c.active--
	if clean {
		c.served++
	}
	closeIt := c.retired && c.active == 0
	if !closeIt && c.active == 0 && p.idleTimeout > 0 {
		c.idleSince = time.Now()
		if c.idleTimer == nil {
			c.idleTimer = time.AfterFunc(p.idleTimeout, func() { p.idleExpired(c) })
		} else {
			c.idleTimer.Reset(p.idleTimeout)
		}
	}
	p.mu.Unlock()
	if closeIt {
		c.close()
	}
}

func (c *h3Conn) stopIdleLocked() {
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
}

// idleExpired closes c when it is still idle, and has been for the
// whole limit.
func (p *h3Pool) idleExpired(c *h3Conn) {
	p.mu.Lock()
	idle := c.active == 0 && !c.retired && time.Since(c.idleSince) >= p.idleTimeout
	if idle {
		p.retireLocked(c)
	}
	p.mu.Unlock()
	if idle {
		c.close()
	}
}

// retire takes c out of the pool: no new attempt runs on it, and it
// closes once its running attempts are done.
func (p *h3Pool) retire(c *h3Conn) {
	p.mu.Lock()
	p.retireLocked(c)
	idle := c.active == 0
	p.mu.Unlock()
	if idle {
		c.close()
	}
}

func (p *h3Pool) retireLocked(c *h3Conn) {
	c.retired = true
	c.stopIdleLocked()
	if !c.pooled {
		return
	}
	c.pooled = false
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

// closeIdle closes every pooled connection without a running attempt.
func (p *h3Pool) closeIdle() {
	p.mu.Lock()
	var idle []*h3Conn
	for _, list := range p.conns {
		for _, c := range list {
			if c.active == 0 {
				idle = append(idle, c)
			}
		}
	}
	for _, c := range idle {
		p.retireLocked(c)
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// idleCount returns the number of pooled connections without a running
// attempt.
func (p *h3Pool) idleCount() int {
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

// dialGate lets original attempts that missed the pool for one key
// share a dial.
type dialGate struct {
	mu      sync.Mutex
	dialing map[connKey]chan struct{} // closed when the dial for the key ends
}

// join returns, when another attempt is dialing for key, a channel closed
// when that dial ends (the caller then tries the pool again); otherwise
// the caller dials, and calls the returned function once the connection
// is added or the dial failed.
func (g *dialGate) join(key connKey) (<-chan struct{}, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.dialing[key]; ok {
		return ch, nil
	}
	if g.dialing == nil {
		g.dialing = map[connKey]chan struct{}{}
	}
	ch := make(chan struct{})
	g.dialing[key] = ch
	return nil, func() {
		g.mu.Lock()
		delete(g.dialing, key)
		g.mu.Unlock()
		close(ch)
	}
}

// acquireShared is how an attempt gets a multiplexed connection (HTTP/2,
// HTTP/3): for an original attempt (pooled) a pooled one that take finds,
// else a new one from dial, which add registers; a resend always dials.
// Original attempts that miss the pool together share one dial through
// gate: the others wait for it (under their own acquisition deadline),
// then try the pool again, and dial themselves only when the new
// connection cannot take them either. take may end the search with an
// error (for example ALPN's answer under ProtocolNegotiate).
func acquireShared[C comparable](ctx context.Context, gate *dialGate, key connKey, pooled bool,
	take func() (c C, reused bool, err error), dial func() (C, error), add func(C)) (C, bool, error) {
	var zero C
	var dialed func()
	for pooled {
		c, reused, err := take()
		if err != nil {
			return zero, false, err
		}
		if c != zero {
			return c, reused, nil
		}
		wait, lead := gate.join(key)
		if lead != nil {
			dialed = lead
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return zero, false, context.Cause(ctx)
		}
	}
	c, err := dial()
	if err == nil {
		add(c)
	}
	if dialed != nil {
		dialed()
	}
	if err != nil {
		return zero, false, err
	}
	return c, false, nil
}
