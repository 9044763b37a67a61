package pool

import (
	"sync"
	"time"
)

// IdleConn is what an Idle pool holds: a connection that carries one
// exchange at a time (HTTP/1.1).
type IdleConn interface {
	comparable
	// Idle returns the connection's record in the pool.
	Idle() *IdleState
	// Close closes the connection and gives its room in the Limit back.
	Close()
}

// IdleState is a connection's record in its Idle pool: its route, and
// its idle timer, guarded by the pool's lock while the connection is
// idle. The timer is made on the first Put and reset on later ones; a
// stopped one that fired anyway finds the connection idle for less than
// the limit (expire), or not idle at all, and does nothing. (Mux leaves
// its timer set across attempts instead; here that measured slower, see
// docs/performance.md.)
type IdleState struct {
	Key Key

	since time.Time
	ref   *idleRef  // the idle timer, and what its function holds of the connection
	entry IdleEntry // its place in the IdleCap while idle
}

// IdleSince returns when the connection was last put in the pool.
func (s *IdleState) IdleSince() time.Time { return s.since }

// Release stops the connection's idle timer and lets go of what the
// timer holds of it: call it once, when the connection closes or the
// caller took it over. The fields are read without the pool's lock: Put
// wrote them under it before the pool could hand the connection to
// whoever releases it.
func (s *IdleState) Release() {
	s.ref.stop()
	s.ref.drop()
}

// Idle holds idle connections per route, most recently used last.
type Idle[C IdleConn] struct {
	max     int           // per key; <= 0 keeps none
	timeout time.Duration // idle limit; <= 0 none
	limit   *Limit        // woken when a connection comes back
	cap     *IdleCap      // every pool's idle connections together; nil: no bound
	fire    func(C)       // the idle timers' function (expire), made once, not per connection

	mu    sync.Mutex
	idle  map[Key][]C
	spare []C // an emptied list's array (capacity at most max), reused by Put
}

// NewIdle returns a pool that keeps at most max idle connections per
// route (none when max <= 0), each for at most timeout (no limit when
// timeout <= 0), within cap's bound on every pool's idle connections
// (nil: none), and wakes limit's waiters when one comes back.
func NewIdle[C IdleConn](max int, timeout time.Duration, limit *Limit, cap *IdleCap) *Idle[C] {
	p := &Idle[C]{max: max, timeout: timeout, limit: limit, cap: cap, idle: map[Key][]C{}}
	p.fire = p.expire
	return p
}

// Get removes and returns the most recently pooled connection for key,
// and whether there was one. The caller checks that it is still usable.
// A connection idle for the whole limit is never handed out, even when
// its timer has not fired yet (a loaded machine runs timers late, and a
// server that closes idle connections at the same limit may be closing
// it now): Get closes it, and every older one for key with it.
func (p *Idle[C]) Get(key Key) (C, bool) {
	var zero C
	var now time.Time
	if p.timeout > 0 {
		now = time.Now() // read before the lock every pool user takes
	}
	p.mu.Lock()
	list := p.idle[key]
	if len(list) == 0 {
		p.mu.Unlock()
		return zero, false
	}
	if last := list[len(list)-1].Idle(); p.timeout > 0 && now.Sub(last.since) >= p.timeout {
		// Most recently used last: every connection of the list is as
		// old or older.
		stale := append([]C(nil), list...)
		for _, c := range list {
			p.cap.remove(&c.Idle().entry)
		}
		clear(list)
		delete(p.idle, key)
		p.mu.Unlock()
		for _, c := range stale {
			c.Close()
		}
		return zero, false
	}
	defer p.mu.Unlock()
	c := list[len(list)-1]
	list[len(list)-1] = zero
	if len(list) == 1 {
		delete(p.idle, key)
		if p.spare == nil {
			p.spare = list[:0] // for the next key Put finds empty
		}
	} else {
		p.idle[key] = list[:len(list)-1]
	}
	s := c.Idle()
	s.ref.stop()
	p.cap.remove(&s.entry)
	return c, true
}

