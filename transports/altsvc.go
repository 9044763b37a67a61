package transports

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// altSvcDefaultMaxAge is an advertisement's lifetime without "ma"
// (RFC 7838 §3.1: 24 hours).
const altSvcDefaultMaxAge = 24 * time.Hour

// altSvcH3 is the HTTP/3 alternative an origin advertised: the UDP port on
// the origin's own host, and until when the advertisement holds.
type altSvcH3 struct {
	port    uint16
	expires time.Time
}

// parseAltSvc reads the Alt-Svc field values of a response from host
// (RFC 7838 §3) and returns what they say of HTTP/3 on the same host:
// clear when the origin withdrew every alternative ("clear"), else the
// first "h3" alternative whose authority names no other host, if any.
// Alternatives on another host are ignored: replaysafe connects only to
// the host the caller named. Malformed values are skipped, never an error.
func parseAltSvc(values []string, host string) (alt altSvcH3, clear, ok bool) {
	for _, v := range values {
		for _, item := range splitOutsideQuotes(v, ',') {
			item = strings.TrimSpace(item)
			if item == "clear" {
				return altSvcH3{}, true, false
			}
			params := splitOutsideQuotes(item, ';')
			proto, authority, found := strings.Cut(strings.TrimSpace(params[0]), "=")
			if !found || strings.TrimSpace(proto) != "h3" {
				continue
			}
			authority, err := strconv.Unquote(strings.TrimSpace(authority))
			if err != nil {
				continue
			}
			h, p, err := net.SplitHostPort(authority)
			if err != nil || (h != "" && !strings.EqualFold(h, host)) {
				continue
			}
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil || port == 0 {
				continue
			}
			maxAge := altSvcDefaultMaxAge
			for _, param := range params[1:] {
				k, v, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.TrimSpace(k) != "ma" {
					continue
				}
				if n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(v), `"`), 10, 32); err == nil {
					maxAge = time.Duration(n) * time.Second
				}
			}
			return altSvcH3{port: uint16(port), expires: time.Now().Add(maxAge)}, false, true
		}
	}
	return altSvcH3{}, false, false
}

// splitOutsideQuotes splits s at every sep that is not inside a
// quoted-string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// altSvcCache keeps, per origin (scheme and host:port), the HTTP/3
// alternative it advertised.
type altSvcCache struct {
	mu sync.Mutex
	m  map[string]altSvcH3
}

// maxAltSvc bounds the origins an altSvcCache remembers.
const maxAltSvc = 4096

// lookup returns the live HTTP/3 alternative of origin.
func (c *altSvcCache) lookup(origin string, now time.Time) (altSvcH3, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[origin]
	if ok && !now.Before(a.expires) {
		delete(c.m, origin)
		ok = false
	}
	return a, ok
}

// learn records what a response from origin on host said, if anything.
func (c *altSvcCache) learn(origin, host string, h http.Header) {
	values := h.Values("Alt-Svc")
	if len(values) == 0 {
		return
	}
	alt, clear, ok := parseAltSvc(values, host)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case clear:
		delete(c.m, origin)
	case ok && (len(c.m) < maxAltSvc || c.m[origin] != altSvcH3{}):
		if c.m == nil {
			c.m = map[string]altSvcH3{}
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
