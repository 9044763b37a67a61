package driver

import (
	"container/list"
	"crypto/tls"
	"sync"

	"github.com/replaysafe/replaysafe/internal/pool"
)

// DefaultSessionTickets bounds a Transport's TLS session tickets for
// QUIC resumption and early data (Config.EarlyData): the most recently
// used routes keep theirs, the least recently used lose it first.
const DefaultSessionTickets = 256

// sessionCache holds a Transport's TLS session tickets, at most max of
// them, the least recently used dropped first. Each route sees only its
// own (sessionCache.route): a ticket one route learned never resumes a
// connection of another, so early data goes only to the route that
// issued the ticket. It is safe for concurrent use.
type sessionCache struct {
	mu    sync.Mutex
	max   int
	order list.List // of *sessionEntry, most recently used first
	items map[string]*list.Element
}

type sessionEntry struct {
	key   string
	state *tls.ClientSessionState
}

// newSessionCache returns a cache of at most max tickets;
// DefaultSessionTickets when max is not positive.
func newSessionCache(max int) *sessionCache {
	if max <= 0 {
		max = DefaultSessionTickets
	}
	return &sessionCache{max: max, items: map[string]*list.Element{}}
}

// route returns the tls.ClientSessionCache of one route: the TLS
// library's session keys prefixed with the route's identity.
func (c *sessionCache) route(key pool.Key) tls.ClientSessionCache {
	return routeSessions{c: c, prefix: key.Scheme + "://" + key.Addr + "/" + key.Host + "\x00" + key.Route.String() + "\x00"}
}

// Len returns the number of tickets held.
func (c *sessionCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *sessionCache) get(key string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*sessionEntry).state, true
}

// put stores state under key; a nil state removes the key, as
// tls.ClientSessionCache asks.
func (c *sessionCache) put(key string, state *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		if state == nil {
			c.order.Remove(el)
			delete(c.items, key)
			return
		}
		el.Value.(*sessionEntry).state = state
		c.order.MoveToFront(el)
		return
	}
	if state == nil {
		return
	}
	c.items[key] = c.order.PushFront(&sessionEntry{key: key, state: state})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*sessionEntry).key)
	}
}

// routeSessions is one route's view of a sessionCache.
type routeSessions struct {
	c      *sessionCache
	prefix string
}

func (r routeSessions) Get(key string) (*tls.ClientSessionState, bool) {
	return r.c.get(r.prefix + key)
}

func (r routeSessions) Put(key string, state *tls.ClientSessionState) {
	r.c.put(r.prefix+key, state)
}