// Put pools c, which the caller found reusable after a clean, complete
// exchange, or closes it when the pool for its route is full. When every
// pool's idle connections together pass the IdleCap, the one idle the
// longest closes.
func (p *Idle[C]) Put(c C) {
	s := c.Idle()
	now := time.Now() // read before the lock every pool user takes
	p.mu.Lock()
	list, ok := p.idle[s.Key]
	if len(list) >= p.max {
		p.mu.Unlock()
		c.Close()
		return
	}
	if p.cap != nil && s.entry.evict == nil {
		s.entry.evict = func() { p.evict(c) } // made once per connection
	}
	defer func() { evictAll(p.cap.add(&s.entry)) }()
	defer p.limit.Notify(s.Key) // an attempt waiting at the limit may take it
	defer p.mu.Unlock()
	s.since = now
	if p.timeout > 0 {
		if s.ref == nil {
			s.ref = startIdleTimer(c, p.timeout, p.fire)
		} else {
			s.ref.timer.Reset(p.timeout)
		}
	}
	if !ok && p.spare != nil {
		list, p.spare = p.spare, nil
	}
	p.idle[s.Key] = append(list, c)
}

// idleRef is a connection's idle timer and what the timer holds of it:
// the connection until it closes, nothing after (drop). The runtime
// keeps a stopped timer until it next cleans its timer heap, and one
// that was not stopped until it fires: either way the timer then pins
// this small value, not a closed connection with its buffers.
type idleRef struct {
	timer *time.Timer // set before the ref is shared, never changed
	mu    sync.Mutex
	conn  any
}

// startIdleTimer returns the idleRef of conn's idle timer, which calls
// expire with conn after d: once the ref is dropped, the timer neither
// holds conn nor calls expire.
func startIdleTimer[C any](conn C, d time.Duration, expire func(C)) *idleRef {
	ref := &idleRef{conn: conn}
	ref.timer = time.AfterFunc(d, func() {
		if c, ok := ref.get().(C); ok {
			expire(c)
		}
	})
	return ref
}

// stop stops the timer; on nil it does nothing.
func (r *idleRef) stop() {
	if r != nil {
		r.timer.Stop()
	}
}

func (r *idleRef) get() any {
	if r == nil {
		return nil
	}
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

// expire closes c if it is still idle and has been for the whole limit:
// a timer stopped too late for an earlier idle period finds it pooled
// again more recently, and leaves it.
func (p *Idle[C]) expire(c C) { p.drop(c, true) }

// evict closes c if it is still idle: the IdleCap chose it.
func (p *Idle[C]) evict(c C) { p.drop(c, false) }

// drop takes c out of the pool and closes it, if it is still idle (and,
// with timed, has been for the whole limit).
func (p *Idle[C]) drop(c C, timed bool) {
	s := c.Idle()
	p.mu.Lock()
	if timed && time.Since(s.since) < p.timeout {
		p.mu.Unlock()
		return
	}
	list := p.idle[s.Key]
	found := false
	for i, x := range list {
		if x == c {
			list = append(list[:i], list[i+1:]...)
			found = true
			break
		}
	}
	if found {
		if len(list) == 0 {
			delete(p.idle, s.Key)
		} else {
			p.idle[s.Key] = list
		}
		p.cap.remove(&s.entry)
	}
	p.mu.Unlock()
	if found {
		c.Close()
	}
}

// CloseIdle closes every idle connection.
func (p *Idle[C]) CloseIdle() {
	p.mu.Lock()
	var all []C
	for key, list := range p.idle {
		for _, c := range list {
			s := c.Idle()
			s.ref.stop()
			p.cap.remove(&s.entry)
			all = append(all, c)
		}
		delete(p.idle, key)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// IdleCount returns the number of idle connections.
func (p *Idle[C]) IdleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.idle {
		n += len(list)
	}
	return n
}

// Held returns what the connection's idle timer holds of it: the
// connection while it may expire, nil once it closed or was never idle.
func (s *IdleState) Held() any { return s.ref.get() }
