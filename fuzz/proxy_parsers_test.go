package fuzz

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"

	"github.com/replaysafe/replaysafe/transports/proxy"
)

// FuzzParseConnectResponse checks that the CONNECT response parser never
// panics, respects its size bound, and judges data the same however it
// arrives: every prefix is either incomplete or parses exactly as the
// whole, and a success parses again from its header section alone.
func FuzzParseConnectResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 Connection established\r\n\r\n"), uint16(10))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\nHELLO"), uint16(19))
	f.Add([]byte("HTTP/1.0 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\n\r\n"), uint16(50))
	f.Add([]byte("HTTP/1.1 204\n\n"), uint16(3))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), uint16(25))
	f.Add([]byte("HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"), uint16(0))
	f.Add([]byte("HTTP/2 200\r\n\r\n"), uint16(7))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX: "+strings.Repeat("a", proxy.MaxHeaderBytes)), uint16(65535))
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		status, reason, n, err := proxy.ParseConnectResponse(b)
		if n < 0 || n > len(b) || n > proxy.MaxHeaderBytes {
			t.Fatalf("headerLen %d for %d bytes", n, len(b))
		}
		var pe *proxy.ParseError
		switch {
		case err == nil:
			if status < 100 || status > 999 || n == 0 {
				t.Fatalf("success with status %d headerLen %d", status, n)
			}
			s2, r2, n2, err2 := proxy.ParseConnectResponse(b[:n])
			if err2 != nil || s2 != status || r2 != reason || n2 != n {
				t.Fatalf("header section alone parses as %d %q %d %v", s2, r2, n2, err2)
			}
		case errors.Is(err, proxy.ErrIncomplete):
			if len(b) >= proxy.MaxHeaderBytes {
				t.Fatalf("incomplete at %d bytes, beyond the bound", len(b))
			}
		case errors.As(err, &pe):
			if pe.Offset < 0 || pe.Offset > len(b) {
				t.Fatalf("error offset %d of %d", pe.Offset, len(b))
			}
		default:
			t.Fatalf("untyped error %v", err)
		}
		if err != nil && (status != 0 || reason != "" || n != 0) {
			t.Fatalf("error with results %d %q %d", status, reason, n)
		}

		k := int(split)
		if len(b) > 0 {
			k %= len(b) + 1
		} else {
			k = 0
		}
		ps, pr, pn, perr := proxy.ParseConnectResponse(b[:k])
		if !errors.Is(perr, proxy.ErrIncomplete) {
			if ps != status || pr != reason || pn != n || (perr == nil) != (err == nil) || perr != nil && perr.Error() != err.Error() {
				t.Fatalf("prefix of %d bytes: %d %q %d %v; whole: %d %q %d %v", k, ps, pr, pn, perr, status, reason, n, err)
			}
		}

		resp, hn, herr := proxy.ParseConnectHeader(b)
		if hn != n || resp.StatusCode != status || resp.Reason != reason || (herr == nil) != (err == nil) {
			t.Fatalf("proxy.ParseConnectHeader disagrees: %d %q %d %v", resp.StatusCode, resp.Reason, hn, herr)
		}
	})
}

// FuzzNoProxy checks that the NO_PROXY decision never panics and that a
// URL naming its scheme's default port decides exactly as the one that
// leaves the port implicit.
func FuzzNoProxy(f *testing.F) {
	f.Add("example.com:80", "example.com", false)
	f.Add("example.com:443", "example.com", true)
	f.Add("example.com:8080,.internal", "a.internal", false)
	f.Add("*.example.com:443", "www.example.com", true)
	f.Add("10.0.0.0/8,[2001:db8::1]:80", "[2001:db8::1]", false)
	f.Add("EXAMPLE.com.:80", "Example.COM.", false)
	f.Add("*", "anything", true)
	f.Add("xn--bcher-kva.example:443", "bücher.example", true)
	f.Fuzz(func(t *testing.T, noProxy, host string, https bool) {
		scheme, port := "http", "80"
		if https {
			scheme, port = "https", "443"
		}
		implicit, err1 := url.Parse(scheme + "://" + host)
		explicit, err2 := url.Parse(scheme + "://" + host + ":" + port)
		if err1 != nil || err2 != nil || implicit.Port() != "" || implicit.Host == "" {
			return
		}
		s := proxy.NewSelector(httpproxy.Config{HTTPProxy: "http://p.test:3128", HTTPSProxy: "http://p.test:3128", NoProxy: noProxy})
		p1, e1 := s.Proxy(implicit)
		p2, e2 := s.Proxy(explicit)
		if (p1 == nil) != (p2 == nil) || (e1 == nil) != (e2 == nil) {
			t.Fatalf("NO_PROXY=%q: %s decides %v %v, %s decides %v %v", noProxy, implicit, p1, e1, explicit, p2, e2)
		}
		if n, err := proxy.NormalizeURL(implicit); err == nil {
			again, err := proxy.NormalizeURL(n)
			if err != nil || again.String() != n.String() {
				t.Fatalf("proxy.NormalizeURL not idempotent: %s -> %v, %v", n, again, err)
			}
		}
	})
}
