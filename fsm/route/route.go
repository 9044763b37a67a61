// Package route describes the route of one wire attempt and does the
// arithmetic of its connection-acquisition deadline. It is pure: it reads
// no clock, starts no goroutine and does no I/O; time arrives as Instant
// values on the caller's monotonic clock.
//
// A transport uses it in this order:
//
//  1. Before pool lookup, resolve one Route for the wire attempt with New
//     (destination, effective port, the NO_PROXY decision, the proxy chain
//     with credential identities, protocol policy). Look the pool up by
//     Route.Key, so a connection never serves another route or other
//     credentials.
//  2. Keep that Route for the whole attempt: pooled checkout, recovery of
//     a request handed back unsent, fresh acquisition and the automatic
//     resend all use it. A user-configured retry or a redirect is a new
//     attempt and resolves a new Route.
//  3. On a pool miss, Start one Budget before coordinating with other
//     acquisitions. It covers waiting for capacity, DNS, TCP, TLS to every
//     HTTPS proxy, CONNECT or SOCKS at every hop and TLS to the origin.
//  4. Before each step call Budget.Check with the step (and hop) about to
//     run, and bound the step by Budget.Remaining. When a step fails on a
//     timeout and Budget.Expired, report Budget.Exceeded: the error names
//     the step and hop that ran out of time.
//  5. A resend after a stale pooled connection starts fresh acquisition
//     with a new Budget (Budget.Renew); the request upload and the
//     response have timeouts of their own, outside this package.
//
// Reference: request-dispatch-guarantees, "Proxy Route Consistency" and
// "Proxy Establishment".
package route

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/replaysafe/replaysafe/fsm"
)

// Instant is a point on the caller's monotonic clock: fsm's own clock type,
// so an attempt's machine and its acquisition budget share instants.
type Instant = fsm.Instant

// Scheme is the origin's URI scheme.
type Scheme uint8

// Schemes.
// The line comment after each constant is its String (stringer -linecomment).
const (
	// SchemeUnknown is the zero value: not set; New rejects it.
	SchemeUnknown Scheme = iota // unknown
	// SchemeHTTP is http: default port 80.
	SchemeHTTP // http
	// SchemeHTTPS is https: default port 443, TLS to the origin.
	SchemeHTTPS // https
)

const schemeCount = SchemeHTTPS + 1

// ParseScheme maps "http" or "https", in any case (RFC 3986 §3.1), to a
// Scheme.
func ParseScheme(s string) (Scheme, bool) {
	return fsm.ParseEnum(strings.ToLower(s), schemeCount, false)
}

// DefaultPort is the port a URI of this scheme means when it names none
// (RFC 9110 §4.2.1, §4.2.2): 80 for http, 443 for https, 0 otherwise.
func (s Scheme) DefaultPort() uint16 {
	switch s {
	case SchemeHTTP:
		return 80
	case SchemeHTTPS:
		return 443
	}
	return 0
}

// ProxyKind is how the client talks to one proxy hop.
type ProxyKind uint8

// Proxy kinds.
const (
	// ProxyUnknown is the zero value: not set; New rejects it.
	ProxyUnknown ProxyKind = iota // unknown
	// ProxyHTTP is an HTTP proxy: CONNECT over cleartext.
	ProxyHTTP // http
	// ProxyHTTPS is an HTTPS proxy: TLS (ALPN http/1.1), then CONNECT.
	ProxyHTTPS // https
	// ProxySOCKS5 is a SOCKS5 proxy (RFC 1928); the proxy resolves host
	// names.
	ProxySOCKS5 // socks5
)

const proxyKindCount = ProxySOCKS5 + 1

// ParseProxyKind is the inverse of ProxyKind.String, in any case.
func ParseProxyKind(s string) (ProxyKind, bool) {
	return fsm.ParseEnum(strings.ToLower(s), proxyKindCount, false)
}

