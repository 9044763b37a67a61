package transports

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

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

// dial makes a new connection for key: TCP through Options.DialContext,
// TLS over it for https, the counting h1.Conn on top, and net/http's
// client connection over that. The scheme given to NewClientConn is
// always "http": TLS is already done, and net/http only ever sees the
// plaintext side.
func (t *Transport) dial(ctx context.Context, key connKey) (*persistConn, error) {
	raw, err := t.opt.DialContext(ctx, "tcp", key.addr)
	if err != nil {
		return nil, err
	}
	var (
		conn  *h1.Conn
		state *tls.ConnectionState
	)
	if key.scheme == "https" {
		wire := h1.NewWireCounter(raw)
		tc := tls.Client(wire, t.tlsConfig(key.host))
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("replaysafe: TLS handshake with %s: %w", key.addr, err)
		}
		cs := tc.ConnectionState()
		state = &cs
		conn = h1.NewConn(tc, wire)
	} else {
		conn = h1.NewConn(raw, nil)
	}
	cc, err := t.factory.NewClientConn(context.WithValue(ctx, preDialedKey{}, net.Conn(conn)), "http", key.addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &persistConn{key: key, cc: cc, conn: conn, tls: state}, nil
}

// tlsConfig returns the TLS configuration for a connection to host.
func (t *Transport) tlsConfig(host string) *tls.Config {
	var cfg *tls.Config
	if t.opt.TLSClientConfig != nil {
		cfg = t.opt.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	return cfg
}
