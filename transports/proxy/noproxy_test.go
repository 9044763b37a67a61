package proxy

import (
	"net/url"
	"testing"

	"golang.org/x/net/http/httpproxy"

	"github.com/replaysafe/replaysafe/fsm/route"
)

const testProxy = "http://proxy.test:3128"

// Reference: request-dispatch-guarantees, "Proxy Route Consistency":
// "Implicit destination ports participate in NO_PROXY matching: HTTP
// defaults to 80 and HTTPS defaults to 443. Explicit non-default ports
// remain distinct."
func TestSelectorPorts(t *testing.T) {
	tests := []struct {
		noProxy string
		url     string
		proxied bool
	}{
		// Implicit ports take part.
		{"example.com:80", "http://example.com", false},
		{"example.com:80", "http://example.com:80", false},
		{"example.com:443", "https://example.com", false},
		{"example.com:443", "https://example.com:443", false},
		{"example.com:80", "https://example.com", true},
		{"example.com:443", "http://example.com", true},
		// Explicit non-default ports stay distinct.
		{"example.com:8080", "http://example.com", true},
		{"example.com:8080", "http://example.com:8080", false},
		{"example.com:80", "http://example.com:8080", true},
		{"example.com:8443", "https://example.com:443", true},
		// An entry without a port matches every port.
		{"example.com", "http://example.com:8080", false},
		{"example.com", "https://example.com", false},
		// Subdomains, wildcards and leading dots.
		{"example.com:443", "https://a.example.com", false},
		{"*.example.com:443", "https://a.example.com", false},
		{".example.com", "https://example.com", true},
		// IP literals with and without ports.
		{"10.1.2.3:80", "http://10.1.2.3", false},
		{"10.1.2.3:80", "http://10.1.2.3:8080", true},
		{"[2001:db8::1]:443", "https://[2001:db8::1]", false},
		{"2001:db8::1", "https://[2001:db8::1]:8443", false},
		{"10.0.0.0/8", "http://10.9.9.9:81", false},
		// What Selector's normalisation adds over plain httpproxy.
		{"example.com:80", "http://example.com:080", false},
		{"example.com:80", "http://example.com:", false},
		{"example.com", "http://example.com.", false},
		{"example.com:443", "HTTPS://EXAMPLE.COM", false},
		// Unrelated hosts are proxied; nothing configured is proxied.
		{"example.com", "http://example.org", true},
		{"", "https://example.com", true},
	}
	for _, tt := range tests {
		s := NewSelector(httpproxy.Config{HTTPProxy: testProxy, HTTPSProxy: testProxy, NoProxy: tt.noProxy})
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Proxy(u)
		if err != nil {
			t.Errorf("NO_PROXY=%q %s: %v", tt.noProxy, tt.url, err)
			continue
		}
		if (p != nil) != tt.proxied {
			t.Errorf("NO_PROXY=%q %s: proxy %v, want proxied=%v", tt.noProxy, tt.url, p, tt.proxied)
		}
	}
}

// TestSelectorHandBuiltURL covers what httpproxy alone gets wrong: a URL
// built by hand with an upper-case scheme would silently go direct.
func TestSelectorHandBuiltURL(t *testing.T) {
	cfg := httpproxy.Config{HTTPProxy: testProxy, NoProxy: "other.test"}
	u := &url.URL{Scheme: "HTTP", Host: "example.com"}
	if p, _ := cfg.ProxyFunc()(u); p != nil {
		t.Fatalf("httpproxy now proxies a scheme of %q; revisit NormalizeURL", u.Scheme)
	}
	if p, err := NewSelector(cfg).Proxy(u); err != nil || p == nil || p.String() != testProxy {
		t.Errorf("Selector = %v, %v; want %s", p, err, testProxy)
	}
}