// DefaultPort is the port a proxy URL of this kind means when it names
// none, as in net/http: 80 for http, 443 for https, 1080 for socks5.
func (k ProxyKind) DefaultPort() uint16 {
	switch k {
	case ProxyHTTP:
		return 80
	case ProxyHTTPS:
		return 443
	case ProxySOCKS5:
		return 1080
	}
	return 0
}

// Policy is the protocol policy of a route: which HTTP versions the
// connection may speak.
type Policy uint8

// Policies.
const (
	// PolicyNegotiate is the zero value: HTTP/2 or HTTP/1.1 by ALPN over
	// TLS; HTTP/1.1 in cleartext.
	PolicyNegotiate Policy = iota // negotiate
	// PolicyH1 is HTTP/1.1 only.
	PolicyH1 // h1
	// PolicyH2 is HTTP/2 only: ALPN h2 over TLS, prior knowledge in
	// cleartext.
	PolicyH2 // h2
	// PolicyH3 is HTTP/3 only, over QUIC; never through a proxy.
	PolicyH3 // h3
)

const policyCount = PolicyH3 + 1

// ParsePolicy is the inverse of Policy.String.
func ParsePolicy(s string) (Policy, bool) { return fsm.ParseEnum(s, policyCount, true) }

// ALPN returns a new slice of the protocol IDs to offer a TLS origin, in
// preference order; nil for an invalid policy.
func (p Policy) ALPN() []string {
	switch p {
	case PolicyNegotiate:
		return []string{"h2", "http/1.1"}
	case PolicyH1:
		return []string{"http/1.1"}
	case PolicyH2:
		return []string{"h2"}
	case PolicyH3:
		return []string{"h3"}
	}
	return nil
}

// MaxHops bounds the length of a proxy chain.
const MaxHops = 8

// Hop is one proxy of a chain, in dial order: the first hop is the one
// the client connects to.
type Hop struct {
	Kind ProxyKind
	// Host is the proxy's host name or IP literal (an IPv6 literal with
	// or without brackets). New lower-cases names and canonicalises IPs.
	Host string
	// Port is the proxy's port; zero means Kind.DefaultPort.
	Port uint16
	// CredentialID names the credentials the client presents at this hop,
	// or is empty for none. It is part of Key, so connections made with
	// different credentials are never shared. It is printed in keys and
	// logs: it must identify the secret, never contain it (for example a
	// user name and a keyed hash of the password, or a vault entry's ID).
	CredentialID string
}

// Addr returns the hop's "host:port" with the effective port.
func (h Hop) Addr() string { return joinHostPort(h.Host, h.effectivePort()) }

func (h Hop) effectivePort() uint16 {
	if h.Port == 0 {
		return h.Kind.DefaultPort()
	}
	return h.Port
}

// String prints the hop as kind://host:port, followed by the quoted
// credential identity when there is one.
func (h Hop) String() string {
	s := h.Kind.String() + "://" + h.Addr()
	if h.CredentialID != "" {
		s += " cred=" + strconv.Quote(h.CredentialID)
	}
	return s
}

// Spec is the input to New: everything the transport resolved for one
// wire attempt.
type Spec struct {
	Scheme Scheme
	// Host is the origin's host name or IP literal, as in the URL (an IPv6
	// literal with or without brackets). Names must be ASCII: convert an
	// internationalised name to its A-labels first.
	Host string
	// Port is the origin's port as written in the URL; zero means none was
	// written, and the scheme's default applies.
	Port uint16
	// UseProxy is the NO_PROXY decision, made elsewhere: true when a proxy
	// applies to this destination. When false, Chain is ignored.
	UseProxy bool
	// Chain lists the proxies in dial order. New copies it.
	Chain  []Hop
	Policy Policy
	// Forward sends plain-http requests to the one HTTP or HTTPS proxy of
	// Chain in absolute form (RFC 9112 §3.2.2), as a forward proxy takes
	// them, instead of through a CONNECT tunnel to the origin: the
	// connection is the proxy's, and the route's Key leaves the origin
	// out, so one connection carries requests to any origin. It needs
	// Scheme http, UseProxy with exactly one http or https hop, and
	// PolicyH1.
	Forward bool
}

