package pool

import "sync"

// MaxMemo bounds the entries of every memo a Transport keeps about
// destinations (ALPN answers, broken QUIC routes, Alt-Svc
// advertisements): past it, Stale entries go first, then an arbitrary
// one, so new destinations are always learned and the map never grows.
const MaxMemo = 4096

// Memo is a bounded map, safe for concurrent use, of what a Transport
// learned about destinations.
type Memo[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
	// Stale, if set, reports an entry that may be dropped first when the
	// memo is full (an expired advertisement, an old failure).
	Stale func(V) bool
}

// Load returns the entry for k, if any.
func (c *Memo[K, V]) Load(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

// Store sets the entry for k, evicting first when the memo is full.
func (c *Memo[K, V]) Store(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[K]V{}
	}
	if _, known := c.m[k]; !known && len(c.m) >= MaxMemo {
		c.evictLocked()
	}
	c.m[k] = v
}

// evictLocked drops the Stale entries, or one entry when none is.
func (c *Memo[K, V]) evictLocked() {
	if c.Stale != nil {
		for k, v := range c.m {
			if c.Stale(v) {
				delete(c.m, k)
			}
		}
	}
	if len(c.m) < MaxMemo {
		return
	}
	for k := range c.m {
		delete(c.m, k)
		return
	}
}

// Delete drops the entry for k.
func (c *Memo[K, V]) Delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// Len returns the number of entries.
func (c *Memo[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
