package driver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// persistConn is one HTTP/1.1 connection: net/http's single-connection
// client over the counting Conn it was given. Its pool is a
// pool.Idle[*persistConn].
type persistConn struct {
	cc   *http.ClientConn
	conn *h1.Conn
	tls  *tls.ConnectionState // nil over plain TCP
	idle pool.IdleState       // its route, and its idle timer

	limit       *pool.Limit // where its room is counted
	closeOnce   sync.Once
	releaseOnce sync.Once
	obs         connObs
}

func (pc *persistConn) Idle() *pool.IdleState { return &pc.idle }

// Close closes the connection, and gives its room in the connection
// limit back; net/http's loops exit with it. The pool calls it: for
// Config.OnConn the connection closed idle.
func (pc *persistConn) Close() { pc.closeFor(CloseIdle) }

// closeFor is Close, reporting why.
func (pc *persistConn) closeFor(why CloseReason) {
	pc.closeOnce.Do(func() { pc.cc.Close() })
	pc.release()
	pc.obs.shut(pc.idle.Key.Addr, why)
}

// release gives the connection's room in the limit back, once: when it
// closes, or when the caller took it over (a 101 response). Its idle
// timer stops and lets go of it.
func (pc *persistConn) release() {
	pc.releaseOnce.Do(func() {
		pc.idle.Release()
		pc.limit.Closed(pc.idle.Key)
	})
}

// reusable detaches pc from its attempt and reports whether it may go
// back to the pool: net/http's client is alive and free, and no byte
// arrived that no request asked for.
func (pc *persistConn) reusable() bool {
	pc.conn.Detach()
	return pc.cc.Err() == nil && pc.cc.Available() == 1 && !pc.conn.Stale()
}

// preDialedKey is the context key under which dialH1 hands its connection
// to the factory http.Transport's DialContext.
type preDialedKey struct{}

// proxyURLKey is the context key under which dialH1 hands a forward
// route's proxy (with its credentials) to the factory's Proxy, so that
// net/http sends the connection's requests in absolute form with
// Proxy-Authorization.
type proxyURLKey struct{}

// errNoPreDialed means NewClientConn dialed without a connection in its
// context: a broken invariant of this package, reported as an error
// because it happens inside net/http.
var errNoPreDialed = errors.New("replaysafe: internal error: NewClientConn dialed without a pre-dialed connection")

// newFactory returns the http.Transport whose only job is to build
// single-connection clients (NewClientConn) over connections dialH1 made.
// Its dialers return exactly the connection in the context (DialTLSContext
// for one that is TLS with an https proxy already), so net/http never
// dials, never pools and never retries: a ClientConn carries one request
// at a time and RoundTrip on it has no retry loop. Its Proxy names a
// forward route's proxy, and nothing otherwise.
func newFactory(cfg Config) *http.Transport {
	var protos http.Protocols
	protos.SetHTTP1(true)
	preDialed := func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, ok := ctx.Value(preDialedKey{}).(net.Conn)
		if !ok {
			return nil, errNoPreDialed
		}
		return c, nil
	}
	return &http.Transport{
		DialContext:    preDialed,
		DialTLSContext: preDialed,
		Proxy: func(req *http.Request) (*url.URL, error) {
			u, _ := req.Context().Value(proxyURLKey{}).(*url.URL)
			return u, nil
		},
		Protocols:              &protos,
		DisableCompression:     cfg.DisableCompression,
		MaxResponseHeaderBytes: cfg.MaxResponseHeaderBytes,
		ExpectContinueTimeout:  cfg.ExpectContinueTimeout,
		DisableKeepAlives:      cfg.DisableKeepAlives,
	}
}

// dialH1 makes a new connection for key over snap, the call's route (nil:
// a direct route route.New could not build): the TCP connection, the
// proxy tunnel and TLS with the origin for https, or the connection to a
// forward route's proxy (dial.Dialer.Connect); the counting h1.Conn on
// top, and net/http's client connection over that. The scheme given to
// NewClientConn is always "http": TLS is already done, and net/http only
// ever sees the plaintext side; through a forward route it writes each
// request in absolute form, with the proxy's credentials.
func (t *Transport) dialH1(ctx context.Context, key pool.Key, snap *dial.Route, alpn []string, start fsm.Instant) (*persistConn, error) {
	c, err := t.dial.Connect(ctx, key, snap, dial.Opts{ALPN: alpn, CountWire: true, Start: start})
	if err != nil {
		return nil, err
	}
	return t.clientConn(ctx, key, snap, c)
}

