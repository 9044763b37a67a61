package replaysafe

import "sync"

// maxMemo bounds the entries of every memo a Transport keeps about
// destinations (ALPN answers, broken QUIC routes, Alt-Svc
// advertisements): past it, stale entries go first, then an arbitrary
// one, so new destinations are always learned and the map never grows.
const maxMemo = 4096

// memo is a bounded map, safe for concurrent use, of what a Transport
// learned about destinations.
type memo[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
	// stale, if set, reports an entry that may be dropped first when the
	// memo is full (an expired advertisement, an old failure).
	stale func(V) bool
}

func (c *memo[K, V]) load(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[K, V]) store(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[K]V{}
	}
	if _, known := c.m[k]; !known && len(c.m) >= maxMemo {
		c.evictLocked()
	}
	c.m[k] = v
}

// evictLocked drops the stale entries, or one entry when none is.
func (c *memo[K, V]) evictLocked() {
	if c.stale != nil {
		for k, v := range c.m {
			if c.stale(v) {
				delete(c.m, k)
			}
		}
	}
	if len(c.m) < maxMemo {
		return
	}
	for k := range c.m {
		delete(c.m, k)
		return
	}
}

func (c *memo[K, V]) delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

func (c *memo[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
