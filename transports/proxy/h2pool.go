package proxy

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// maxH2Waits bounds how many dials to the same proxy by other
// acquisitions one acquisition waits for before it dials its own.
const maxH2Waits = 8

// maxH1Memos bounds the proxies an H2Pool remembers as having picked
// HTTP/1.1 while it holds no connection to them: past it, such a proxy
// is forgotten, and the next burst of acquisitions waits for one dial
// again before dialing in parallel.
const maxH1Memos = 256

// H2Pool holds the HTTP/2 connections to HTTPS proxies that carry
// CONNECT tunnels as streams (RFC 9113 §8.5), shared by every tunnel
// through the same proxy (the same route.Hop, credential identity
// included, and the same *tls.Config pointer in HopConfig), whatever its
// target. Set it as Dialer.H2; one H2Pool
// serves any number of Dialers and acquisitions at once. The zero H2Pool
// is ready to use.
//
// A tunnel takes a stream of a connection that can open one (fewer open
// than the proxy's SETTINGS_MAX_CONCURRENT_STREAMS and
// Config.MaxConcurrentStreams, 1000 by default); when none can, a new
// connection is dialed. A new connection takes its first tunnel at once
// and more only once the proxy's SETTINGS arrived: until then the
// others wait (under their own deadline), so that none waits beyond a
// limit the proxy has but had not announced. Acquisitions that find a
// dial to the same proxy in progress wait for it (under their own
// deadline) rather than dial one each. A proxy that picks HTTP/1.1 gets
// the HTTP/1.1 CONNECT on that connection, and later acquisitions dial
// their own without waiting. A connection is closed when its last tunnel
// closes, so that no idle proxy connection outlives the tunnels (the
// pooled origin connections) that used it.
type H2Pool struct {
	// Config configures each HTTP/2 connection to a proxy.
	Config h2.Config

	mu      sync.Mutex
	entries map[h2Key]*h2Entry
}

// h2Key identifies the connections one tunnel may share.
type h2Key struct {
	hop route.Hop
	tls *tls.Config
}

type h2Entry struct {
	conns   []*h2Conn
	dialing chan struct{} // closed when the dial in progress ends; nil when none
	h1      bool          // the last dial's proxy picked HTTP/1.1
}

type h2Conn struct {
	cc      *h2.ClientConn
	tunnels int // reserved or open tunnels
}

// Conns returns the number of HTTP/2 proxy connections open.
func (p *H2Pool) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		n += len(e.conns)
	}
	return n
}

