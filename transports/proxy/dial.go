package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	xproxy "golang.org/x/net/proxy"

	"github.com/replaysafe/replaysafe/fsm/route"
)

// Resolver looks up the addresses of a host name; *net.Resolver
// satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ContextDialer makes TCP connections; *net.Dialer satisfies it.
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Dialer holds what DialChain needs from the outside world. The zero
// Dialer uses net.DefaultResolver, a zero net.Dialer and SystemClock.
type Dialer struct {
	// Resolver resolves the first hop's host name (the origin's when
	// direct); IP literals skip it. Nil means net.DefaultResolver.
	Resolver Resolver
	// TCP connects to the resolved addresses, tried in order. Nil means a
	// zero *net.Dialer.
	TCP ContextDialer
	// Clock is the clock the budgets passed to DialChain were started on;
	// nil means SystemClock.
	Clock Clock
	// AllowCleartextChainCredentials lets DialChain send credentials to
	// an http or socks5 hop after the first, where every earlier hop can
	// read them (see CheckChainCredentials). Off by default.
	AllowCleartextChainCredentials bool
	// TLSHandshakeTimeout, when positive, bounds each TLS handshake (with
	// an HTTPS proxy, or with the origin in HandshakeOrigin) within the
	// budget: one that outlives it fails with a *HandshakeTimeoutError.
	TLSHandshakeTimeout time.Duration
	// OnConnectResponse, if set, is called with each proxy's 2xx answer
	// to a CONNECT before the tunnel is used; an error it returns fails
	// the dial with a *StepError (step connect) wrapping it. An HTTP/2
	// answer has Proto "HTTP/2.0" and the status's standard reason.
	OnConnectResponse func(hop Hop, req ConnectRequest, resp *Response) error
	// H2, if set, makes DialChain offer ALPN "h2" (then "http/1.1") to
	// an HTTPS proxy at the first hop and, when the proxy picks h2, open
	// the tunnel as an HTTP/2 CONNECT stream (RFC 9113 §8.5) on a
	// connection H2 shares between every tunnel through that proxy. Nil
	// keeps HTTP/1.1 CONNECT, one proxy connection per tunnel.
	H2 *H2Pool
}

// HandshakeTimeoutError reports a TLS handshake that outlived
// Dialer.TLSHandshakeTimeout: with the proxy at Hop (1-based), or with
// the origin (Hop 0) at Addr. It is a net.Error timeout, as net/http's
// TLS handshake timeout is.
type HandshakeTimeoutError struct {
	Step  route.Step
	Hop   int
	Addr  string
	Limit time.Duration
}

// Error names the handshake and the bound.
func (e *HandshakeTimeoutError) Error() string {
	s := "replaysafe: TLS handshake with " + e.Addr
	if e.Hop > 0 {
		s += " (proxy hop " + strconv.Itoa(e.Hop) + ")"
	}
	return s + " timed out after " + e.Limit.String()
}

// Timeout reports true.
func (e *HandshakeTimeoutError) Timeout() bool { return true }

// Temporary reports true, as net/http's TLS handshake timeout does.
func (e *HandshakeTimeoutError) Temporary() bool { return true }

func (d *Dialer) resolver() Resolver {
	if d.Resolver == nil {
		return net.DefaultResolver
	}
	return d.Resolver
}

func (d *Dialer) tcp() ContextDialer {
	if d.TCP == nil {
		return &net.Dialer{}
	}
	return d.TCP
}

func (d *Dialer) clock() Clock {
	if d.Clock == nil {
		return SystemClock
	}
	return d.Clock
}

// maxAddrs bounds how many resolved addresses DialChain tries.
const maxAddrs = 16

// aLongTimeAgo is a deadline in the past: it makes blocked I/O return at
// once when the caller's context ends.
var aLongTimeAgo = time.Unix(1, 0)

// acquisition is one run under one budget.
type acquisition struct {
	ctx      context.Context
	clock    Clock
	budget   route.Budget
	deadline time.Time // zero without a limit
	step     route.Step
	hop      int
	addr     string
	raw      net.Conn // the guarded connection, whose deadline bounds each step
}

