// Package pool holds a Transport's connections: the idle HTTP/1.1 pool
// (Idle), the multiplexed HTTP/2 and HTTP/3 pool (Mux), the per-route
// connection limit they share (Limit), and the bounded memos of what was
// learned about destinations (Memo). Every structure here has a bound
// and a default; none knows a protocol.
package pool

import "github.com/replaysafe/replaysafe/fsm/route"

// Key is a route's identity: connections never cross keys. Without
// proxies a route is the scheme and the destination with its effective
// port.
type Key struct {
	Scheme string // "http" or "https"
	Addr   string // host:port, the port made explicit
	Host   string // the host alone, for TLS ServerName

	// Route is the route's identity, proxies and credentials included
	// (fsm/route).
	Route route.Key
}
