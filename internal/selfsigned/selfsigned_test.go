package selfsigned

import (
	"crypto/x509"
	"testing"
)

func TestCertificateVerifiesForLoopback(t *testing.T) {
	cert, leaf, err := New("test")
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf != leaf || leaf.Subject.CommonName != "test" {
		t.Fatalf("leaf %v, common name %q", cert.Leaf == leaf, leaf.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("the certificate verifies for example.com")
	}
}
