package replaysafe

import (
	"crypto/tls"
	"net/http"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/adapters/h1"
)

// connKey is a route's identity: connections never cross keys. Without
// proxies a route is the scheme and the destination with its effective
// port.
type connKey struct {
	scheme string // "http" or "https"
	addr   string // host:port, the port made explicit
	host   string // the host alone, for TLS ServerName

	// route is the route's identity, proxies and credentials included
	// (route.go).
	route route.Key
}

// persistConn is one HTTP/1.1 connection: net/http's single-connection
// client over the counting Conn it was given.
type persistConn struct {
	key  connKey
	cc   *http.ClientConn
	conn *h1.Conn
	tls  *tls.ConnectionState // nil over plain TCP

	// Guarded by pool.mu while the connection is idle. idleTimer is
	// made on the first put and reset on later ones; a stopped one that
	// fired anyway finds the connection idle for less than the limit
	// (expire), or not idle at all, and does nothing. (muxPool leaves
	// its timer set across attempts instead; here that measured slower,
	// see docs/performance.md.)
	idleSince time.Time
	idleTimer *time.Timer
	idleRef   *idleRef // what idleTimer's function holds of the connection

	limit       *connLimit // where its room is counted
	closeOnce   sync.Once
	releaseOnce sync.Once
}

// close closes the connection, and gives its room in the connection
// limit back; net/http's loops exit with it.
func (pc *persistConn) close() {
	pc.closeOnce.Do(func() { pc.cc.Close() })
	pc.release()
}

// release gives the connection's room in the limit back, once: when it
// closes, or when the caller took it over (a 101 response). Its idle
// timer stops and lets go of it.
//
// The idle timer's fields are read without the pool's lock: put wrote
// them under it before the pool could hand pc to whoever releases it.
func (pc *persistConn) release() {
	pc.releaseOnce.Do(func() {
		if pc.idleTimer != nil {
			pc.idleTimer.Stop()
		}
		pc.idleRef.drop()
		pc.limit.closed(pc.key)
	})
}

// pool holds idle connections per route, most recently used last.
type pool struct {
	max     int           // per key; <= 0 keeps none
	timeout time.Duration // idle limit; <= 0 none
	limit   *connLimit    // woken when a connection comes back

	mu    sync.Mutex
	idle  map[connKey][]*persistConn
	spare []*persistConn // an emptied list's array (capacity at most max), reused by put
}

func newPool(max int, timeout time.Duration, limit *connLimit) *pool {
	return &pool{max: max, timeout: timeout, limit: limit, idle: map[connKey][]*persistConn{}}
}

// get removes and returns the most recently pooled connection for key, or
// nil. The caller checks that it is still usable.
func (p *pool) get(key connKey) *persistConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	if len(list) == 0 {
		return nil
	}
	pc := list[len(list)-1]
	list[len(list)-1] = nil
	if len(list) == 1 {
		delete(p.idle, key)
		if p.spare == nil {
			p.spare = list[:0] // for the next key put finds empty
		}
	} else {
		p.idle[key] = list[:len(list)-1]
	}
	if pc.idleTimer != nil {
		pc.idleTimer.Stop()
	}
	return pc
}

// put pools pc after a clean, complete exchange, or closes it when it is
// no longer usable or the pool for its key is full.
func (p *pool) put(pc *persistConn) {
	pc.conn.Detach()
	if pc.cc.Err() != nil || pc.cc.Available() != 1 || pc.conn.Stale() {
		pc.close()
		return
	}
	now := time.Now() // read before the lock every pool user takes
	p.mu.Lock()
	list, ok := p.idle[pc.key]
	if len(list) >= p.max {
		p.mu.Unlock()
		pc.close()
		return
	}
	defer p.limit.notify(pc.key) // an attempt waiting at the limit may take it
	defer p.mu.Unlock()
	pc.idleSince = now
	if p.timeout > 0 {
		if pc.idleTimer == nil {
			pc.idleRef, pc.idleTimer = startIdleTimer(pc, p.timeout, p.expire)
		} else {
			pc.idleTimer.Reset(p.timeout)
		}
	}
	if !ok && p.spare != nil {
		list, p.spare = p.spare, nil
	}
	p.idle[pc.key] = append(list, pc)
}

// idleRef is what a connection's idle timer holds of it: the connection
// until it closes, nothing after (drop). The runtime keeps a stopped
// timer until it next cleans its timer heap, and one that was not
// stopped until it fires: either way the timer then pins this small
// value, not a closed connection with its buffers.
type idleRef struct {
	mu   sync.Mutex
	conn any
}

// startIdleTimer returns conn's idle timer, which calls expire with
// conn after d, and the idleRef through which it holds conn: once the ref
// is dropped, the timer neither holds conn nor calls expire.
func startIdleTimer[C any](conn C, d time.Duration, expire func(C)) (*idleRef, *time.Timer) {
	ref := &idleRef{conn: conn}
	return ref, time.AfterFunc(d, func() {
		if c, ok := ref.get().(C); ok {
			expire(c)
		}
	})
}

func (r *idleRef) get() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

// drop lets go of the connection; on nil it does nothing.
func (r *idleRef) drop() {
	if r != nil {
		r.mu.Lock()
		r.conn = nil
		r.mu.Unlock()
	}
}

// expire closes pc if it is still idle and has been for the whole limit:
// a timer stopped too late for an earlier idle period finds it pooled
// again more recently, and leaves it.
func (p *pool) expire(pc *persistConn) {
	p.mu.Lock()
	if time.Since(pc.idleSince) < p.timeout {
		p.mu.Unlock()
		return
	}
	list := p.idle[pc.key]
	found := false
	for i, c := range list {
		if c == pc {
			list = append(list[:i], list[i+1:]...)
			found = true
			break
		}
	}
	if found {
		if len(list) == 0 {
			delete(p.idle, pc.key)
		} else {
			p.idle[pc.key] = list
		}
	}
	p.mu.Unlock()
	if found {
		pc.close()
	}
}

// closeIdle closes every idle connection.
func (p *pool) closeIdle() {
	p.mu.Lock()
	var all []*persistConn
	for key, list := range p.idle {
		for _, pc := range list {
			if pc.idleTimer != nil {
				pc.idleTimer.Stop()
			}
			all = append(all, pc)
		}
		delete(p.idle, key)
	}
	p.mu.Unlock()
	for _, pc := range all {
		pc.close()
	}
}

// idleCount returns the number of idle connections.
func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.idle {
		n += len(list)
	}
	return n
}