// Route is the immutable route of one wire attempt. Build it with New;
// the zero Route is invalid and its Key matches no valid route. A Route
// is safe to copy and to share between goroutines.
type Route struct {
	scheme  Scheme
	host    string
	port    uint16
	hops    []Hop // never written after New; nil when direct
	policy  Policy
	forward bool
	key     Key
}

// Key is a route's identity, comparable and usable as a map key: two
// routes have the same Key exactly when they go to the same origin and
// effective port, through the same proxies in the same order with the
// same credential identities, under the same protocol policy. Direct
// routes share a key whether or not a proxy was configured and bypassed,
// since their connections are alike. Forward routes (Spec.Forward) share
// a key across origins: they have the same proxy, credential identity
// and policy.
type Key struct{ s string }

// String prints the key in a canonical, readable form, for example
// "https://example.com:443 policy=negotiate via http://proxy:3128".
func (k Key) String() string { return k.s }

// SpecError says which field of a Spec is unusable and why. It is the
// caller's fault.
type SpecError struct {
	Field  string // for example "Host" or "Chain[1].Host"
	Value  string // the offending value, quoted in Error
	Reason string
}

// Error names the field, its value and the reason.
func (e *SpecError) Error() string {
	return "route: " + e.Field + " " + strconv.Quote(e.Value) + ": " + e.Reason
}

// New validates s and returns its Route. Host names are lower-cased, IP
// literals canonicalised and implicit ports made explicit, so
// "http://Example.com" and "http://example.com:80" give the same route.
func New(s Spec) (Route, error) {
	if s.Scheme != SchemeHTTP && s.Scheme != SchemeHTTPS {
		return Route{}, &SpecError{Field: "Scheme", Value: s.Scheme.String(), Reason: "want http or https"}
	}
	if s.Policy >= policyCount {
		return Route{}, &SpecError{Field: "Policy", Value: s.Policy.String(), Reason: "unknown policy"}
	}
	host, reason := canonicalHost(s.Host)
	if reason != "" {
		return Route{}, &SpecError{Field: "Host", Value: s.Host, Reason: reason}
	}
	r := Route{scheme: s.Scheme, host: host, port: s.Port, policy: s.Policy}
	if r.port == 0 {
		r.port = s.Scheme.DefaultPort()
	}
	if s.Forward && !s.UseProxy {
		return Route{}, &SpecError{Field: "Forward", Value: "true", Reason: "absolute form needs a proxy"}
	}
	if s.UseProxy {
		if len(s.Chain) == 0 {
			return Route{}, &SpecError{Field: "Chain", Value: "", Reason: "a proxy applies but the chain is empty"}
		}
		if len(s.Chain) > MaxHops {
			return Route{}, &SpecError{Field: "Chain", Value: strconv.Itoa(len(s.Chain)) + " hops", Reason: "longer than MaxHops"}
		}
		if s.Policy == PolicyH3 {
			// Reference: "HTTP/3 proxy tunneling through CONNECT-UDP is
			// not supported."
			return Route{}, &SpecError{Field: "Policy", Value: s.Policy.String(), Reason: "HTTP/3 cannot run through a TCP proxy tunnel; choose a TCP policy for proxied routes"}
		}
		if s.Forward {
			if s.Scheme != SchemeHTTP || len(s.Chain) != 1 || s.Chain[0].Kind != ProxyHTTP && s.Chain[0].Kind != ProxyHTTPS || s.Policy != PolicyH1 {
				return Route{}, &SpecError{Field: "Forward", Value: "true", Reason: "absolute form needs an http origin, one http or https proxy and the h1 policy"}
			}
			r.forward = true
		}
		r.hops = make([]Hop, len(s.Chain))
		for i, h := range s.Chain {
			field := "Chain[" + strconv.Itoa(i) + "]"
			if h.Kind == ProxyUnknown || h.Kind >= proxyKindCount {
				return Route{}, &SpecError{Field: field + ".Kind", Value: h.Kind.String(), Reason: "want http, https or socks5"}
			}
			hh, reason := canonicalHost(h.Host)
			if reason != "" {
				return Route{}, &SpecError{Field: field + ".Host", Value: h.Host, Reason: reason}
			}
			h.Host = hh
			h.Port = h.effectivePort()
			r.hops[i] = h
		}
	}
	r.key = Key{r.encode()}
	return r, nil
}

