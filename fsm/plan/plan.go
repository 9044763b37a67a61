// Package plan decides, for one call, which protocols a transport tries
// and in what order: the dispatch plan. It is pure, like fsm: the caller
// passes the request's scheme and route and what it learned from earlier
// calls (ALPN answers, failed QUIC handshakes, Alt-Svc advertisements) as
// values, and gets back the ordered legs, each with its protocol, the
// route policy its connections are pooled under, the ALPN list it offers,
// and the one condition under which the next leg may be taken. Every
// protocol decision of the transport is made here; the transport only
// carries the plan out.
//
// A leg hands over to the next only before anything of the request was
// sent: when no connection could be had on it (FallbackNoConn, HTTP/3),
// or when ALPN selected HTTP/1.1 (FallbackALPN). The next leg is then the
// same call's first wire attempt, on the same route snapshot with the
// next leg's policy.
package plan

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -linecomment -type Policy,Fallback -output enum_string.go

import (
	"errors"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
)

// Policy is the transport's protocol policy, as configured.
type Policy uint8

// Policies. replaysafe.Protocol is this type, so its values are these.
const (
	// Negotiate lets ALPN choose HTTP/2 or HTTP/1.1 over TLS, HTTP/1.1 in
	// cleartext, as net/http's DefaultTransport does. The zero value.
	Negotiate Policy = iota // negotiate
	// HTTP1 speaks HTTP/1.1 only.
	HTTP1 // http1
	// HTTP2 speaks HTTP/2 only: ALPN h2 over TLS, prior knowledge (h2c)
	// in cleartext.
	HTTP2 // http2
	// HTTP3 speaks HTTP/3 only: https on direct routes.
	HTTP3 // http3
	// PreferHTTP3 tries HTTP/3 first for https on direct routes, then
	// falls back as Negotiate.
	PreferHTTP3 // prefer-http3
	// DiscoverHTTP3 speaks as Negotiate until the origin advertised
	// HTTP/3 (Alt-Svc), then as PreferHTTP3.
	DiscoverHTTP3 // discover-http3

	policyCount
)

// Fallback is when a leg hands the call to the next one.
type Fallback uint8

// Fallbacks.
const (
	// FallbackNever: the leg's outcome is the call's.
	FallbackNever Fallback = iota // never
	// FallbackNoConn: no connection could be had on the leg (for HTTP/3
	// a QUIC handshake that failed, or did not finish within the head
	// start): nothing was sent.
	FallbackNoConn // no-conn
	// FallbackALPN: ALPN selected HTTP/1.1 on the leg's TLS connection:
	// nothing was sent.
	FallbackALPN // alpn-h1
)

// Input is what a plan is made from.
type Input struct {
	// Policy is the configured protocol policy.
	Policy Policy
	// HTTPS reports an https URL (else http).
	HTTPS bool
	// Proxied reports a route through at least one proxy.
	Proxied bool
	// ALPNChoseH1 reports that ALPN on this route already selected
	// HTTP/1.1 under negotiation: its calls go straight to HTTP/1.1.
	ALPNChoseH1 bool
	// H3Broken reports that a QUIC handshake to the destination failed
	// recently (within the transport's retry window).
	H3Broken bool
	// AltSvcH3 reports that the origin advertised HTTP/3 on its own host
	// and the advertisement still holds.
	AltSvcH3 bool
	// ExtendedConnect reports a CONNECT with a :protocol (RFC 8441,
	// RFC 9220: a WebSocket, say), which only HTTP/2 and HTTP/3 carry.
	ExtendedConnect bool
}

// Leg is one protocol a call may run on.
type Leg struct {
	// Proto is the HTTP version spoken: fsm.ProtoH1, ProtoH2 or ProtoH3.
	Proto fsm.Proto
	// Route is the route policy the leg's connections are pooled under:
	// connections made under one policy never serve another.
	Route route.Policy
	// Race reports an HTTP/3 leg that waits for a new QUIC connection at
	// most the transport's head start before it hands over (with
	// FallbackNoConn) while the handshake goes on for later calls.
	Race bool
	// Next says when the next leg may be taken; FallbackNever on the
	// last leg.
	Next Fallback
	// ALPN is what a TLS handshake offers, in preference order; nil in
	// cleartext. (Last, so that the narrow fields above share a word: a
	// call holds its leg while in flight.)
	ALPN []string
}

// Plan is the ordered legs of one call, or the reason it cannot be made.
type Plan struct {
	Legs []Leg
	// Err, when set, refuses the call before any connection: the policy
	// cannot carry the request over its route.
	Err error
}

// Refusals.
var (
	// ErrH3Scheme: HTTP/3 only, for an http URL (QUIC always has TLS).
	ErrH3Scheme = errors.New("HTTP/3 needs an https URL")
	// ErrH3Proxied: HTTP/3 only, through a proxy (no CONNECT-UDP).
	ErrH3Proxied = errors.New("HTTP/3 through a proxy is not supported")
	// ErrH2CProxied: HTTP/2 only, for an http URL through a proxy: h2c
	// with prior knowledge is not tunnelled.
	ErrH2CProxied = errors.New("h2c (HTTP/2 over cleartext) through a proxy is not supported")
	// ErrExtendedConnectH1: an extended CONNECT where the plan has only
	// HTTP/1.1 (the policy, or negotiation in cleartext): HTTP/1.1 has no
	// :protocol (it upgrades a GET instead).
	ErrExtendedConnectH1 = errors.New("extended CONNECT (:protocol) needs HTTP/2 or HTTP/3; HTTP/1.1 upgrades a GET instead")
	// ErrPolicy: a policy value outside the list.
	ErrPolicy = errors.New("unknown protocol policy")
)

