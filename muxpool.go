package replaysafe

import (
	"context"
	"sync"
	"time"
)

// muxState is a multiplexed connection's record in its muxPool, guarded
// by the pool's lock.
type muxState struct {
	key     connKey
	served  int  // attempts that ended in a clean, complete exchange
	active  int  // attempts running on it
	retired bool // takes no new attempt; closes when active reaches 0
	pooled  bool // in muxPool.conns
	// idleTimer, made once and reset, closes the connection after the
	// pool's idleTimeout without an attempt; idleSince is when the last
	// one ended. A timer that fires anyway finds the connection busy, or
	// idle for less than the limit, and does nothing.
	idleTimer *time.Timer
	idleSince time.Time
}

// muxConn is what a muxPool holds: an HTTP/2 or HTTP/3 connection.
type muxConn interface {
	comparable
	// mux returns the connection's pool record.
	mux() *muxState
	// reserve takes room for one more attempt, or reports that there is
	// none now.
	reserve() bool
	// gone reports, after reserve refused, whether the connection will
	// never take an attempt again (closed, closing, or a GOAWAY came).
	gone() bool
	// close closes the connection.
	close()
}

// muxPool holds the live multiplexed connections per route: an attempt
// takes room on the first pooled connection whose reserve succeeds, and
// the caller dials a new connection when none can (acquireShared).
type muxPool[C muxConn] struct {
	keep        bool          // false: every connection closes once its attempts are done
	idleTimeout time.Duration // > 0: close a connection idle this long (else the stack does)
	gate        dialGate      // original attempts that missed the pool share a dial

	mu    sync.Mutex
	conns map[connKey][]C
}

func newMuxPool[C muxConn](keep bool, idleTimeout time.Duration) *muxPool[C] {
	return &muxPool[C]{keep: keep, idleTimeout: idleTimeout, conns: map[connKey][]C{}}
}

// take reserves room for one attempt on a pooled connection for key, and
// reports whether that connection served an earlier exchange (reused as
// fsm means it, not merely carrying another attempt right now); it
// returns the zero C when none has room. Connections that are gone leave
// the pool on the way: those met before the one that takes the attempt;
// any behind it leave at a later take. gone is asked only when reserve
// refused (see h2Conn.gone for why).
func (p *muxPool[C]) take(key connKey) (C, bool) {
	var dead []C
	defer func() {
		for _, c := range dead {
			c.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.conns[key]
	kept := list[:0]
	var got, zero C
	for _, c := range list {
		switch m := c.mux(); {
		case got != zero:
			kept = append(kept, c)
		case c.reserve():
			got = c
			m.active++
			p.stopIdleLocked(m)
			kept = append(kept, c)
		case c.gone():
			m.retired, m.pooled = true, false
			if m.active == 0 {
				dead = append(dead, c)
			}
		default:
			kept = append(kept, c) // full: at the server's concurrency limit
		}
	}
	clear(list[len(kept):])
	if len(kept) == 0 {
		delete(p.conns, key)
	} else {
		p.conns[key] = kept
	}
	if got == zero {
		return zero, false
	}
	return got, got.mux().served > 0
}

// add registers c, just dialed, with one attempt running on it.
func (p *muxPool[C]) add(c C) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := c.mux()
	m.active = 1
	if !p.keep {
		m.retired = true
		return
	}
	m.pooled = true
	p.conns[m.key] = append(p.conns[m.key], c)
}

// done ends one attempt on c; clean reports a complete exchange.
func (p *muxPool[C]) done(c C, clean bool) {
	p.mu.Lock()
	m := c.mux()
	m.active--
	if clean {
		m.served++
	}
	closeIt := m.retired && m.active == 0
	if !closeIt && m.active == 0 && p.idleTimeout > 0 {
		m.idleSince = time.Now()
		if m.idleTimer == nil {
			m.idleTimer = time.AfterFunc(p.idleTimeout, func() { p.idleExpired(c) })
		} else {
			m.idleTimer.Reset(p.idleTimeout)
		}
	}
	p.mu.Unlock()
	if closeIt {
		c.close()
	}
}

func (p *muxPool[C]) stopIdleLocked(m *muxState) {
	if m.idleTimer != nil {
		m.idleTimer.Stop()
	}
}

// idleExpired closes c when it is still idle, and has been for the
// whole limit.
func (p *muxPool[C]) idleExpired(c C) {
	p.mu.Lock()
	m := c.mux()
	idle := m.active == 0 && !m.retired && time.Since(m.idleSince) >= p.idleTimeout
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
func (p *muxPool[C]) retire(c C) {
	p.mu.Lock()
	p.retireLocked(c)
	idle := c.mux().active == 0
	p.mu.Unlock()
	if idle {
		c.close()
	}
}

func (p *muxPool[C]) retireLocked(c C) {
	m := c.mux()
	m.retired = true
	p.stopIdleLocked(m)
	if !m.pooled {
		return
	}
	m.pooled = false
	list := p.conns[m.key]
	for i, x := range list {
		if x == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.conns, m.key)
	} else {
		p.conns[m.key] = list
	}
}

// closeIdle closes every pooled connection without a running attempt.
func (p *muxPool[C]) closeIdle() {
	p.mu.Lock()
	var idle []C
	for _, list := range p.conns {
		for _, c := range list {
			if c.mux().active == 0 {
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
func (p *muxPool[C]) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.conns {
		for _, c := range list {
			if c.mux().active == 0 {
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
