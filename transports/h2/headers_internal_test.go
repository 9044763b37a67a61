package h2

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// sentFields opens req and returns the header fields of its HEADERS, as
// "name: value" lines.
func sentFields(t *testing.T, req *http.Request, compression bool) []string {
	t.Helper()
	h := settled(t, Config{DisableCompression: !compression})
	head, err := prepareRequest(req, compression)
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{req: req, head: head}
	h.m.reserve()
	if _, err := h.m.start(h.now, st); err != nil {
		t.Fatal(err)
	}
	for _, f := range h.sent() {
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			var out []string
			for _, hf := range mh.Fields {
				out = append(out, hf.Name+": "+hf.Value)
			}
			return out
		}
	}
	t.Fatal("no HEADERS")
	return nil
}

func TestRequestHeaderFields(t *testing.T) {
	req, _ := http.NewRequest("POST", "https://origin.example:8443/p?q=1", strings.NewReader(""))
	req.Host = "virtual.example"
	req.Header = http.Header{
		"Host":              {"ignored.example"},
		"Connection":        {"close"},
		"Keep-Alive":        {"timeout=5"},
		"Proxy-Connection":  {"keep-alive"},
		"Transfer-Encoding": {"chunked"},
		"Te":                {"gzip", "trailers"},
		"X-Custom":          {"a", "b"},
		"Cookie":            {"a=1; b=2"},
		"Content-Length":    {"999"},
	}
	got := strings.Join(sentFields(t, req, true), "\n")
	for _, want := range []string{
		":authority: virtual.example", ":method: POST", ":path: /p?q=1", ":scheme: https",
		"x-custom: a", "x-custom: b", "te: trailers", "cookie: a=1", "cookie: b=2",
		"user-agent: " + DefaultUserAgent, "accept-encoding: gzip", "content-length: 0",
	} {
		if !strings.Contains(got, want+"\n") && !strings.HasSuffix(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, banned := range []string{"host:", "connection:", "keep-alive:", "proxy-connection:", "transfer-encoding:", "content-length: 999", "te: gzip"} {
		if strings.Contains(got, banned) {
			t.Errorf("sent %q:\n%s", banned, got)
		}
	}
	// A User-Agent key, even empty, replaces the default; HEAD asks for
	// no gzip.
	req, _ = http.NewRequest("HEAD", "http://origin.example/", nil)
	req.Header["User-Agent"] = []string{""}
	got = strings.Join(sentFields(t, req, true), "\n")
	if strings.Contains(got, "user-agent") || strings.Contains(got, "accept-encoding") || !strings.Contains(got, ":scheme: http") {
		t.Errorf("HEAD:\n%s", got)
	}
}

func TestRequestHeaderRefused(t *testing.T) {
	cases := map[string]func(r *http.Request){
		"Upgrade":            func(r *http.Request) { r.Header.Set("Upgrade", "websocket") },
		"Connection: foo":    func(r *http.Request) { r.Header.Set("Connection", "upgrade") },
		"Transfer-Encoding":  func(r *http.Request) { r.Header.Set("Transfer-Encoding", "gzip") },
		"invalid name":       func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} },
		"non-ASCII name":     func(r *http.Request) { r.Header["Nämé"] = []string{"x"} },
		"invalid value":      func(r *http.Request) { r.Header.Set("X-A", "a\r\nb") },
		":protocol on a GET": func(r *http.Request) { r.Header[":protocol"] = []string{"websocket"} },
		"no host":            func(r *http.Request) { r.Host, r.URL.Host = "", "" },
		"invalid method":     func(r *http.Request) { r.Method = "GE T" },
		"absolute path":      func(r *http.Request) { r.URL.Opaque = "http://x/y" },
		"invalid trailer":    func(r *http.Request) { r.Trailer = http.Header{"Content-Length": nil} },
	}
	for name, mutate := range cases {
		req, _ := http.NewRequest("GET", "https://origin.example/", nil)
		mutate(req)
		_, err := prepareRequest(req, true)
		var re *RequestError
		if !errors.As(err, &re) || errors.Is(err, ErrUnsent) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A request trailer larger than the server accepts fails the body, not
// the connection.
func TestRequestTrailerTooLarge(t *testing.T) {
	h := settled(t, Config{}, http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 300})
	req, _ := http.NewRequest("POST", "https://example.com/", io.NopCloser(strings.NewReader("")))
	req.Trailer = http.Header{"X-T": nil}
	st := h.open(req, nil)
	req.Trailer.Set("X-T", strings.Repeat("t", 400))
	if _, err := h.m.sendTrailers(h.now, st, req.Trailer); err == nil {
		t.Fatal("sent")
	}
	var be *RequestBodyError
	if !errors.As(st.err, &be) || h.m.closed {
		t.Fatalf("err %v, closed %v", st.err, h.m.closed)
	}
}

// DATA on a stream we reset is dropped, and its bytes are given back to
// the connection window at once (RFC 9113 §6.9).
func TestDataOnResetStreamCreditsConnection(t *testing.T) {
	h := settled(t, Config{ConnWindow: MinWindow})
	st := h.get("/")
	h.sent()
	h.m.cancel(h.now, st, errors.New("gone"))
	h.sent()
	for range 4 {
		h.sfr.WriteData(st.id, false, make([]byte, 16000))
	}
	h.pump()
	if h.m.closed {
		t.Fatalf("closed: %v", h.m.err)
	}
	var credited uint32
	for _, f := range h.sent() {
		if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 {
			credited += wu.Increment
		}
	}
	if h.m.recvWindow+h.m.connUnacked != MinWindow || credited == 0 {
		t.Fatalf("window %d + unacked %d, credited %d", h.m.recvWindow, h.m.connUnacked, credited)
	}
}
