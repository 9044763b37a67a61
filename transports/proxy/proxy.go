// Package proxy establishes connections through HTTP, HTTPS and SOCKS5
// proxies and chains of them, under one acquisition deadline, and decides
// NO_PROXY with implicit ports.
//
// It has three parts:
//
//   - CONNECT: AppendConnectRequest writes the request, ParseConnectResponse
//     (pure, bounded by MaxHeaderBytes) judges the response, and Connect runs
//     one exchange, keeping the bytes after the response header section for
//     the tunneled protocol. Any 2xx opens the tunnel; every other status is
//     a *ConnectError.
//   - NO_PROXY: Selector wraps golang.org/x/net/http/httpproxy and feeds it
//     normalised URLs, so "http://h" and "http://h:80" always decide alike.
//   - Dialing: DialChain dials the first hop, does TLS (ALPN http/1.1,
//     or h2 first at the first hop with Dialer.H2) to HTTPS proxies,
//     CONNECT at HTTP and HTTPS hops (HTTP/2 CONNECT streams on a shared
//     connection, H2Pool, when the first hop picks h2) and SOCKS5
//     (through golang.org/x/net/proxy) at SOCKS hops; HandshakeOrigin does TLS with
//     the origin; DialRoute does both for a route.Route. All of them spend
//     one route.Budget: its deadline is set on the connection once, and a
//     step that runs out of it fails with a *route.DeadlineError naming the
//     step and hop.
//
// A transport plugs it in like this:
//
//  1. Resolve the attempt's route.Route (Selector.Proxy for the NO_PROXY
//     decision, HopFromURL for each proxy) and look the pool up by its Key.
//  2. On a miss, take route.Start(clock.Now(), limit) with the Dialer's
//     Clock, check it while waiting for pool capacity (step
//     wait-capacity), then call DialRoute with the same budget.
//  3. Feed the result to the fsm as acquisition success or failure; a
//     resend after a stale connection renews the budget (Budget.Renew).
//
// Credentials given for a hop are addressed to that hop only: never to
// the origin (OriginHeader drops Proxy-Authorization under any spelling
// of its key), and never to another proxy in a form it can read. An http
// or socks5 hop's credentials are cleartext, so at any hop but the first
// every earlier hop could read them: DialChain refuses that
// (CheckChainCredentials) unless Dialer.AllowCleartextChainCredentials is
// set. docs/proxies.md says what each hop sees.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
)

// Hop is one proxy of a chain with what it takes to pass it: the route's
// view of the hop (kind, address, credential identity) and the secrets
// and settings that stay out of the route key.
type Hop struct {
	route.Hop
	HopConfig
}

// HopConfig holds the parts of a hop that are not in its route key.
type HopConfig struct {
	// Auth is presented to this hop only: as Basic Proxy-Authorization at
	// an HTTP or HTTPS proxy, as username/password at a SOCKS5 proxy.
	Auth *Auth
	// TLSConfig is the client configuration for an HTTPS proxy; nil means
	// the system roots. DialChain clones it, sets ServerName to the hop's
	// host if empty, and sets the ALPN offer: "http/1.1" alone, or "h2"
	// then "http/1.1" at the first hop when Dialer.H2 is set.
	TLSConfig *tls.Config
	// Header holds extra CONNECT header fields for this hop only.
	Header http.Header
}

// HopFromURL turns a proxy URL (http, https, socks5 or socks5h) into a
// Hop. User information in the URL becomes the hop's Auth; credentialID
// must then name those credentials (see route.Hop.CredentialID), so that
// connections made with other credentials never share a pool key.
func HopFromURL(u *url.URL, credentialID string) (Hop, error) {
	var h Hop
	scheme := strings.ToLower(u.Scheme)
	if scheme == "socks5h" {
		// x/net/proxy always lets the SOCKS5 proxy resolve host names,
		// which is what socks5h asks for.
		scheme = "socks5"
	}
	kind, ok := route.ParseProxyKind(scheme)
	if !ok {
		return h, errors.New("proxy: unsupported proxy scheme " + strconv.Quote(u.Scheme))
	}
	h.Kind = kind
	h.Host = u.Hostname()
	if h.Host == "" {
		return h, errors.New("proxy: proxy URL " + strconv.Quote(u.Redacted()) + " has no host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return h, errors.New("proxy: proxy URL " + strconv.Quote(u.Redacted()) + " has an invalid port")
		}
		h.Port = uint16(n)
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		h.Auth = &Auth{Username: u.User.Username(), Password: pw}
		if credentialID == "" {
			return h, errors.New("proxy: proxy URL " + strconv.Quote(u.Redacted()) + " carries credentials but no credential identity was given")
		}
	}
	h.CredentialID = credentialID
	return h, nil
}

