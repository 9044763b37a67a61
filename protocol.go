package replaysafe

import "github.com/replaysafe/replaysafe/fsm/plan"

// Protocol is a Transport's protocol policy: which HTTP versions it
// speaks to an origin. It is the dispatch plan's policy (fsm/plan), so
// the plan of every call is made from it as it is, and it is part of
// every route: connections made under one policy never serve another.
// String returns its name: http1, http2, negotiate, http3, prefer-http3
// or discover-http3.
type Protocol = plan.Policy

// Protocol policies.
const (
	// ProtocolNegotiate lets ALPN decide over TLS: it offers "h2" and
	// "http/1.1" and speaks what the server selects. Cleartext (http)
	// URLs use HTTP/1.1. The zero value and the default, as in net/http's
	// DefaultTransport.
	ProtocolNegotiate = plan.Negotiate
	// ProtocolHTTP1 speaks HTTP/1.1 only: ALPN offers "http/1.1" alone
	// over TLS. The opt-out of HTTP/2, as net/http's
	// Transport.Protocols with HTTP1 alone.
	ProtocolHTTP1 = plan.HTTP1
	// ProtocolHTTP2 speaks HTTP/2 only: over TLS (https) ALPN offers "h2"
	// alone and a server that does not select it fails the acquisition;
	// over cleartext (http) it speaks h2c with prior knowledge (RFC 9113
	// §3.3), with no upgrade.
	ProtocolHTTP2 = plan.HTTP2
	// ProtocolHTTP3 speaks HTTP/3 only, over QUIC (RFC 9114): https URLs
	// on direct routes. An http URL fails, and so does a route through a
	// proxy (no CONNECT-UDP).
	ProtocolHTTP3 = plan.HTTP3
	// ProtocolPreferHTTP3 tries HTTP/3 first for https URLs on direct
	// routes. When no QUIC connection can be had (nothing of the request
	// was sent then), the call goes over TCP as under ProtocolNegotiate,
	// and so do the route's calls for the next five minutes. Proxied
	// routes and http URLs use TCP as under ProtocolNegotiate.
	ProtocolPreferHTTP3 = plan.PreferHTTP3
	// ProtocolDiscoverHTTP3 speaks as ProtocolNegotiate until an https
	// origin advertises HTTP/3 on its own host in an Alt-Svc response
	// header field (RFC 7838); its direct routes then use HTTP/3 at the
	// advertised port while the advertisement lasts ("ma", 24 hours by
	// default), falling back to TCP as under ProtocolPreferHTTP3 when no
	// QUIC connection can be had, which also drops the advertisement.
	// "Alt-Svc: clear" drops it too. Alternatives on other hosts are
	// ignored.
	ProtocolDiscoverHTTP3 = plan.DiscoverHTTP3
)
