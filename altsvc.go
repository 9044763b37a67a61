package replaysafe

import (
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/internal/altsvc"
)

// altSvcCache keeps, per origin (scheme and host:port), the HTTP/3
// alternative it advertised.
// It is a memo: bounded, expired advertisements dropped first when full.
type altSvcCache struct {
	memo[string, altsvc.H3]
}

func newAltSvcCache() *altSvcCache {
	c := &altSvcCache{}
	c.stale = func(a altsvc.H3) bool { return !time.Now().Before(a.Expires) }
	return c
}

// lookup returns the live HTTP/3 alternative of origin.
func (c *altSvcCache) lookup(origin string, now time.Time) (altsvc.H3, bool) {
	a, ok := c.load(origin)
	if ok && !now.Before(a.Expires) {
		c.delete(origin)
		ok = false
	}
	return a, ok
}

// learn records what a response from origin on host, received at now,
// said, if anything.
func (c *altSvcCache) learn(origin, host string, h http.Header, now time.Time) {
	values := h.Values("Alt-Svc")
	if len(values) == 0 {
		return
	}
	alt, res := altsvc.Parse(values, host, now)
	switch res {
	case altsvc.Cleared:
		c.delete(origin)
	case altsvc.Advertised:
		c.store(origin, alt)
	}
}

// forget drops origin's alternative: its QUIC connection failed.
func (c *altSvcCache) forget(origin string) { c.delete(origin) }
