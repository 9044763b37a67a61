package dial

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// Conn is a new connection, before any HTTP runs on it.
type Conn struct {
	Conn net.Conn
	// Wire counts the bytes written under TLS with the origin; nil over
	// plain TCP, and nil when Opts.CountWire was not set.
	Wire *h1.WireCounter
	TLS  *tls.ConnectionState // nil over plain TCP
}

// Opts is what differs between the protocols in establishing a
// connection: the ALPN list offered to an https origin, and whether a
// WireCounter goes under TLS with it.
type Opts struct {
	ALPN []string
	// Start is when the attempt's acquisition began: the instant its
	// machine's acquire phase started, so that the proxy budget and the
	// machine measure one deadline from one instant on one clock.
	Start fsm.Instant
	// CountWire puts an h1.WireCounter beneath TLS with the origin
	// (Conn.Wire): the HTTP/1.1 path needs it, HTTP/2 observes the
	// plaintext side instead.
	CountWire bool
}

// Connect establishes a connection for key over snap's route. A direct
// route dials key.Addr through Config.DialContext; a proxied one goes
// through connectProxied. For https, TLS with the origin follows, offering
// o.ALPN, with the wire counter under it when o.CountWire is set.
func (d *Dialer) Connect(ctx context.Context, key pool.Key, snap *Route, o Opts) (Conn, error) {
	switch {
	case snap.Forward():
		return d.connectForward(ctx, snap, o)
	case snap.Proxied():
		return d.connectProxied(ctx, key, snap, o)
	}
	if key.Scheme == "https" && d.cfg.DialTLSContext != nil {
		return d.dialTLS(ctx, key)
	}
	raw, err := d.cfg.DialContext(ctx, "tcp", key.Addr)
	if err != nil {
		return Conn{}, err
	}
	if key.Scheme != "https" {
		return Conn{Conn: raw}, nil
	}
	under, wire := o.underTLS(raw)
	tc := tls.Client(under, d.TLSConfig(key.Host, o.ALPN))
	if err := d.handshake(ctx, tc, key.Addr); err != nil {
		raw.Close()
		return Conn{}, err
	}
	cs := tc.ConnectionState()
	return Conn{Conn: tc, Wire: wire, TLS: &cs}, nil
}

// handshake runs tc's handshake with the origin at addr under ctx, and
// Config.TLSHandshakeTimeout when set: one that outlives it is a
// *proxy.HandshakeTimeoutError.
func (d *Dialer) handshake(ctx context.Context, tc *tls.Conn, addr string) error {
	limit := d.cfg.TLSHandshakeTimeout
	hctx := ctx
	if limit > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	err := tc.HandshakeContext(hctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && hctx.Err() != nil:
		return &proxy.HandshakeTimeoutError{Step: route.StepOriginTLS, Addr: addr, Limit: limit}
	}
	return fmt.Errorf("replaysafe: TLS handshake with %s: %w", addr, err)
}

// dialTLS makes an https origin's connection with Config.DialTLSContext,
// as net/http does: the handshake is run here when the dialer left it to
// the caller, and ALPN is what the connection negotiated. A connection
// that is no *tls.Conn negotiated nothing: it speaks HTTP/1.1.
func (d *Dialer) dialTLS(ctx context.Context, key pool.Key) (Conn, error) {
	c, err := d.cfg.DialTLSContext(ctx, "tcp", key.Addr)
	if err != nil {
		return Conn{}, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return Conn{Conn: c, TLS: &tls.ConnectionState{HandshakeComplete: true}}, nil
	}
	if err := d.handshake(ctx, tc, key.Addr); err != nil {
		c.Close()
		return Conn{}, err
	}
	cs := tc.ConnectionState()
	return Conn{Conn: tc, TLS: &cs}, nil
}

// underTLS returns the connection TLS with the origin runs over: c, or
// a WireCounter over it (also returned) when o.CountWire is set.
func (o Opts) underTLS(c net.Conn) (net.Conn, *h1.WireCounter) {
	if !o.CountWire {
		return c, nil
	}
	w := h1.NewWireCounter(c)
	return w, w
}

// TLSConfig returns the TLS configuration for a connection to host,
// offering alpn.
func (d *Dialer) TLSConfig(host string, alpn []string) *tls.Config {
	var cfg *tls.Config
	if d.cfg.TLSClientConfig != nil {
		cfg = d.cfg.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = append([]string(nil), alpn...)
	return cfg
}
