package kit

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/replaysafe/replaysafe/internal/selfsigned"
)

// Cert is a server's self-signed certificate, or none for a server
// without TLS. The zero Cert has none.
type Cert struct {
	leaf *x509.Certificate
	alpn []string // what ClientTLSConfig offers
	min  uint16   // the lowest TLS version
}

// NewCert makes a fresh self-signed certificate named name and returns
// the server configuration offering alpn from TLS version min, and the
// Cert.
func NewCert(name string, alpn []string, min uint16) (*tls.Config, Cert, error) {
	cert, leaf, err := selfsigned.New(name)
	if err != nil {
		return nil, Cert{}, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: alpn, MinVersion: min}
	return cfg, Cert{leaf: leaf, alpn: alpn, min: min}, nil
}

// Certificate returns the server's self-signed certificate, or nil
// without TLS.
func (c Cert) Certificate() *x509.Certificate { return c.leaf }

// CertPool returns a new pool holding only the server's certificate, or
// nil without TLS.
func (c Cert) CertPool() *x509.CertPool {
	if c.leaf == nil {
		return nil
	}
	p := x509.NewCertPool()
	p.AddCert(c.leaf)
	return p
}

// ClientTLSConfig returns a new client configuration that trusts only
// the server's certificate, with ServerName "127.0.0.1" and the server's
// first ALPN protocol; nil without TLS.
func (c Cert) ClientTLSConfig() *tls.Config {
	if c.leaf == nil {
		return nil
	}
	return &tls.Config{RootCAs: c.CertPool(), ServerName: "127.0.0.1", NextProtos: c.alpn[:1], MinVersion: c.min}
}

// BaseURL is the base URL of a server listening on addr: https:// with
// TLS, else http://.
func BaseURL(tls bool, addr string) string {
	if tls {
		return "https://" + addr
	}
	return "http://" + addr
}
