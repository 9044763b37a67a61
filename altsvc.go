package replaysafe

import (
	"net/http"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/internal/altsvc"
)

// altSvcCache keeps, per origin (scheme and host:port), the HTTP/3
// alternative it advertised.
type altSvcCache struct {
	mu sync.Mutex
	m  map[string]altsvc.H3
}

// maxAltSvc bounds the origins an altSvcCache remembers.
const maxAltSvc = 4096

// lookup returns the live HTTP/3 alternative of origin.
func (c *altSvcCache) lookup(origin string, now time.Time) (altsvc.H3, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[origin]
	if ok && !now.Before(a.Expires) {
		delete(c.m, origin)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	switch res {
	case altsvc.Cleared:
		delete(c.m, origin)
	case altsvc.Advertised:
		if _, known := c.m[origin]; !known && len(c.m) >= maxAltSvc {
			return
		}
		if c.m == nil {
			c.m = map[string]altsvc.H3{}
		}
		c.m[origin] = alt
	}
}

// forget drops origin's alternative: its QUIC connection failed.
func (c *altSvcCache) forget(origin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, origin)
}