// Close closes every connection at once; their tunnels fail. The pool
// stays usable.
func (p *H2Pool) Close() error {
	p.mu.Lock()
	var all []*h2Conn
	for k, e := range p.entries {
		all = append(all, e.conns...)
		e.conns = nil
		if e.dialing == nil {
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
	for _, c := range all {
		c.cc.Close()
	}
	return nil
}

// entry returns key's entry, created if missing. The caller holds mu.
func (p *H2Pool) entry(key h2Key) *h2Entry {
	if p.entries == nil {
		p.entries = map[h2Key]*h2Entry{}
	}
	e := p.entries[key]
	if e == nil {
		e = &h2Entry{}
		p.entries[key] = e
	}
	return e
}

// prune drops e, key's entry, when it holds nothing: no connection, no
// dial, and no memo of an HTTP/1.1 proxy (or too many of them). The
// caller holds mu.
func (p *H2Pool) prune(key h2Key, e *h2Entry) {
	if len(e.conns) == 0 && e.dialing == nil && (!e.h1 || len(p.entries) > maxH1Memos) {
		delete(p.entries, key)
	}
}

// reserve takes a stream of one of e's connections, or returns nil and
// whether one of them will take more once the proxy's SETTINGS arrive: a
// connection takes a second tunnel only then, since until them the
// proxy's stream limit is a guess (100) that a tunnel waiting beyond
// the real one would wait out its whole deadline on. The caller holds
// mu.
func (e *h2Entry) reserve() (c *h2Conn, settling bool) {
	for _, c := range e.conns {
		if c.tunnels > 0 && !c.cc.Settled() {
			settling = settling || !c.cc.Closed()
			continue
		}
		if c.cc.Reserve() {
			c.tunnels++
			return c, false
		}
	}
	return nil, settling
}

// release ends one tunnel of c; the last one closes c.
func (p *H2Pool) release(key h2Key, c *h2Conn) {
	p.mu.Lock()
	c.tunnels--
	last := c.tunnels == 0
	if last {
		if e := p.entries[key]; e != nil {
			for i, x := range e.conns {
				if x == c {
					e.conns = append(e.conns[:i], e.conns[i+1:]...)
					break
				}
			}
			p.prune(key, e)
		}
	}
	p.mu.Unlock()
	if last {
		c.cc.Close()
	}
}

// dialChain is DialChain through hops whose first is an HTTPS proxy.
func (p *H2Pool) dialChain(a *acquisition, d *Dialer, hops []Hop, target string) (net.Conn, error) {
	next := target
	if len(hops) > 1 {
		next = hops[1].Addr()
	}
	tunnel, raw, tc, err := p.tunnel(a, d, hops[0], next)
	if err != nil {
		return nil, err
	}
	if tunnel == nil {
		// The proxy picked HTTP/1.1: go on as DialChain does, TLS done.
		return a.chainFrom(d, raw, tc, hops, target, 0, true)
	}
	if len(hops) == 1 {
		return tunnel, nil
	}
	return a.chainFrom(d, tunnel, tunnel, hops, target, 1, false)
}

// tunnel opens an HTTP/2 CONNECT tunnel to next through the proxy h, on
// a shared connection or a new one. When the new connection's proxy
// picked HTTP/1.1, tunnel is nil and raw and tc are that connection
// (TCP, and TLS on it) for the HTTP/1.1 CONNECT.
func (p *H2Pool) tunnel(a *acquisition, d *Dialer, h Hop, next string) (tunnel net.Conn, raw net.Conn, tc *tls.Conn, err error) {
	req := ConnectRequest{Target: next, Auth: h.Auth, Header: h.Header, Hop: 1, Proxy: h.Addr()}
	header, err := h2ConnectHeader(req)
	if err != nil {
		return nil, nil, nil, &StepError{Step: route.StepConnect, Hop: 1, Addr: h.Addr(), Err: err}
	}
	key := h2Key{hop: h.Hop, tls: h.TLSConfig}
	waits, settles := 0, 0
	for { // each pass takes a stream, waits for a dial or SETTINGS, or dials; dial waits are bounded, SETTINGS waits end with the deadline or the proxy's SETTINGS timeout
		p.mu.Lock()
		e := p.entry(key)
		c, settling := e.reserve()
		if c != nil {
			p.mu.Unlock()
			t, err := p.open(a, d, h, req, header, key, c)
			return t, nil, nil, err
		}
		if settling {
			p.mu.Unlock()
			if err := a.waitProxy(nil, settlePause(settles), h.Addr()); err != nil {
				return nil, nil, nil, err
			}
			settles++
			continue
		}
		if wait := e.dialing; wait != nil && !e.h1 && waits < maxH2Waits {
			p.mu.Unlock()
			if err := a.waitProxy(wait, 0, h.Addr()); err != nil {
				return nil, nil, nil, err
			}
			waits++
			continue
		}
		var mine chan struct{}
		if e.dialing == nil {
			mine = make(chan struct{})
			e.dialing = mine
		}
		p.mu.Unlock()
		raw, tc, err := a.dialH2Proxy(d, h)
		p.mu.Lock()
		e = p.entry(key)
		if mine != nil {
			e.dialing = nil
			close(mine)
		}
		switch {
		case err != nil:
			p.prune(key, e)
			p.mu.Unlock()
			return nil, nil, nil, err
		case tc.ConnectionState().NegotiatedProtocol != "h2":
			e.h1 = true
			p.prune(key, e)
			p.mu.Unlock()
			return nil, raw, tc, nil
		}
		e.h1 = false
		cc, err := h2.NewClientConn(tc, p.Config)
		if err != nil {
			p.mu.Unlock()
			raw.Close()
			return nil, nil, nil, &StepError{Step: route.StepProxyTLS, Hop: 1, Addr: h.Addr(), Err: err}
		}
		if !cc.Reserve() {
			// It ended already (the proxy closed it at once).
			p.mu.Unlock()
			cc.Close()
			return nil, nil, nil, &StepError{Step: route.StepConnect, Hop: 1, Addr: h.Addr(), Err: cc.Err()}
		}
		c = &h2Conn{cc: cc, tunnels: 1}
		e.conns = append(e.conns, c)
		p.mu.Unlock()
		t, err := p.open(a, d, h, req, header, key, c)
		return t, nil, nil, err
	}
}

// open runs the CONNECT on a stream of c, reserved for it.
func (p *H2Pool) open(a *acquisition, d *Dialer, h Hop, req ConnectRequest, header http.Header, key h2Key, c *h2Conn) (net.Conn, error) {
	if err := a.enter(route.StepConnect, 1, h.Addr()); err != nil {
		c.cc.Unreserve()
		p.release(key, c)
		return nil, err
	}
	ctx, cancel := a.stepContext()
	defer cancel()
	t, res, err := c.cc.Tunnel(ctx, req.Target, header)
	if err != nil {
		// Nothing was tunneled: a reset, GOAWAY or the connection's end
		// before the 2xx means the target never saw a byte of ours.
		p.release(key, c)
		return nil, a.fail(err)
	}
	if t == nil {
		p.release(key, c)
		return nil, &ConnectError{
			Hop: 1, Proxy: h.Addr(), Target: req.Target,
			StatusCode: res.StatusCode, Status: http.StatusText(res.StatusCode),
			ProxyAuthenticate: res.Header.Values("Proxy-Authenticate"),
			Header:            res.Header,
		}
	}
	pt := &h2Tunnel{TunnelConn: t, release: func() { p.release(key, c) }}
	if d.OnConnectResponse != nil {
		resp := &Response{Proto: "HTTP/2.0", StatusCode: res.StatusCode, Reason: http.StatusText(res.StatusCode), Header: res.Header}
		if err := d.OnConnectResponse(h, req, resp); err != nil {
			pt.Close()
			return nil, &StepError{Step: route.StepConnect, Hop: 1, Addr: h.Addr(), Err: err}
		}
	}
	return pt, nil
}

// h2Tunnel is a tunnel of an H2Pool connection: closing it gives its
// stream back to the pool.
type h2Tunnel struct {
	*h2.TunnelConn
	once    sync.Once
	release func()
}

// Close closes the tunnel and releases its share of the connection.
func (t *h2Tunnel) Close() error {
	err := t.TunnelConn.Close()
	t.once.Do(t.release)
	return err
}

// settlePause is how long an acquisition waits before it looks again
// for a proxy connection's SETTINGS, after n looks: 1, 2, 4, 8 ms, then
// 16 ms, as the origin pool waits (spec/choices.md, choice 24).
func settlePause(n int) time.Duration { return time.Millisecond << min(n, 4) }

// waitProxy waits, as step tls-to-proxy at hop 1 (the proxy connection
// is not ready yet), for done to close (another acquisition's dial to
// the proxy at addr) or, when pause is positive, for that long, under
// this acquisition's context and deadline.
func (a *acquisition) waitProxy(done <-chan struct{}, pause time.Duration, addr string) error {
	if err := a.enter(route.StepProxyTLS, 1, addr); err != nil {
		return err
	}
	var timeout, again <-chan time.Time
	if !a.deadline.IsZero() {
		t := time.NewTimer(time.Until(a.deadline))
		defer t.Stop()
		timeout = t.C
	}
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		again = t.C
	}
	select {
	case <-done:
		return nil
	case <-again:
		return nil
	case <-a.ctx.Done():
		return a.fail(a.ctx.Err())
	case <-timeout:
		return a.fail(os.ErrDeadlineExceeded)
	}
}

// dialH2Proxy dials the proxy h (DNS, TCP, TLS offering h2 then
// http/1.1) under the acquisition, and returns the connection without a
// deadline.
func (a *acquisition) dialH2Proxy(d *Dialer, h Hop) (net.Conn, *tls.Conn, error) {
	raw, err := a.dialFirst(d, h.Addr(), 1)
	if err != nil {
		return nil, nil, err
	}
	release := a.guard(raw)
	var tc *tls.Conn
	if err = a.enter(route.StepProxyTLS, 1, h.Addr()); err == nil {
		if tc, err = a.proxyTLS(d, raw, h, 1, true); err != nil {
			err = a.fail(err)
		}
	}
	if !release() {
		raw.Close()
		return nil, nil, &StepError{Step: a.step, Hop: a.hop, Addr: a.addr, Err: a.ctx.Err()}
	}
	if err != nil {
		raw.Close()
		return nil, nil, err
	}
	return raw, tc, nil
}

// h2ConnectHeader returns the header fields of req's HTTP/2 CONNECT:
// Proxy-Authorization from req.Auth and req.Header's other fields,
// checked as AppendConnectRequest checks them.
func h2ConnectHeader(req ConnectRequest) (http.Header, error) {
	if _, err := AppendConnectRequest(nil, req); err != nil {
		return nil, err
	}
	h := make(http.Header, len(req.Header)+1)
	for k, vs := range req.Header {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if ck == "Host" || ck == "Proxy-Authorization" {
			continue
		}
		h[ck] = append(h[ck], vs...)
	}
	if req.Auth != nil {
		v, err := req.Auth.basic()
		if err != nil {
			return nil, err
		}
		h.Set("Proxy-Authorization", v)
	}
	return h, nil
}
