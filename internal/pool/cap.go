package pool

import "sync"

// IdleCap bounds the idle connections of a Transport's pools together
// (MaxIdleConns): every pool registers a connection when it goes idle and
// withdraws it when an attempt takes it or it closes. When a new idle
// connection would pass the bound, the one idle the longest, in any pool,
// is evicted: its pool closes it unless an attempt took it meanwhile. A
// nil *IdleCap bounds nothing.
type IdleCap struct {
	max int

	mu  sync.Mutex
	lru IdleEntry // the ring's anchor: lru.next is the longest idle, lru.prev the latest
	n   int       // entries registered
}

// IdleEntry is a connection's place in an IdleCap while it is idle: a
// link in the cap's ring, held in the connection's own record, so that
// registering allocates nothing.
type IdleEntry struct {
	prev, next *IdleEntry // nil while not registered
	evict      func()     // closes the connection if it is still idle
}

// NewIdleCap returns a cap of max idle connections; nil when max <= 0.
func NewIdleCap(max int) *IdleCap {
	if max <= 0 {
		return nil
	}
	c := &IdleCap{max: max}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// Len returns the idle connections registered.
func (c *IdleCap) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// add registers e, whose evict was set, and returns the entries to
// evict to keep the bound: the caller calls their evict without holding
// a pool's lock.
func (c *IdleCap) add(e *IdleEntry) []*IdleEntry {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.next != nil {
		c.unlinkLocked(e)
	}
	e.prev, e.next = c.lru.prev, &c.lru
	e.prev.next, c.lru.prev = e, e
	c.n++
	var out []*IdleEntry
	for c.n > c.max {
		old := c.lru.next
		c.unlinkLocked(old)
		out = append(out, old)
	}
	return out
}

// remove withdraws e, if registered.
func (c *IdleCap) remove(e *IdleEntry) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.next != nil {
		c.unlinkLocked(e)
	}
}

// unlinkLocked takes e, registered, out of the ring.
func (c *IdleCap) unlinkLocked(e *IdleEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	c.n--
}

// evictAll calls the evict of each of victims.
func evictAll(victims []*IdleEntry) {
	for _, v := range victims {
		v.evict()
	}
}