func newAcquisition(ctx context.Context, clock Clock, b route.Budget) *acquisition {
	a := &acquisition{ctx: ctx, clock: clock, budget: b}
	a.deadline, _ = wallDeadline(b, clock)
	return a
}

// enter records the step about to run and checks that time is left.
func (a *acquisition) enter(step route.Step, hop int, addr string) error {
	a.step, a.hop, a.addr = step, hop, addr
	if err := a.ctx.Err(); err != nil {
		return &StepError{Step: step, Hop: hop, Addr: addr, Err: err}
	}
	return a.budget.Check(a.clock.Now(), step, hop)
}

// fail classifies err from the current step: the caller's context
// ending, the budget running out, or the step's own failure.
func (a *acquisition) fail(err error) error {
	if cerr := a.ctx.Err(); cerr != nil {
		return &StepError{Step: a.step, Hop: a.hop, Addr: a.addr, Err: cerr}
	}
	if now := a.clock.Now(); a.budget.Expired(now) && isTimeout(err) {
		return a.budget.Exceeded(now, a.step, a.hop, err)
	}
	return &StepError{Step: a.step, Hop: a.hop, Addr: a.addr, Err: err}
}

// stepContext bounds DNS and TCP, which have no connection yet to carry
// the deadline.
func (a *acquisition) stepContext() (context.Context, context.CancelFunc) {
	if a.deadline.IsZero() {
		return context.WithCancel(a.ctx)
	}
	return context.WithDeadline(a.ctx, a.deadline)
}

// guard puts the budget's deadline on raw and makes the caller's context
// interrupt blocked I/O. The returned release clears the deadline and
// reports false if the context ended meanwhile.
func (a *acquisition) guard(raw net.Conn) (release func() bool) {
	a.raw = raw
	if !a.deadline.IsZero() {
		raw.SetDeadline(a.deadline)
	}
	stop := context.AfterFunc(a.ctx, func() { raw.SetDeadline(aLongTimeAgo) })
	return func() bool {
		if !stop() {
			return false
		}
		raw.SetDeadline(time.Time{})
		return true
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// DialChain returns a connection to target ("host:port") through hops,
// in dial order; with no hops it dials target directly. It resolves and
// connects to the first hop, then for every hop does TLS to an HTTPS
// proxy (offering only ALPN "http/1.1"), CONNECT to the next hop or the
// target at an HTTP or HTTPS proxy (the last hop too, for a plain-HTTP
// origin), or SOCKS5 at a SOCKS proxy. Each hop's Auth and Header go to
// that hop only. With d.H2 set, an HTTPS first hop is offered "h2" then
// "http/1.1", and if it picks h2 the first CONNECT is an HTTP/2 CONNECT
// stream on a connection d.H2 shares (see H2Pool); the returned
// connection is then that stream (or a tunnel inside it), whose
// failures read as a TCP connection's (h2.TunnelConn).
//
// Credentials for an http or socks5 hop after the first would cross the
// earlier hops in cleartext: DialChain refuses them before dialing, with
// a *ChainCredentialsError, unless
// d.AllowCleartextChainCredentials is set.
//
// All steps share the one absolute deadline of b, which must have been
// started on d's Clock: it bounds DNS and TCP through their context and
// every later step through the connection's deadline, set once. A step
// that runs out of time fails with a *route.DeadlineError naming it and
// its hop. Other failures are a *ConnectError (a CONNECT status outside
// 2xx) or a *StepError. The returned connection has no deadline; on
// error, everything DialChain opened is closed (a shared HTTP/2
// connection only loses the stream). Through an HTTPS proxy the
// connection is (or wraps) the *tls.Conn to that proxy, or an HTTP/2
// stream: its type says nothing about TLS with the origin.
func DialChain(ctx context.Context, d *Dialer, hops []Hop, target string, b route.Budget) (net.Conn, error) {
	if d == nil {
		d = &Dialer{}
	}
	if len(hops) > route.MaxHops {
		return nil, errors.New("proxy: chain of " + strconv.Itoa(len(hops)) + " hops is longer than route.MaxHops")
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, errors.New("proxy: target " + strconv.Quote(target) + " is not host:port")
	}
	for i, h := range hops {
		if h.Host == "" || h.Kind != route.ProxyHTTP && h.Kind != route.ProxyHTTPS && h.Kind != route.ProxySOCKS5 {
			return nil, &StepError{Step: route.StepNone, Hop: i + 1, Addr: h.Addr(), Err: errors.New("hop needs a host and a kind of http, https or socks5, not " + h.Kind.String())}
		}
	}
	if err := CheckChainCredentials(hops, d.AllowCleartextChainCredentials); err != nil {
		return nil, err
	}
	a := newAcquisition(ctx, d.clock(), b)
	if d.H2 != nil && len(hops) > 0 && hops[0].Kind == route.ProxyHTTPS {
		return d.H2.dialChain(a, d, hops, target)
	}
	first, hop := target, 0
	if len(hops) > 0 {
		first, hop = hops[0].Addr(), 1
	}
	raw, err := a.dialFirst(d, first, hop)
	if err != nil {
		return nil, err
	}
	return a.chainFrom(d, raw, raw, hops, target, 0, false)
}

// chainFrom runs the steps of hops[from:] on conn under the guard of
// guarded (the connection whose deadline bounds them, and which is
// closed on failure); tlsDone says TLS with hops[from] already ran.
func (a *acquisition) chainFrom(d *Dialer, guarded, conn net.Conn, hops []Hop, target string, from int, tlsDone bool) (net.Conn, error) {
	release := a.guard(guarded)
	out, err := a.passHops(d, conn, hops, target, from, tlsDone)
	if !release() {
		guarded.Close()
		return nil, &StepError{Step: a.step, Hop: a.hop, Addr: a.addr, Err: a.ctx.Err()}
	}
	if err != nil {
		guarded.Close()
		return nil, err
	}
	return out, nil
}

// dialFirst runs the DNS and TCP steps.
func (a *acquisition) dialFirst(d *Dialer, addr string, hop int) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &StepError{Step: route.StepDNS, Hop: hop, Addr: addr, Err: err}
	}
	if err := a.enter(route.StepDNS, hop, addr); err != nil {
		return nil, err
	}
	ctx, cancel := a.stepContext()
	defer cancel()
	var ips []netip.Addr
	if ip, perr := netip.ParseAddr(host); perr == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = d.resolver().LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, a.fail(err)
		}
		if len(ips) == 0 {
			return nil, a.fail(errors.New("no addresses for " + host))
		}
	}
	if err := a.enter(route.StepTCP, hop, addr); err != nil {
		return nil, err
	}
	var last error
	for _, ip := range ips[:min(len(ips), maxAddrs)] {
		c, err := d.tcp().DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, a.fail(last)
}