// clientConn puts net/http's client connection over c, established for
// key over snap: the counting h1.Conn, then the ClientConn.
func (t *Transport) clientConn(ctx context.Context, key pool.Key, snap *dial.Route, c dial.Conn) (*persistConn, error) {
	conn := h1.NewConn(c.Conn, c.Wire)
	fctx := context.WithValue(ctx, preDialedKey{}, net.Conn(conn))
	if u := snap.ProxyURL(); u != nil {
		fctx = context.WithValue(fctx, proxyURLKey{}, u)
	}
	cc, err := t.factory.NewClientConn(fctx, "http", key.Addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &persistConn{cc: cc, conn: conn, tls: c.TLS, idle: pool.IdleState{Key: key}, limit: t.limit}, nil
}

// acquire returns a connection for key: for an original attempt the most
// recently pooled one that is still usable, else a new one. A resend
// always gets a new one. The connection is attached to rec and reserved
// for one request.
//
// A route at MaxConnsPerHost waits, under the acquisition deadline, until
// a connection closes or (for an original attempt) one comes back idle.
// A dial that finds the route not answering is waited out as w says
// (pool.DialWaiting; spec/choices.md, choice 23).
func (t *Transport) acquire(ctx context.Context, key pool.Key, snap *dial.Route, alpn []string, pooled bool, w pool.Redialing, rec *h1.Recorder) (*persistConn, bool, error) {
	for {
		if pooled {
			if pc := t.pooled(key, rec); pc != nil {
				return pc, true, nil
			}
		}
		if t.limit.TryOpen(key) {
			break
		}
		if err := t.limit.Wait(ctx, key); err != nil {
			return nil, false, err
		}
	}
	pc, err := pool.DialWaiting(ctx, t.h1down, key, w, func() (*persistConn, error) {
		return t.dialH1(ctx, key, snap, alpn, rec.Start())
	})
	if err != nil {
		t.limit.Closed(key)
		return nil, false, err
	}
	if !usable(pc, rec) {
		pc.Close()
		return nil, false, errors.New("replaysafe: new connection unusable at once")
	}
	t.opened(&pc.obs, key, fsm.ProtoH1)
	rec.Acquired(false)
	return pc, false, nil
}

// adopt takes over c, a TLS connection on which ALPN chose HTTP/1.1
// for a leg that offered HTTP/2 too (nothing was sent on it), as the
// fresh connection of an HTTP/1.1 attempt for key, attached to rec; nil
// (c closed) when the route is at MaxConnsPerHost or the connection is
// unusable, and the attempt then acquires as it would have.
func (t *Transport) adopt(ctx context.Context, key pool.Key, c dial.Conn, rec *h1.Recorder) *persistConn {
	if !t.limit.TryOpen(key) {
		c.Conn.Close()
		return nil
	}
	pc, err := t.clientConn(ctx, key, nil, c)
	if err != nil {
		t.limit.Closed(key)
		return nil
	}
	if !usable(pc, rec) {
		pc.Close()
		return nil
	}
	t.opened(&pc.obs, key, fsm.ProtoH1)
	rec.Acquired(false)
	return pc
}

// pooled returns the most recently pooled connection for key that is
// still usable, attached to rec, or nil; the unusable ones met on the way
// close.
func (t *Transport) pooled(key pool.Key, rec *h1.Recorder) *persistConn {
	for range t.cfg.MaxIdleConnsPerHost {
		pc, ok := t.h1pool.Get(key)
		if !ok {
			return nil
		}
		if usable(pc, rec) {
			pc.obs.reused(pc.idle.Key.Addr)
			rec.Acquired(true)
			return pc
		}
		pc.closeFor(CloseBroken)
	}
	return nil
}

// usable attaches rec to pc and reserves pc's one request slot, unless pc
// is closed or a read returned while it sat idle (the peer closed or
// reset it, or sent unsolicited bytes).
func usable(pc *persistConn, rec *h1.Recorder) bool {
	if pc.cc.Err() != nil {
		return false
	}
	if err := pc.conn.Attach(rec); err != nil {
		return false
	}
	if err := pc.cc.Reserve(); err != nil {
		pc.conn.Detach()
		return false
	}
	return true
}

// gotConn calls the caller's httptrace GotConn hook, if any: net/http's
// single-connection client does not, since it does not acquire.
func (t *Transport) gotConn(ctx context.Context, pc *persistConn, reused bool) {
	trace := httptrace.ContextClientTrace(ctx)
	if trace == nil || trace.GotConn == nil {
		return
	}
	info := httptrace.GotConnInfo{Conn: pc.conn, Reused: reused, WasIdle: reused}
	if since := pc.idle.IdleSince(); reused && !since.IsZero() {
		info.IdleTime = time.Since(since)
	}
	trace.GotConn(info)
}
