package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestParseConnectResponse(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		status    int
		reason    string
		headerLen int    // -1: len(in)
		err       string // "" success, "incomplete", "large", or a substring of the ParseError
	}{
		{name: "200", in: "HTTP/1.1 200 Connection established\r\n\r\n", status: 200, reason: "Connection established", headerLen: -1},
		{name: "200 with tunnel bytes", in: "HTTP/1.1 200 OK\r\n\r\nHELLO", status: 200, reason: "OK", headerLen: 19},
		{name: "HTTP/1.0", in: "HTTP/1.0 200 OK\r\nVia: 1.0 p\r\n\r\n", status: 200, reason: "OK", headerLen: -1},
		{name: "bare LF", in: "HTTP/1.1 204 No Content\n\n", status: 204, reason: "No Content", headerLen: -1},
		{name: "no reason", in: "HTTP/1.1 200\r\n\r\n", status: 200, reason: "", headerLen: -1},
		{name: "empty reason", in: "HTTP/1.1 200 \r\n\r\n", status: 200, reason: "", headerLen: -1},
		{name: "407 with fields", in: "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n", status: 407, reason: "Proxy Authentication Required", headerLen: -1},
		{name: "reason with tab and obs-text", in: "HTTP/1.1 502 Bad\tGateway \xe9\r\n\r\n", status: 502, reason: "Bad\tGateway \xe9", headerLen: -1},
		{name: "599", in: "HTTP/1.1 599 x\r\n\r\n", status: 599, reason: "x", headerLen: -1},
		{name: "999 is three digits", in: "HTTP/1.1 999 x\r\n\r\n", status: 999, reason: "x", headerLen: -1},
		{name: "empty input", in: "", err: "incomplete"},
		{name: "partial status line", in: "HTTP/1.1 20", err: "incomplete"},
		{name: "status line only", in: "HTTP/1.1 200 OK\r\n", err: "incomplete"},
		{name: "partial field", in: "HTTP/1.1 200 OK\r\nVia: 1.1", err: "incomplete"},
		{name: "CR without LF yet", in: "HTTP/1.1 200 OK\r\n\r", err: "incomplete"},
		{name: "empty status line", in: "\r\nHTTP/1.1 200 OK\r\n\r\n", err: "empty status line"},
		{name: "not HTTP", in: "SSH-2.0-OpenSSH\r\n\r\n", err: "does not start with HTTP"},
		{name: "lower-case http", in: "http/1.1 200 OK\r\n\r\n", err: "does not start with HTTP"},
		{name: "HTTP/2", in: "HTTP/2.0 200 OK\r\n\r\n", err: "unsupported version"},
		{name: "HTTP/1.2", in: "HTTP/1.2 200 OK\r\n\r\n", err: "unsupported version"},
		{name: "two-digit status", in: "HTTP/1.1 20 OK\r\n\r\n", err: "three digits"},
		{name: "four-digit status", in: "HTTP/1.1 2000 OK\r\n\r\n", err: "no space"},
		{name: "status below 100", in: "HTTP/1.1 099 x\r\n\r\n", err: "below 100"},
		{name: "bare CR in reason", in: "HTTP/1.1 200 O\rK\r\n\r\n", err: "control character"},
		{name: "NUL in reason", in: "HTTP/1.1 200 O\x00K\r\n\r\n", err: "control character"},
		{name: "obs-fold", in: "HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n", err: "obsolete line folding"},
		{name: "no colon", in: "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", err: "without a colon"},
		{name: "empty name", in: "HTTP/1.1 200 OK\r\n: v\r\n\r\n", err: "empty header field name"},
		{name: "space before colon", in: "HTTP/1.1 200 OK\r\nA : v\r\n\r\n", err: "invalid character"},
		{name: "NUL in value", in: "HTTP/1.1 200 OK\r\nA: v\x00\r\n\r\n", err: "control character"},
		{name: "bad line judged before the end", in: "HTTP/1.1 200 OK\r\nbad line\r\nVia: x", err: "without a colon"},
		{name: "too large", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes) + "\r\n\r\n", err: "large"},
		{name: "just fits", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes-24) + "\r\n\r\n", status: 200, reason: "OK", headerLen: MaxHeaderBytes},
		{name: "one byte over", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes-23) + "\r\n\r\n", err: "large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.headerLen < 0 {
				tt.headerLen = len(tt.in)
			}
			status, reason, n, err := ParseConnectResponse([]byte(tt.in))
			switch tt.err {
			case "":
				if err != nil || status != tt.status || reason != tt.reason || n != tt.headerLen {
					t.Fatalf("= %d %q %d %v; want %d %q %d", status, reason, n, err, tt.status, tt.reason, tt.headerLen)
				}
			case "incomplete":
				if !errors.Is(err, ErrIncomplete) {
					t.Fatalf("err = %v, want ErrIncomplete", err)
				}
			case "large":
				var pe *ParseError
				if !errors.As(err, &pe) || !errors.Is(err, ErrHeaderTooLarge) {
					t.Fatalf("err = %v, want ErrHeaderTooLarge", err)
				}
			default:
				var pe *ParseError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ParseError with %q", err, tt.err)
				}
			}
			if err != nil && (status != 0 || reason != "" || n != 0) {
				t.Errorf("error with results %d %q %d", status, reason, n)
			}
		})
	}
}