// DialProxy connects to the proxy h itself, for requests sent to it in
// absolute form (RFC 9112 §3.2.2), as a forward proxy takes plain-http
// requests: DNS and TCP, then TLS when h is an https proxy (ALPN
// http/1.1 alone), under b as DialChain's steps are. It sends no CONNECT:
// the connection carries requests to any origin through h, and h's
// credentials go on each request (Proxy-Authorization), not here.
func DialProxy(ctx context.Context, d *Dialer, h Hop, b route.Budget) (net.Conn, error) {
	if d == nil {
		d = &Dialer{}
	}
	if h.Host == "" || h.Kind != route.ProxyHTTP && h.Kind != route.ProxyHTTPS {
		return nil, &StepError{Step: route.StepNone, Hop: 1, Addr: h.Addr(), Err: errors.New("absolute form needs an http or https proxy, not " + h.Kind.String())}
	}
	a := newAcquisition(ctx, d.clock(), b)
	raw, err := a.dialFirst(d, h.Addr(), 1)
	if err != nil {
		return nil, err
	}
	release := a.guard(raw)
	conn := raw
	if h.Kind == route.ProxyHTTPS {
		if err = a.enter(route.StepProxyTLS, 1, h.Addr()); err == nil {
			var tc *tls.Conn
			if tc, err = a.proxyTLS(d, raw, h, 1, false); err != nil {
				err = a.fail(err)
			} else {
				conn = tc
			}
		}
	}
	if !release() {
		raw.Close()
		return nil, &StepError{Step: a.step, Hop: a.hop, Addr: a.addr, Err: ctx.Err()}
	}
	if err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// passHops runs the per-hop steps of hops[from:] on conn, which reaches
// hops[from]; tlsDone says TLS with hops[from] already ran.
func (a *acquisition) passHops(d *Dialer, conn net.Conn, hops []Hop, target string, from int, tlsDone bool) (net.Conn, error) {
	for i := from; i < len(hops); i++ {
		h, n := hops[i], i+1
		next := target
		if n < len(hops) {
			next = hops[n].Addr()
		}
		if h.Kind == route.ProxyHTTPS && !(tlsDone && i == from) {
			if err := a.enter(route.StepProxyTLS, n, h.Addr()); err != nil {
				return nil, err
			}
			tc, err := a.proxyTLS(d, conn, h, n, false)
			if err != nil {
				return nil, a.fail(err)
			}
			conn = tc
		}
		switch h.Kind {
		case route.ProxyHTTP, route.ProxyHTTPS:
			if err := a.enter(route.StepConnect, n, h.Addr()); err != nil {
				return nil, err
			}
			req := ConnectRequest{Target: next, Auth: h.Auth, Header: h.Header, Hop: n, Proxy: h.Addr()}
			tunnel, resp, err := exchange(conn, req)
			if err != nil {
				var ce *ConnectError
				if errors.As(err, &ce) {
					return nil, err
				}
				return nil, a.fail(err)
			}
			if d.OnConnectResponse != nil {
				if err := d.OnConnectResponse(h, req, resp); err != nil {
					return nil, &StepError{Step: route.StepConnect, Hop: n, Addr: h.Addr(), Err: err}
				}
			}
			conn = tunnel
		case route.ProxySOCKS5:
			if err := a.enter(route.StepSOCKS, n, h.Addr()); err != nil {
				return nil, err
			}
			if err := socks(a.ctx, conn, h, next); err != nil {
				return nil, a.fail(err)
			}
		}
	}
	return conn, nil
}

// proxyTLS does TLS with an HTTPS proxy, hop n, on conn, offering
// HTTP/1.1 alone, or "h2" first when offerH2 is set (Dialer.H2, at the
// first hop): the CONNECT exchange is then HTTP/2 when the proxy picks
// it.
func (a *acquisition) proxyTLS(d *Dialer, conn net.Conn, h Hop, n int, offerH2 bool) (*tls.Conn, error) {
	cfg := h.TLSConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = h.Host
	}
	cfg.NextProtos = []string{"http/1.1"}
	if offerH2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	tc := tls.Client(conn, cfg)
	if err := a.handshake(tc, d.TLSHandshakeTimeout, route.StepProxyTLS, n, h.Addr()); err != nil {
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" && !(offerH2 && p == "h2") {
		return nil, errors.New("proxy: HTTPS proxy negotiated ALPN " + strconv.Quote(p) + ", want http/1.1")
	}
	return tc, nil
}

