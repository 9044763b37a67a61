package replaysafe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/adapters/h1"
)

// preDialedKey is the context key under which dial hands its connection
// to the factory http.Transport's DialContext.
type preDialedKey struct{}

// errNoPreDialed means NewClientConn dialed without a connection in its
// context: a broken invariant of this package, reported as an error
// because it happens inside net/http.
var errNoPreDialed = errors.New("replaysafe: internal error: NewClientConn dialed without a pre-dialed connection")

// newFactory returns the http.Transport whose only job is to build
// single-connection clients (NewClientConn) over connections dial made.
// Its DialContext returns exactly the connection in the context, so
// net/http never dials, never pools and never retries: a ClientConn
// carries one request at a time and RoundTrip on it has no retry loop.
func newFactory(o Options) *http.Transport {
	var protos http.Protocols
	protos.SetHTTP1(true)
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, ok := ctx.Value(preDialedKey{}).(net.Conn)
			if !ok {
				return nil, errNoPreDialed
			}
			return c, nil
		},
		Protocols:              &protos,
		DisableCompression:     o.DisableCompression,
		MaxResponseHeaderBytes: o.MaxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
	}
}

// dial makes a new connection for key over snap, the call's route (nil: a
// direct route route.New could not build): the
// TCP connection or the proxy tunnel and TLS with the origin for https
// (connect), the counting h1.Conn on top, and net/http's client
// connection over that. The scheme given to NewClientConn is always
// "http": TLS is already done, and net/http only ever sees the plaintext
// side.
func (t *Transport) dial(ctx context.Context, key connKey, snap *routeSnapshot, alpn []string, start fsm.Instant) (*persistConn, error) {
	c, err := t.connect(ctx, key, snap, connectOpts{alpn: alpn, countWire: true, start: start})
	if err != nil {
		return nil, err
	}
	conn := h1.NewConn(c.conn, c.wire)
	cc, err := t.factory.NewClientConn(context.WithValue(ctx, preDialedKey{}, net.Conn(conn)), "http", key.addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &persistConn{key: key, cc: cc, conn: conn, tls: c.tls, limit: t.limit}, nil
}

// established is a new connection, before any HTTP runs on it.
type established struct {
	conn net.Conn
	// wire counts the bytes written under TLS with the origin; nil over
	// plain TCP, and nil when connectOpts.countWire was not set.
	wire *h1.WireCounter
	tls  *tls.ConnectionState // nil over plain TCP
}

// connectOpts is what differs between the HTTP/1.1 and HTTP/2 paths in
// establishing a connection: the ALPN list offered to an https origin,
// and whether a WireCounter goes under TLS with it.
type connectOpts struct {
	alpn []string
	// start is when the attempt's acquisition began: the instant its
	// machine's acquire phase started, so that the proxy budget and the
	// machine measure one deadline from one instant on one clock.
	start fsm.Instant
	// countWire puts an h1.WireCounter beneath TLS with the origin
	// (established.wire): the HTTP/1.1 path needs it, the HTTP/2 path
	// observes the plaintext side instead (adapters/h2.Observe).
	countWire bool
}

// connect establishes a connection for key over snap's route. A direct
// route dials key.addr through Options.DialContext; a proxied one goes
// through connectProxied. For https, TLS with the origin follows, offering
// o.alpn, with the wire counter under it when o.countWire is set.
func (t *Transport) connect(ctx context.Context, key connKey, snap *routeSnapshot, o connectOpts) (established, error) {
	if snap != nil && snap.route.Proxied() {
		return t.connectProxied(ctx, key, snap, o)
	}
	raw, err := t.opt.DialContext(ctx, "tcp", key.addr)
	if err != nil {
		return established{}, err
	}
	if key.scheme != "https" {
		return established{conn: raw}, nil
	}
	under, wire := o.underTLS(raw)
	tc := tls.Client(under, t.tlsConfig(key.host, o.alpn))
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return established{}, fmt.Errorf("replaysafe: TLS handshake with %s: %w", key.addr, err)
	}
	cs := tc.ConnectionState()
	return established{conn: tc, wire: wire, tls: &cs}, nil
}

// underTLS returns the connection TLS with the origin runs over: c, or
// a WireCounter over it (also returned) when o.countWire is set.
func (o connectOpts) underTLS(c net.Conn) (net.Conn, *h1.WireCounter) {
	if !o.countWire {
		return c, nil
	}
	w := h1.NewWireCounter(c)
	return w, w
}

// tlsConfig returns the TLS configuration for a connection to host,
// offering alpn.
func (t *Transport) tlsConfig(host string, alpn []string) *tls.Config {
	var cfg *tls.Config
	if t.opt.TLSClientConfig != nil {
		cfg = t.opt.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = append([]string(nil), alpn...)
	return cfg
}
