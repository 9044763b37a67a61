package h2server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"

	"golang.org/x/net/http2"
)

// TLS reports whether the server speaks TLS.
func (s *Server) TLS() bool { return s.cfg.TLS }

// Dial opens a client connection to the server: a TCP connection for h2c,
// or a TLS connection whose handshake (ALPN "h2") is complete.
func (s *Server) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return nil, err
	}
	if !s.cfg.TLS {
		return c, nil
	}
	tc := tls.Client(c, s.ClientTLSConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		tc.Close()
		return nil, fmt.Errorf("h2server: negotiated protocol %q, want %q", p, http2.NextProtoTLS)
	}
	return tc, nil
}

// Certificate returns the server's self-signed certificate, or nil for
// h2c.
func (s *Server) Certificate() *x509.Certificate { return s.cert.Certificate() }

// CertPool returns a new pool holding only the server's certificate, or
// nil for h2c.
func (s *Server) CertPool() *x509.CertPool { return s.cert.CertPool() }

// ClientTLSConfig returns a new client configuration that trusts only
// the server's certificate and offers ALPN "h2", or nil for h2c.
func (s *Server) ClientTLSConfig() *tls.Config { return s.cert.ClientTLSConfig() }
