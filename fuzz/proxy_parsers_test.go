package fuzz

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"

	"github.com/replaysafe/replaysafe/transports/proxy"
)

// FuzzParseConnectResponse checks that the CONNECT response parser never
// panics and respects its size bound, that every prefix of the input is
// incomplete or parses exactly as the whole, and that the wire path
// answers as the whole: proxy.Connect reading the input from a
// connection in two pieces cut at split, in reads of at most 1 to 8
// bytes, resumes one parser read after read (the stateful path a
// dribbling proxy drives), and must return the same status, reason,
// version, fields and error as proxy.ParseConnectHeader over the whole
// input, hand the bytes after the header section to the tunnel, and
// report input that never ends as the proxy closing early.
func FuzzParseConnectResponse(f *testing.F) {
	for _, seed := range connectResponseSeeds {
		f.Add(seed.response, seed.split)
	}
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		resp, n, err := proxy.ParseConnectHeader(b)
		if n < 0 || n > len(b) || n > proxy.MaxHeaderBytes {
			t.Fatalf("headerLen %d for %d bytes", n, len(b))
		}
		var pe *proxy.ParseError
		switch {
		case err == nil:
			if resp.StatusCode < 100 || resp.StatusCode > 999 || n == 0 {
				t.Fatalf("success with status %d headerLen %d", resp.StatusCode, n)
			}
			r2, n2, err2 := proxy.ParseConnectHeader(b[:n])
			if err2 != nil || n2 != n || !sameResponse(r2, resp) {
				t.Fatalf("header section alone parses as %+v %d %v", r2, n2, err2)
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
		if err != nil && (resp.StatusCode != 0 || resp.Reason != "" || resp.Header != nil || n != 0) {
			t.Fatalf("error with results %+v %d", resp, n)
		}
		status, reason, n1, err1 := proxy.ParseConnectResponse(b)
		if status != resp.StatusCode || reason != resp.Reason || n1 != n || errText(err1) != errText(err) {
			t.Fatalf("ParseConnectResponse: %d %q %d %v; ParseConnectHeader: %d %q %d %v", status, reason, n1, err1, resp.StatusCode, resp.Reason, n, err)
		}

		k := 0
		if len(b) > 0 {
			k = int(split) % (len(b) + 1)
		}
		ps, pr, pn, perr := proxy.ParseConnectResponse(b[:k])
		if !errors.Is(perr, proxy.ErrIncomplete) {
			if ps != resp.StatusCode || pr != resp.Reason || pn != n || errText(perr) != errText(err) {
				t.Fatalf("prefix of %d bytes: %d %q %d %v; whole: %d %q %d %v", k, ps, pr, pn, perr, resp.StatusCode, resp.Reason, n, err)
			}
		}

		// The wire: two pieces, each read in chunks of at most maxRead.
		c := &piecesConn{pieces: [][]byte{b[:k], b[k:]}, maxRead: 1 + int(split>>13)}
		tun, wresp, werr := proxy.Connect(c, proxy.ConnectRequest{Target: "origin.example:443", Hop: 1, Proxy: "p:1"})
		var (
			ce *proxy.ConnectError
			se *proxy.StepError
		)
		switch {
		case err == nil && resp.StatusCode >= 200 && resp.StatusCode <= 299:
			if werr != nil || wresp == nil || !sameResponse(*wresp, resp) {
				t.Fatalf("split %d, reads of %d: Connect = %+v, %v; whole: %+v", k, c.maxRead, wresp, werr, resp)
			}
			rest, rerr := io.ReadAll(tun)
			if rerr != nil || !bytes.Equal(rest, b[n:]) {
				t.Fatalf("split %d: the tunnel yields %q, %v; want the %d bytes after the header section", k, rest, rerr, len(b)-n)
			}
		case err == nil:
			if !errors.As(werr, &ce) || ce.StatusCode != resp.StatusCode || ce.Status != resp.Reason || wresp == nil || !sameResponse(*wresp, resp) {
				t.Fatalf("split %d, reads of %d: Connect = %+v, %v; want a ConnectError for %d", k, c.maxRead, wresp, werr, resp.StatusCode)
			}
		case errors.As(err, &pe):
			var wpe *proxy.ParseError
			if !errors.As(werr, &se) || !errors.As(werr, &wpe) || wpe.Error() != pe.Error() || wpe.Offset != pe.Offset ||
				errors.Is(werr, proxy.ErrHeaderTooLarge) != errors.Is(err, proxy.ErrHeaderTooLarge) {
				t.Fatalf("split %d, reads of %d: Connect error %v; whole: %v", k, c.maxRead, werr, err)
			}
		default: // incomplete: the proxy closed before the header section ended
			if !errors.As(werr, &se) || !errors.Is(werr, io.ErrUnexpectedEOF) || c.left() != 0 {
				t.Fatalf("split %d, reads of %d: Connect error %v with %d bytes unread; want the proxy closing early", k, c.maxRead, werr, c.left())
			}
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sameResponse compares two parsed CONNECT responses field by field.
func sameResponse(a, b proxy.Response) bool {
	if a.Proto != b.Proto || a.StatusCode != b.StatusCode || a.Reason != b.Reason || len(a.Header) != len(b.Header) {
		return false
	}
	for k, v := range a.Header {
		if !slices.Equal(v, b.Header[k]) {
			return false
		}
	}
	return true
}

// piecesConn is a proxy connection that answers with its pieces, one
// after the other, in reads of at most maxRead bytes, then io.EOF; it
// swallows what is written. Connect uses only Read and Write.
type piecesConn struct {
	net.Conn // nil
	pieces   [][]byte
	maxRead  int
}

func (c *piecesConn) Read(p []byte) (int, error) {
	for len(c.pieces) > 0 && len(c.pieces[0]) == 0 {
		c.pieces = c.pieces[1:]
	}
	if len(c.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.maxRead)], c.pieces[0])
	c.pieces[0] = c.pieces[0][n:]
	return n, nil
}

func (c *piecesConn) Write(p []byte) (int, error) { return len(p), nil }

func (c *piecesConn) left() int {
	n := 0
	for _, p := range c.pieces {
		n += len(p)
	}
	return n
}

// FuzzNoProxy checks that the NO_PROXY decision never panics and that a
// URL naming its scheme's default port decides exactly as the one that
// leaves the port implicit.
func FuzzNoProxy(f *testing.F) {
	for _, seed := range noProxySeeds {
		f.Add(seed.noProxy, seed.host, seed.https)
	}
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

// connectResponseSeeds are the CONNECT target's f.Add arguments: a
// response and where to cut it.
var connectResponseSeeds = []struct {
	response []byte
	split    uint16
}{
	{[]byte("HTTP/1.1 200 Connection established\r\n\r\n"), uint16(10)},
	{[]byte("HTTP/1.1 200 OK\r\n\r\nHELLO"), uint16(19)},
	{[]byte("HTTP/1.0 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\n\r\n"), uint16(50)},
	{[]byte("HTTP/1.1 204\n\n"), uint16(3)},
	{[]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), uint16(25)},
	{[]byte("HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"), uint16(0)},
	{[]byte("HTTP/2 200\r\n\r\n"), uint16(7)},
	{[]byte("HTTP/1.1 200 OK\r\nVia: 1.1 p\r\n"), uint16(9000)},
	{[]byte("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", proxy.MaxHeaderBytes)), uint16(65535)},
}

// noProxySeeds are the NO_PROXY target's f.Add arguments.
var noProxySeeds = []struct {
	noProxy, host string
	https         bool
}{
	{"example.com:80", "example.com", false},
	{"example.com:443", "example.com", true},
	{"example.com:8080,.internal", "a.internal", false},
	{"*.example.com:443", "www.example.com", true},
	{"10.0.0.0/8,[2001:db8::1]:80", "[2001:db8::1]", false},
	{"EXAMPLE.com.:80", "Example.COM.", false},
	{"*", "anything", true},
	{"xn--bcher-kva.example:443", "bücher.example", true},
}

func init() {
	cr := corpus{target: "FuzzParseConnectResponse"}
	for _, s := range connectResponseSeeds {
		cr.added = append(cr.added, []any{s.response, s.split})
	}
	np := corpus{target: "FuzzNoProxy"}
	for _, s := range noProxySeeds {
		np.added = append(np.added, []any{s.noProxy, s.host, s.https})
	}
	corpora = append(corpora, cr, np)
}
