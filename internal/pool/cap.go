package pool

import (
	"container/list"
	"sync"
)

// IdleCap bounds the idle connections of a Transport's pools together
// (MaxIdleConns): every pool registers a connection when it goes idle and
// withdraws it when an attempt takes it or it closes. When a new idle
// connection would pass the bound, the one idle the longest, in any pool,
// is evicted: its pool closes it unless an attempt took it meanwhile. A
// nil *IdleCap bounds nothing.
type IdleCap struct {
	max int

	mu  sync.Mutex
	lru list.List // of *IdleEntry, the longest idle first
}

// IdleEntry is a connection's place in an IdleCap while it is idle.
type IdleEntry struct {
	elem  *list.Element // nil while not registered
	evict func()        // closes the connection if it is still idle
}

// NewIdleCap returns a cap of max idle connections; nil when max <= 0.
func NewIdleCap(max int) *IdleCap {
	if max <= 0 {
		return nil
	}
	return &IdleCap{max: max}
}

// Len returns the idle connections registered.
func (c *IdleCap) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
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
	if e.elem != nil {
		c.lru.MoveToBack(e.elem)
	} else {
		e.elem = c.lru.PushBack(e)
	}
	var out []*IdleEntry
	for c.lru.Len() > c.max {
		old := c.lru.Remove(c.lru.Front()).(*IdleEntry)
		old.elem = nil
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
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
}

// evictAll calls the evict of each of victims.
func evictAll(victims []*IdleEntry) {
	for _, v := range victims {
		v.evict()
	}
}
