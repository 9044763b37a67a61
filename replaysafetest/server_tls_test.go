package replaysafetest

import (
	"crypto/ecdsa"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

func TestAddrURLAndCertificates(t *testing.T) {
	plain := start(t, Config{})
	if !strings.HasPrefix(plain.Addr(), "127.0.0.1:") || plain.URL() != "http://"+plain.Addr() {
		t.Errorf("Addr %q URL %q", plain.Addr(), plain.URL())
	}
	if plain.ClientTLSConfig() != nil || plain.CertPool() != nil || plain.Certificate() != nil || plain.TLS() {
		t.Error("plain server has TLS material")
	}

	s := start(t, Config{TLS: true})
	if s.URL() != "https://"+s.Addr() || !s.TLS() {
		t.Errorf("URL %q", s.URL())
	}
	cert := s.Certificate()
	for _, h := range []string{"127.0.0.1", "localhost", "::1"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("certificate not valid for %s: %v", h, err)
		}
	}
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("unexpected key type %T", cert.PublicKey)
	}
	if cfg := s.ClientTLSConfig(); cfg.RootCAs == nil || cfg.ServerName != "127.0.0.1" {
		t.Errorf("client config %+v", cfg)
	}
	if a, b := s.ClientTLSConfig(), s.ClientTLSConfig(); a == b {
		t.Error("ClientTLSConfig returns a shared value")
	}
}

func TestTLSOnlyHTTP11(t *testing.T) {
	s := start(t, Config{TLS: true})
	try := func(protos ...string) (string, error) {
		cfg := s.ClientTLSConfig()
		cfg.NextProtos = protos
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr(), cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().NegotiatedProtocol, nil
	}
	if p, err := try("h2", "http/1.1"); err != nil || p != "http/1.1" {
		t.Errorf("h2,http/1.1: negotiated %q, %v", p, err)
	}
	if p, err := try("h2"); err == nil {
		t.Errorf("h2 only: negotiated %q, want a handshake failure", p)
	}
	if _, err := try(); err != nil {
		t.Errorf("no ALPN: %v", err)
	}
	// A client that does not trust the certificate fails.
	if c, err := tls.Dial("tcp", s.Addr(), &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		c.Close()
		t.Error("handshake succeeded without the server's root")
	}
	if err := s.WaitConns(ctxT(t), 4); err != nil {
		t.Error(err)
	}
	if s.Count() != 0 || len(s.Partial()) != 0 {
		t.Errorf("handshakes recorded requests: %v %v", s.Requests(), s.Partial())
	}
}