// handshake runs tc's handshake, bounded by limit (when positive and
// earlier than the budget's deadline) as well as by the budget: the
// guarded connection's deadline is moved for it and put back after. A
// handshake the limit ended is a *HandshakeTimeoutError; one the
// caller's context ended reports that.
func (a *acquisition) handshake(tc *tls.Conn, limit time.Duration, step route.Step, hop int, addr string) error {
	bounded := false
	if limit > 0 && a.raw != nil {
		if at := time.Now().Add(limit); a.deadline.IsZero() || at.Before(a.deadline) {
			a.raw.SetDeadline(at)
			bounded = true
		}
	}
	err := tc.Handshake()
	if bounded {
		if a.ctx.Err() != nil {
			return a.ctx.Err() // the guard's cancellation stands
		}
		a.raw.SetDeadline(a.deadline) // zero: none
		if err != nil && isTimeout(err) {
			return &HandshakeTimeoutError{Step: step, Hop: hop, Addr: addr, Limit: limit}
		}
	}
	return err
}

// socks runs SOCKS5 negotiation for next on conn with x/net/proxy. The
// SOCKS dialer sees conn behind fixedDeadline, so it cannot clear the
// budget's deadline; the caller's context is watched by guard.
func socks(ctx context.Context, conn net.Conn, h Hop, next string) error {
	var auth *xproxy.Auth
	if h.Auth != nil {
		auth = &xproxy.Auth{User: h.Auth.Username, Password: h.Auth.Password}
	}
	fwd := &connOnce{conn: fixedDeadline{conn}, addr: h.Addr()}
	sd, err := xproxy.SOCKS5("tcp", h.Addr(), auth, fwd)
	if err != nil {
		return err
	}
	cd, ok := sd.(xproxy.ContextDialer)
	if !ok {
		return errors.New("proxy: x/net/proxy SOCKS5 dialer lacks DialContext")
	}
	// The returned *socks.Conn only adds the bound address; keep using
	// conn, whose deadlines still work.
	_, err = cd.DialContext(ctx, "tcp", next)
	return err
}

