package kit

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"

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

// ListenTCP opens a server's listener on 127.0.0.1 with a kernel-chosen
// port, and, when withTLS is set, makes its certificate for name with
// ALPN alpn (TLS 1.2 at least). what names the server in the error.
func ListenTCP(what, name string, alpn []string, withTLS bool) (net.Listener, *tls.Config, Cert, error) {
	var (
		cfg  *tls.Config
		cert Cert
	)
	if withTLS {
		var err error
		if cfg, cert, err = NewCert(name, alpn, tls.VersionTLS12); err != nil {
			return nil, nil, Cert{}, err
		}
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, Cert{}, fmt.Errorf("%s: listen: %w", what, err)
	}
	return ln, cfg, cert, nil
}