// TestSelectorLoopbackAlwaysDirect pins a property of httpproxy that
// tests must know: loopback destinations are never proxied.
func TestSelectorLoopbackAlwaysDirect(t *testing.T) {
	s := NewSelector(httpproxy.Config{HTTPProxy: testProxy, HTTPSProxy: testProxy})
	for _, raw := range []string{"http://127.0.0.1:8080", "https://localhost", "http://[::1]"} {
		u, _ := url.Parse(raw)
		if p, err := s.Proxy(u); p != nil || err != nil {
			t.Errorf("%s: %v, %v; want direct", raw, p, err)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"http://example.com", "http://example.com:80"},
		{"https://example.com", "https://example.com:443"},
		{"HTTPS://Example.COM.:0443/path?q#f", "https://example.com:443"},
		{"http://user:pw@example.com:8080/", "http://example.com:8080"},
		{"http://[2001:DB8::1]", "http://[2001:db8::1]:80"},
		{"ftp://example.com", "error"},
		{"http://example.com:0", "error"},
		{"http://example.com:65536", "error"},
		{"http:///path", "error"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NormalizeURL(u)
		if tt.want == "error" {
			if err == nil {
				t.Errorf("%s: = %v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("%s: = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestHopFromURL(t *testing.T) {
	tests := []struct {
		url, cred string
		want      route.Hop
		auth      *Auth
		err       bool
	}{
		{url: "http://proxy.test:3128", want: route.Hop{Kind: route.ProxyHTTP, Host: "proxy.test", Port: 3128}},
		{url: "https://proxy.test", want: route.Hop{Kind: route.ProxyHTTPS, Host: "proxy.test"}},
		{url: "socks5h://[::1]:1081", want: route.Hop{Kind: route.ProxySOCKS5, Host: "::1", Port: 1081}},
		{url: "SOCKS5://u:p@s.test", cred: "u#1", want: route.Hop{Kind: route.ProxySOCKS5, Host: "s.test", CredentialID: "u#1"}, auth: &Auth{Username: "u", Password: "p"}},
		{url: "http://u:p@proxy.test", err: true}, // credentials without an identity
		{url: "socks4://proxy.test", err: true},
		{url: "http://proxy.test:0", err: true},
		{url: "http://:3128", err: true},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		h, err := HopFromURL(u, tt.cred)
		if (err != nil) != tt.err {
			t.Errorf("%s: err = %v", tt.url, err)
			continue
		}
		if tt.err {
			continue
		}
		if h.Hop != tt.want || (h.Auth == nil) != (tt.auth == nil) || h.Auth != nil && *h.Auth != *tt.auth {
			t.Errorf("%s: = %+v, want %+v %v", tt.url, h, tt.want, tt.auth)
		}
	}
}

// TestSelectorWithoutProxyAgreesAndAllocatesNothing: with no proxy
// configured, Proxy takes a shortcut that skips NormalizeURL; it must
// refuse exactly the URLs NormalizeURL refuses, return nil for the
// others, and allocate nothing (it runs on every request of a Transport
// that reads the environment).
func TestSelectorWithoutProxyAgreesAndAllocatesNothing(t *testing.T) {
	s := NewSelector(httpproxy.Config{NoProxy: "example.com"})
	for _, raw := range []string{
		"http://example.com", "HTTPS://Example.COM.:0443/x", "http://h:8080", "https://[::1]:443",
		"ftp://h", "http://", "http://:80", "http://...:80", "http://h:0", "http://h:65536", "http://h:0080",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		_, normErr := NormalizeURL(u)
		got, err := s.Proxy(u)
		if got != nil || (err == nil) != (normErr == nil) {
			t.Errorf("%s: Proxy = %v, %v; NormalizeURL error %v", raw, got, err, normErr)
		}
	}
	u, _ := url.Parse("https://example.org:8443/path")
	if n := testing.AllocsPerRun(100, func() { _, _ = s.Proxy(u) }); n != 0 {
		t.Errorf("Proxy allocates %v times per call with no proxy configured", n)
	}
}