// HandshakeOrigin does TLS with the origin on conn (a tunnel from
// DialChain, or a direct connection) under the same budget, as the step
// tls-to-origin. cfg must name the server (ServerName) and the ALPN
// protocols of the route's policy. On error conn is closed.
func HandshakeOrigin(ctx context.Context, d *Dialer, conn net.Conn, cfg *tls.Config, b route.Budget) (*tls.Conn, error) {
	if d == nil {
		d = &Dialer{}
	}
	a := newAcquisition(ctx, d.clock(), b)
	if err := a.enter(route.StepOriginTLS, 0, cfg.ServerName); err != nil {
		conn.Close()
		return nil, err
	}
	release := a.guard(conn)
	tc := tls.Client(conn, cfg)
	err := a.handshake(tc, d.TLSHandshakeTimeout, route.StepOriginTLS, 0, cfg.ServerName)
	if !release() {
		conn.Close()
		return nil, &StepError{Step: route.StepOriginTLS, Addr: cfg.ServerName, Err: ctx.Err()}
	}
	if err != nil {
		conn.Close()
		return nil, a.fail(err)
	}
	return tc, nil
}

// DialRoute establishes a connection for r: DialChain through r's hops to
// r.Addr(), then, for an https route, HandshakeOrigin. For an http route
// through proxies, bytes the last proxy sent after its CONNECT 2xx fail
// the dial with an *EarlyResponseError (CheckPlainTunnel). configs holds the
// secrets of each hop in order (nil for a route without credentials);
// DialRoute refuses to present credentials at a hop whose route key has
// no credential identity, and the reverse, so that the pool key and the
// actual route never disagree. originTLS may be nil; DialRoute clones it
// and fills in ServerName (r.Host()) and NextProtos (r.Policy().ALPN())
// when they are empty.
func DialRoute(ctx context.Context, d *Dialer, r route.Route, configs []HopConfig, originTLS *tls.Config, b route.Budget) (net.Conn, error) {
	if r.Key() == (route.Route{}).Key() {
		return nil, errors.New("proxy: zero route.Route")
	}
	if r.Policy() == route.PolicyH3 {
		return nil, errors.New("proxy: route policy h3 needs QUIC, not a TCP connection")
	}
	if configs != nil && len(configs) != r.NumHops() {
		return nil, errors.New("proxy: " + strconv.Itoa(len(configs)) + " hop configs for a route of " + strconv.Itoa(r.NumHops()) + " hops")
	}
	hops := make([]Hop, r.NumHops())
	for i := range hops {
		hops[i].Hop = r.Hop(i)
		if configs != nil {
			hops[i].HopConfig = configs[i]
		}
		if (hops[i].Auth != nil) != (hops[i].CredentialID != "") {
			return nil, &StepError{Step: route.StepNone, Hop: i + 1, Addr: hops[i].Addr(),
				Err: errors.New("credentials and the route's credential identity disagree")}
		}
	}
	conn, err := DialChain(ctx, d, hops, r.Addr(), b)
	if err != nil {
		return nil, err
	}
	if r.Scheme() != route.SchemeHTTPS {
		if len(hops) > 0 {
			last := hops[len(hops)-1]
			if err := CheckPlainTunnel(conn, len(hops), last.Addr()); err != nil {
				conn.Close()
				return nil, err
			}
		}
		return conn, nil
	}
	cfg := originTLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = r.Host()
	}
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = r.Policy().ALPN()
	}
	return HandshakeOrigin(ctx, d, conn, cfg, b)
}