// StepError reports a failed acquisition step that is not a deadline:
// which step, which hop, and the cause.
type StepError struct {
	Step route.Step
	// Hop is the proxy's 1-based position in the chain, or 0 for a step
	// dealing with the origin (see route.DeadlineError.Hop).
	Hop int
	// Addr is the address of the proxy or origin the step dealt with.
	Addr string
	Err  error
}

// Error names the step, the hop or origin, the address and the cause.
func (e *StepError) Error() string {
	s := "proxy: " + e.Step.String()
	if e.Hop > 0 {
		s += " at proxy hop " + strconv.Itoa(e.Hop)
	} else {
		s += " with origin"
	}
	if e.Addr != "" {
		s += " (" + e.Addr + ")"
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *StepError) Unwrap() error { return e.Err }

// Clock is the monotonic clock that budgets are measured on.
type Clock interface {
	// Now returns the current instant.
	Now() route.Instant
}

// SystemClock is the process's monotonic clock, as nanoseconds since the
// package was initialised. It is the default Dialer.Clock.
var SystemClock Clock = systemClock{}

var clockOrigin = time.Now()

type systemClock struct{}

func (systemClock) Now() route.Instant { return route.Instant(time.Since(clockOrigin)) }

// wallDeadline returns the time.Time at which b runs out, measured with
// clock; ok is false without a limit. The clock is read before time.Now,
// so the returned time is never earlier than the budget's deadline.
func wallDeadline(b route.Budget, clock Clock) (time.Time, bool) {
	rem, ok := b.Remaining(clock.Now())
	if !ok {
		return time.Time{}, false
	}
	return time.Now().Add(rem), true
}

// errDialedTwice guards the connection handed to a SOCKS dialer.
var errDialedTwice = errors.New("proxy: SOCKS dialer asked for a second connection")

// connOnce is the forward dialer handed to x/net/proxy: it returns the
// connection that already reaches the SOCKS hop, once.
type connOnce struct {
	conn net.Conn
	addr string
	used bool
}

func (d *connOnce) Dial(network, addr string) (net.Conn, error) {
	if d.used || addr != d.addr {
		return nil, errDialedTwice
	}
	d.used = true
	return d.conn, nil
}

func (d *connOnce) DialContext(_ context.Context, network, addr string) (net.Conn, error) {
	return d.Dial(network, addr)
}

// fixedDeadline keeps x/net/proxy from moving the deadline DialChain set
// on the underlying connection: the budget owns it.
type fixedDeadline struct{ net.Conn }

func (fixedDeadline) SetDeadline(time.Time) error      { return nil }
func (fixedDeadline) SetReadDeadline(time.Time) error  { return nil }
func (fixedDeadline) SetWriteDeadline(time.Time) error { return nil }

// ResolveError reports that the proxies of a request could not be
// decided: the selector or a hop's credential resolver failed, or
// returned something unusable (a nil or malformed URL, a chain that
// would show credentials to an earlier hop). Nothing was dialed.
type ResolveError struct {
	// Hop is the 1-based hop the failure concerns, or 0 for the selector.
	Hop int
	// Err is the cause.
	Err error
}

// Error names the hop, if any, and the cause.
func (e *ResolveError) Error() string {
	if e.Hop > 0 {
		return "replaysafe: proxy hop " + strconv.Itoa(e.Hop) + ": " + e.Err.Error()
	}
	return "replaysafe: proxy selection: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ResolveError) Unwrap() error { return e.Err }