func TestParseConnectHeaderFields(t *testing.T) {
	in := "HTTP/1.1 407 Login\r\nproxy-authenticate: Basic realm=\"a\"\r\nProxy-Authenticate:  Negotiate \t\r\nVia: 1.1 p\r\n\r\n"
	resp, n, err := ParseConnectHeader([]byte(in))
	if err != nil || n != len(in) {
		t.Fatalf("= %v %d", err, n)
	}
	want := http.Header{"Proxy-Authenticate": {`Basic realm="a"`, "Negotiate"}, "Via": {"1.1 p"}}
	if resp.Proto != "HTTP/1.1" || resp.StatusCode != 407 || resp.Reason != "Login" || len(resp.Header) != 2 ||
		strings.Join(resp.Header["Proxy-Authenticate"], "|") != strings.Join(want["Proxy-Authenticate"], "|") || resp.Header.Get("Via") != "1.1 p" {
		t.Errorf("resp = %+v", resp)
	}
}

func TestAppendConnectRequest(t *testing.T) {
	tests := []struct {
		name string
		req  ConnectRequest
		want string
		err  bool
	}{
		{name: "plain", req: ConnectRequest{Target: "example.com:443"},
			want: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"},
		{name: "IPv6", req: ConnectRequest{Target: "[::1]:80"},
			want: "CONNECT [::1]:80 HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"},
		{name: "basic auth", req: ConnectRequest{Target: "a:1", Auth: &Auth{Username: "Aladdin", Password: "open sesame"}},
			want: "CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\nProxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n"},
		{name: "extra header, Host and Proxy-Authorization in it ignored", req: ConnectRequest{Target: "a:1", Header: http.Header{
			"User-Agent": {"rs"}, "Host": {"evil"}, "Proxy-Authorization": {"Basic evil"}}},
			want: "CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\nUser-Agent: rs\r\n\r\n"},
		{name: "no port", req: ConnectRequest{Target: "example.com"}, err: true},
		{name: "empty host", req: ConnectRequest{Target: ":443"}, err: true},
		{name: "line break in target", req: ConnectRequest{Target: "a:1\r\nX: y"}, err: true},
		{name: "colon in user name", req: ConnectRequest{Target: "a:1", Auth: &Auth{Username: "a:b"}}, err: true},
		{name: "line break in password", req: ConnectRequest{Target: "a:1", Auth: &Auth{Username: "a", Password: "x\r\n"}}, err: true},
		{name: "line break in header value", req: ConnectRequest{Target: "a:1", Header: http.Header{"X": {"a\r\nB: c"}}}, err: true},
		{name: "bad header name", req: ConnectRequest{Target: "a:1", Header: http.Header{"X Y": {"a"}}}, err: true},
	}
	for _, tt := range tests {
		got, err := AppendConnectRequest(nil, tt.req)
		if (err != nil) != tt.err || !tt.err && string(got) != tt.want {
			t.Errorf("%s: = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestAuthHidesPassword(t *testing.T) {
	a := &Auth{Username: "alice", Password: "s3cret"}
	for _, s := range []string{a.String(), a.GoString()} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "alice") {
			t.Errorf("Auth prints %q", s)
		}
	}
	h := Hop{HopConfig: HopConfig{Auth: a}}
	if s := strings.Join([]string{sprint(h), sprint(&h)}, " "); strings.Contains(s, "s3cret") {
		t.Errorf("Hop prints the password: %s", s)
	}
}

func TestTunnelConnYieldsLeftoverFirst(t *testing.T) {
	a, b := pipe(t)
	go func() {
		b.Write([]byte("HTTP/1.1 200 OK\r\n\r\nearly"))
		b.Write([]byte("late"))
	}()
	go drain(b, len("CONNECT x:1 HTTP/1.1\r\nHost: x:1\r\n\r\n"))
	tun, resp, err := Connect(a, ConnectRequest{Target: "x:1", Hop: 1, Proxy: "p:1"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("Connect = %v, %v", resp, err)
	}
	got := make([]byte, 0, 9)
	buf := make([]byte, 3)
	for len(got) < 9 {
		n, err := tun.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, []byte("earlylate")) {
		t.Errorf("tunnel read %q", got)
	}
}

func sprint(v any) string { return fmt.Sprint(v) + fmt.Sprintf(" %+v %#v", v, v) }

// pipe returns both ends of a synchronous in-memory connection, closed at
// the end of the test.
func pipe(t *testing.T) (net.Conn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// drain reads and drops n bytes from c.
func drain(c net.Conn, n int) { io.CopyN(io.Discard, c, int64(n)) }
