package dial

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/pool"
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
	raw, err := d.cfg.DialContext(ctx, "tcp", key.Addr)
	if err != nil {
		return Conn{}, err
	}
	if key.Scheme != "https" {
		return Conn{Conn: raw}, nil
	}
	under, wire := o.underTLS(raw)
	tc := tls.Client(under, d.TLSConfig(key.Host, o.ALPN))
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return Conn{}, fmt.Errorf("replaysafe: TLS handshake with %s: %w", key.Addr, err)
	}
	cs := tc.ConnectionState()
	return Conn{Conn: tc, Wire: wire, TLS: &cs}, nil
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
