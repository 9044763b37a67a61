package altsvc

import (
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/internal/pool"
)

// Cache keeps, per origin (scheme and host:port), the HTTP/3
// alternative it advertised.
// It is a memo: bounded, expired advertisements dropped first when full.
type Cache struct {
	pool.Memo[string, H3]
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	c := &Cache{}
	c.Stale = func(a H3) bool { return !time.Now().Before(a.Expires) }
	return c
}

// Lookup returns the live HTTP/3 alternative of origin.
func (c *Cache) Lookup(origin string, now time.Time) (H3, bool) {
	a, ok := c.Load(origin)
	if ok && !now.Before(a.Expires) {
		c.Delete(origin)
		ok = false
	}
	return a, ok
}

// Learn records what a response from origin on host, received at now,
// said, if anything.
func (c *Cache) Learn(origin, host string, h http.Header, now time.Time) {
	values := h.Values("Alt-Svc")
	if len(values) == 0 {
		return
	}
	alt, res := Parse(values, host, now)
	switch res {
	case Cleared:
		c.Delete(origin)
	case Advertised:
		c.Store(origin, alt)
	}
}

// Forget drops origin's alternative: its QUIC connection failed.
func (c *Cache) Forget(origin string) { c.Delete(origin) }