// encode writes the canonical key text. Every part is delimited: hosts
// hold no space, '#' or '"', and credential identities are quoted, so
// distinct routes never encode alike.
func (r *Route) encode() string {
	var b strings.Builder
	b.WriteString(r.scheme.String())
	b.WriteString("://")
	if r.forward {
		b.WriteString("* forward") // any origin: '*' is no host
	} else {
		b.WriteString(r.Addr())
	}
	b.WriteString(" policy=")
	b.WriteString(r.policy.String())
	for i, h := range r.hops {
		if i == 0 {
			b.WriteString(" via ")
		} else {
			b.WriteString(" > ")
		}
		b.WriteString(h.String())
	}
	return b.String()
}

// canonicalHost lower-cases a host name or canonicalises an IP literal;
// a non-empty reason says why host is unusable.
func canonicalHost(host string) (string, string) {
	if host == "" {
		return "", "empty host"
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
		if !strings.Contains(host, ":") {
			return "", "brackets around a host that is not an IPv6 literal"
		}
	}
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return "", "not a valid IPv6 literal"
		}
		if z := a.Zone(); z != "" && !isName(z) {
			return "", "invalid IPv6 zone"
		}
		return a.String(), ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String(), ""
	}
	if len(host) > 253 {
		return "", "host name longer than 253 bytes"
	}
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case isNameByte(c):
		case c >= 0x80:
			return "", "not ASCII: convert an internationalised name to A-labels first"
		default:
			return "", "invalid character " + strconv.QuoteRune(rune(c)) + " in host name"
		}
	}
	return strings.ToLower(host), ""
}

// isNameByte reports whether c may appear in a host name (letters,
// digits, '-', '.', and '_', which some internal names use).
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_'
}

func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func joinHostPort(host string, port uint16) string {
	p := strconv.Itoa(int(port))
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + p
	}
	return host + ":" + p
}

// Scheme returns the origin's scheme.
func (r Route) Scheme() Scheme { return r.scheme }

// Host returns the origin's canonical host: a lower-case name or an IP
// literal without brackets.
func (r Route) Host() string { return r.host }

// Port returns the origin's effective port.
func (r Route) Port() uint16 { return r.port }

// Addr returns the origin's "host:port" with the effective port: the
// CONNECT target of the last hop, or the address to dial when direct.
func (r Route) Addr() string { return joinHostPort(r.host, r.port) }

// Proxied reports whether the route goes through a proxy chain.
func (r Route) Proxied() bool { return len(r.hops) > 0 }

// Forward reports whether requests go to the route's proxy in absolute
// form (Spec.Forward) rather than through a tunnel.
func (r Route) Forward() bool { return r.forward }

// NumHops returns the length of the proxy chain; zero when direct.
func (r Route) NumHops() int { return len(r.hops) }

// Hop returns hop i of the chain, from 0 in dial order, with its
// canonical host and effective port. It panics if i is out of range.
func (r Route) Hop(i int) Hop { return r.hops[i] }

// Hops returns a copy of the proxy chain in dial order; nil when direct.
func (r Route) Hops() []Hop {
	if len(r.hops) == 0 {
		return nil
	}
	return append([]Hop(nil), r.hops...)
}

// Policy returns the route's protocol policy.
func (r Route) Policy() Policy { return r.policy }

// Key returns the route's identity, the pool key.
func (r Route) Key() Key { return r.key }

// String prints the route as its key.
func (r Route) String() string { return r.key.s }
