package replaysafetest

import (
	"crypto/tls"
	"crypto/x509"
)

// TLS reports whether the server speaks TLS.
func (s *Server) TLS() bool { return s.cfg.TLS }

// Certificate returns the server's self-signed certificate, or nil
// without TLS.
func (s *Server) Certificate() *x509.Certificate { return s.cert.Certificate() }

// CertPool returns a new pool holding only the server's certificate, or
// nil without TLS.
func (s *Server) CertPool() *x509.CertPool { return s.cert.CertPool() }

// ClientTLSConfig returns a new client configuration that trusts only the
// server's certificate, with ServerName "127.0.0.1" (an IP SAN of the
// certificate) and ALPN "http/1.1". It returns nil without TLS.
func (s *Server) ClientTLSConfig() *tls.Config { return s.cert.ClientTLSConfig() }