// Make returns the plan for in. It does not allocate: every plan is
// made once, and the returned Legs (and their ALPN lists) are shared, so
// a caller must not modify them.
func Make(in Input) Plan {
	if in.Policy >= policyCount {
		return Plan{Err: ErrPolicy}
	}
	return plans[index(in)]
}

// inputBits is the number of boolean fields of Input.
const inputBits = 6

// index numbers in among the inputs of its policy.
func index(in Input) int {
	i := int(in.Policy) << inputBits
	for b, f := range [inputBits]bool{in.HTTPS, in.Proxied, in.ALPNChoseH1, in.H3Broken, in.AltSvcH3, in.ExtendedConnect} {
		if f {
			i |= 1 << b
		}
	}
	return i
}

// plans holds the plan of every input, by index.
var plans = func() (all [int(policyCount) << inputBits]Plan) {
	for i := range all {
		in := Input{Policy: Policy(i >> inputBits), HTTPS: i&1 != 0, Proxied: i&2 != 0,
			ALPNChoseH1: i&4 != 0, H3Broken: i&8 != 0, AltSvcH3: i&16 != 0, ExtendedConnect: i&32 != 0}
		all[i] = build(in)
		if in.ExtendedConnect {
			all[i] = withoutH1(all[i])
		}
	}
	return all
}()

// build makes the plan for in.
func build(in Input) Plan {
	h1 := Leg{Proto: fsm.ProtoH1, Route: route.PolicyH1}
	if in.HTTPS {
		h1.ALPN = []string{"http/1.1"}
	}
	switch in.Policy {
	case HTTP1:
		return Plan{Legs: []Leg{h1}}
	case HTTP2:
		if !in.HTTPS && in.Proxied {
			return Plan{Err: ErrH2CProxied}
		}
		return Plan{Legs: []Leg{h2Leg(route.PolicyH2, in.HTTPS)}}
	case HTTP3:
		switch {
		case !in.HTTPS:
			return Plan{Err: ErrH3Scheme}
		case in.Proxied:
			return Plan{Err: ErrH3Proxied}
		}
		return Plan{Legs: []Leg{h3Leg(false)}}
	}
	// Negotiate, and the TCP part of the HTTP/3 preferences.
	var legs []Leg
	wantH3 := in.HTTPS && !in.Proxied && !in.H3Broken &&
		(in.Policy == PreferHTTP3 || in.Policy == DiscoverHTTP3 && in.AltSvcH3)
	if wantH3 {
		legs = append(legs, h3Leg(true))
	}
	if !in.HTTPS {
		// Cleartext negotiation has no ALPN: HTTP/1.1 (no h2c upgrade),
		// on a route of the HTTP/1.1 policy, whose connections these
		// are: through an HTTP proxy it goes in absolute form, as under
		// HTTP1 (route.Spec.Forward).
		return Plan{Legs: append(legs, h1)}
	}
	// The HTTP/1.1 leg of a negotiation is pooled with it (the route's
	// policy), and offers http/1.1 alone: the server already answered.
	h1.Route = route.PolicyNegotiate
	if in.ALPNChoseH1 {
		return Plan{Legs: append(legs, h1)}
	}
	h2 := h2Leg(route.PolicyNegotiate, true)
	h2.Next = FallbackALPN
	return Plan{Legs: append(legs, h2, h1)}
}

// withoutH1 is p for an extended CONNECT: its HTTP/1.1 legs cannot carry
// it, so a leg that would hand over to one does not (an ALPN answer of
// HTTP/1.1 then fails the acquisition), and a plan of HTTP/1.1 alone is
// refused.
func withoutH1(p Plan) Plan {
	var legs []Leg
	for _, l := range p.Legs {
		if l.Proto != fsm.ProtoH1 {
			legs = append(legs, l)
		}
	}
	if p.Err != nil {
		return p
	}
	if len(legs) == 0 {
		return Plan{Err: ErrExtendedConnectH1}
	}
	legs[len(legs)-1].Next = FallbackNever
	return Plan{Legs: legs}
}

func h2Leg(p route.Policy, https bool) Leg {
	l := Leg{Proto: fsm.ProtoH2, Route: p}
	if https {
		l.ALPN = p.ALPN()
	}
	return l
}

// h3Leg is the HTTP/3 leg: alone (fallback false), or racing ahead of TCP.
func h3Leg(fallback bool) Leg {
	l := Leg{Proto: fsm.ProtoH3, Route: route.PolicyH3, ALPN: route.PolicyH3.ALPN()}
	if fallback {
		l.Race, l.Next = true, FallbackNoConn
	}
	return l
}

// First returns the plan's first leg; the zero Leg for a refused plan.
func (p Plan) First() Leg {
	if len(p.Legs) == 0 {
		return Leg{}
	}
	return p.Legs[0]
}
