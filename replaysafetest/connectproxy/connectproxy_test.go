package connectproxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	xproxy "golang.org/x/net/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a loopback TCP server that echoes every byte.
type echo struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs []net.Conn
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.cs = append(e.cs, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.cs {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func (e *echo) addr() string { return e.ln.Addr().String() }

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dialProxy connects to s, over TLS if s speaks it.
func dialProxy(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if s.cfg.TLS {
		tc := tls.Client(c, s.ClientTLSConfig())
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	return c
}

// connect sends a CONNECT and returns the response and a reader for the
// bytes after it.
func connect(t *testing.T, c net.Conn, target, auth string) (*http.Response, *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		msg += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, msg+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return resp, br
}

func roundTrip(t *testing.T, c net.Conn, r io.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != msg {
		t.Fatalf("echo = %q, %v", got, err)
	}
}

func TestTunnelToTarget(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[useTLS], func(t *testing.T) {
			e := startEcho(t)
			s := start(t, Config{TLS: useTLS, ALPN: []string{"h2", "http/1.1"}})
			c := dialProxy(t, s)
			resp, br := connect(t, c, e.addr(), "")
			if resp.StatusCode != 200 || resp.Status != "200 Connection established" {
				t.Fatalf("status %q", resp.Status)
			}
			roundTrip(t, c, br, "ping")
			if s.Tunnels() != 1 || s.Conns() != 1 || s.ActiveTunnels() != 1 {
				t.Errorf("tunnels=%d conns=%d active=%d", s.Tunnels(), s.Conns(), s.ActiveTunnels())
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Method != "CONNECT" || reqs[0].Target != e.addr() || reqs[0].Host != e.addr() || reqs[0].Status != 200 {
				t.Errorf("requests = %+v", reqs)
			}
			if useTLS && !slices.Equal(reqs[0].ALPN, []string{"http/1.1"}) {
				t.Errorf("ALPN offer recorded as %q", reqs[0].ALPN)
			}
			if !useTLS && s.CertPool() != nil {
				t.Error("plain proxy has a certificate")
			}
		})
	}
}

func TestRequireAuth(t *testing.T) {
	e := startEcho(t)
	creds := &Credentials{Username: "alice", Password: "pw"}
	s := start(t, Config{RequireAuth: creds, Conns: []Script{{}, {}, {Status: 407, Reason: "Go Away"}}})

	resp, _ := connect(t, dialProxy(t, s), e.addr(), "")
	if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") != `Basic realm="connectproxy"` {
		t.Errorf("no credentials: %q %v", resp.Status, resp.Header)
	}
	c := dialProxy(t, s)
	resp, br := connect(t, c, e.addr(), creds.basic())
	if resp.StatusCode != 200 {
		t.Fatalf("with credentials: %q", resp.Status)
	}
	roundTrip(t, c, br, "x")
	resp, _ = connect(t, dialProxy(t, s), e.addr(), creds.basic())
	if resp.StatusCode != 407 || resp.Status != "407 Go Away" || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Errorf("scripted 407: %q %v", resp.Status, resp.Header)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Header.Get("Proxy-Authorization") != "" || reqs[1].Header.Get("Proxy-Authorization") != creds.basic() {
		t.Errorf("requests = %+v", reqs)
	}
	if s.Tunnels() != 1 {
		t.Errorf("tunnels = %d", s.Tunnels())
	}
}

func TestScriptedAnswers(t *testing.T) {
	e := startEcho(t)
	s := start(t, Config{Conns: []Script{
		{Status: 204, Extra: []byte("early")},
		{Status: 299, Reason: "Odd But Fine", Header: http.Header{"Via": {"1.1 test"}}},
		{Status: 502},
		{Raw: []byte("garbage\r\n\r\n")},
	}})
	c := dialProxy(t, s)
	resp, br := connect(t, c, e.addr(), "")
	if resp.StatusCode != 204 {
		t.Fatalf("status %q", resp.Status)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early" {
		t.Fatalf("extra bytes = %q, %v", got, err)
	}
	roundTrip(t, c, br, "after")

	c = dialProxy(t, s)
	resp, br = connect(t, c, e.addr(), "")
	if resp.Status != "299 Odd But Fine" || resp.Header.Get("Via") != "1.1 test" {
		t.Fatalf("status %q %v", resp.Status, resp.Header)
	}
	roundTrip(t, c, br, "x")

	resp, _ = connect(t, dialProxy(t, s), e.addr(), "")
	if resp.StatusCode != 502 || resp.Header.Get("Content-Length") != "0" {
		t.Errorf("502: %q %v", resp.Status, resp.Header)
	}

	c = dialProxy(t, s)
	io.WriteString(c, "CONNECT "+e.addr()+" HTTP/1.1\r\nHost: x\r\n\r\n")
	raw, _ := io.ReadAll(c)
	if string(raw) != "garbage\r\n\r\n" {
		t.Errorf("raw answer %q", raw)
	}
	if s.Tunnels() != 2 || s.Conns() != 4 {
		t.Errorf("tunnels=%d conns=%d", s.Tunnels(), s.Conns())
	}
}

func TestRefusesNonLoopbackTarget(t *testing.T) {
	s := start(t, Config{})
	resp, _ := connect(t, dialProxy(t, s), "192.0.2.1:80", "")
	if resp.StatusCode != 403 || s.Tunnels() != 0 {
		t.Errorf("status %q tunnels %d", resp.Status, s.Tunnels())
	}
}

func TestIdleCut(t *testing.T) {
	e := startEcho(t)
	const cut = 200 * time.Millisecond
	s := start(t, Config{IdleCut: cut})
	c := dialProxy(t, s)
	resp, br := connect(t, c, e.addr(), "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Traffic keeps the tunnel open past the cut time...
	var last time.Time // before the last byte the proxy relayed
	for range 15 {
		time.Sleep(cut / 10)
		last = time.Now()
		roundTrip(t, c, br, "keepalive")
	}
	// ...and silence closes it, no sooner than cut after the last byte
	// relayed. The read deadline is a hang guard, not a bound on the
	// proxy's timer.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := br.Read(make([]byte, 1))
	waited := time.Since(last)
	if n != 0 || err != io.EOF {
		t.Fatalf("read after idle = %d, %v; want EOF", n, err)
	}
	if waited < cut {
		t.Errorf("tunnel cut %v after the last byte, before the idle cut of %v", waited, cut)
	}
	if s.Cuts() != 1 {
		t.Errorf("cuts = %d", s.Cuts())
	}
}

func TestStallUntilClose(t *testing.T) {
	points := []struct {
		p   Point
		tls bool
	}{
		{StallBeforeHandshake, true},
		{StallAfterHandshake, true},
		{StallBeforeRequest, false},
		{StallAfterRequest, false},
		{StallMidResponse, false},
	}
	for _, pt := range points {
		t.Run(pt.p.String(), func(t *testing.T) {
			s, err := Start(Config{TLS: pt.tls, Default: &Script{Stall: pt.p}})
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if pt.p != StallBeforeHandshake {
				if pt.tls {
					tc := tls.Client(c, s.ClientTLSConfig())
					if err := tc.Handshake(); err != nil {
						t.Fatal(err)
					}
					c = tc
				}
				io.WriteString(c, "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: x\r\n\r\n")
			}
			time.Sleep(20 * time.Millisecond)
			done := make(chan error)
			go func() { done <- s.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not end the stall")
			}
		})
	}
}

func TestStallForThenGoOn(t *testing.T) {
	e := startEcho(t)
	s := start(t, Config{Default: &Script{Stall: StallAfterRequest, StallFor: 30 * time.Millisecond}})
	begin := time.Now()
	c := dialProxy(t, s)
	resp, br := connect(t, c, e.addr(), "")
	if resp.StatusCode != 200 || time.Since(begin) < 30*time.Millisecond {
		t.Fatalf("status %q after %v", resp.Status, time.Since(begin))
	}
	roundTrip(t, c, br, "x")
}

func TestStartRejects(t *testing.T) {
	for _, cfg := range []Config{
		{Conns: []Script{{Stall: StallBeforeHandshake}}},
		{Default: &Script{Stall: Point(99)}},
		{Conns: []Script{{Status: 42}}},
		{Conns: []Script{{StallFor: -1}}},
		{IdleCut: -1},
	} {
		if s, err := Start(cfg); err == nil {
			s.Close()
			t.Errorf("Start(%+v) accepted", cfg)
		}
	}
	if _, err := StartSOCKS5(SOCKSConfig{Stall: StallMidResponse}); err == nil {
		t.Error("StartSOCKS5 accepted mid-response stall")
	}
}

// TestUpstreamForward chains two proxies on the proxy side: the client
// talks to the first only, which sends its own CONNECT (with its own
// credentials) to the second.
func TestUpstreamForward(t *testing.T) {
	for _, upTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[upTLS], func(t *testing.T) {
			e := startEcho(t)
			upCreds := &Credentials{Username: "hop2", Password: "b"}
			up := start(t, Config{TLS: upTLS, RequireAuth: upCreds})
			front := start(t, Config{RequireAuth: &Credentials{Username: "hop1", Password: "a"},
				Upstream: &Upstream{Addr: up.Addr(), TLS: up.ClientTLSConfig(), Auth: upCreds}})
			c := dialProxy(t, front)
			resp, br := connect(t, c, e.addr(), (&Credentials{Username: "hop1", Password: "a"}).basic())
			if resp.StatusCode != 200 {
				t.Fatalf("status %q", resp.Status)
			}
			roundTrip(t, c, br, "through two")
			if front.Tunnels() != 1 || up.Tunnels() != 1 {
				t.Errorf("tunnels front=%d up=%d", front.Tunnels(), up.Tunnels())
			}
			ur := up.Requests()
			if len(ur) != 1 || ur[0].Target != e.addr() || ur[0].Header.Get("Proxy-Authorization") != upCreds.basic() {
				t.Errorf("upstream saw %+v", ur)
			}
		})
	}
}

func TestSOCKS5(t *testing.T) {
	tests := []struct {
		name    string
		require *Credentials
		auth    *xproxy.Auth
		ok      bool
	}{
		{"no auth", nil, nil, true},
		{"auth required and given", &Credentials{Username: "u", Password: "p"}, &xproxy.Auth{User: "u", Password: "p"}, true},
		{"wrong password", &Credentials{Username: "u", Password: "p"}, &xproxy.Auth{User: "u", Password: "x"}, false},
		{"auth required, none offered", &Credentials{Username: "u", Password: "p"}, nil, false},
		{"auth offered, not required", nil, &xproxy.Auth{User: "u", Password: "p"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEcho(t)
			s, err := StartSOCKS5(SOCKSConfig{RequireAuth: tt.require, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d, err := xproxy.SOCKS5("tcp", s.Addr(), tt.auth, &net.Dialer{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Dial("tcp", e.addr())
			if !tt.ok {
				if err == nil {
					c.Close()
					t.Fatal("dial succeeded")
				}
				if s.Tunnels() != 0 {
					t.Errorf("tunnels = %d", s.Tunnels())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			roundTrip(t, c, c, "socks")
			reqs := s.Requests()
			if s.Tunnels() != 1 || len(reqs) != 1 || reqs[0].Target != e.addr() || reqs[0].Reply != 0 {
				t.Errorf("tunnels=%d requests=%+v", s.Tunnels(), reqs)
			}
			if tt.require != nil && (reqs[0].Username != "u" || reqs[0].Password != "p") {
				t.Errorf("credentials recorded as %+v", reqs[0])
			}
		})
	}
}

func TestSOCKS5Refusals(t *testing.T) {
	s, err := StartSOCKS5(SOCKSConfig{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, _ := xproxy.SOCKS5("tcp", s.Addr(), nil, &net.Dialer{Timeout: 5 * time.Second})
	if c, err := d.Dial("tcp", "192.0.2.1:80"); err == nil {
		c.Close()
		t.Error("non-loopback target accepted")
	}
	if c, err := d.Dial("tcp", closedPort(t)); err == nil {
		c.Close()
		t.Error("closed port accepted")
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0].Reply != replyNotAllowed || reqs[1].Reply != replyHostUnreachable || s.Tunnels() != 0 {
		t.Errorf("requests = %+v", reqs)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestPointString(t *testing.T) {
	var names []string
	for p := range pointCount + 1 {
		names = append(names, Point(p).String())
	}
	if got := strings.Join(names, ","); got != "none,before-handshake,after-handshake,before-request,after-request,mid-response,Point(6)" {
		t.Errorf("names = %s", got)
	}
}

// Pipelined bytes arrive right after the 200, before the client sent
// anything through the tunnel; the tunnel then works.
func TestPipelinedAfter200(t *testing.T) {
	e := startEcho(t)
	s := start(t, Config{Conns: []Script{Pipelined(nil)}})
	c := dialProxy(t, s)
	resp, br := connect(t, c, e.addr(), "")
	if resp.StatusCode != 200 {
		t.Fatalf("status %q", resp.Status)
	}
	got := make([]byte, len(PipelinedResponseBytes))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != PipelinedResponseBytes {
		t.Fatalf("pipelined bytes %q, %v", got, err)
	}
	roundTrip(t, c, br, "after")
	if s.Tunnels() != 1 || len(s.Requests()) != 1 {
		t.Errorf("tunnels %d, requests %d", s.Tunnels(), len(s.Requests()))
	}
	if r := s.Receipts(); len(r) != 1 || r[0].Method != "CONNECT" || r[0].Path != e.addr() || s.Accepted() != 1 {
		t.Errorf("receipts %+v, accepted %d", r, s.Accepted())
	}
}

// A 407 carries a challenge of the size asked for, scripted or from
// RequireAuth.
func TestHugeChallenge(t *testing.T) {
	const size = 60 << 10
	creds := &Credentials{Username: "u", Password: "p"}
	for name, cfg := range map[string]Config{
		"script":       {Conns: []Script{HugeChallenge(size)}},
		"require-auth": {RequireAuth: creds, ChallengeSize: size},
	} {
		t.Run(name, func(t *testing.T) {
			e := startEcho(t)
			s := start(t, cfg)
			resp, _ := connect(t, dialProxy(t, s), e.addr(), "")
			v := resp.Header.Get("Proxy-Authenticate")
			if resp.StatusCode != http.StatusProxyAuthRequired || len(v) != size || !strings.HasPrefix(v, `Basic realm="x`) {
				t.Errorf("status %d, challenge of %d bytes %.20q", resp.StatusCode, len(v), v)
			}
			if s.Tunnels() != 0 || len(s.Requests()) != 1 || s.Requests()[0].Status != 407 {
				t.Errorf("tunnels %d, requests %+v", s.Tunnels(), s.Requests())
			}
		})
	}
}

// TestForwardAbsoluteForm: with Forward the proxy takes plain-http
// requests in absolute form on one kept-alive connection, forwards each
// to its origin in origin form without Proxy-Authorization, and records
// it; CloseAfterForwarding forwards the scripted request and then closes
// unanswered, so the origin counts it while the client reads EOF.
func TestForwardAbsoluteForm(t *testing.T) {
	var got []string
	var mu sync.Mutex
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.RequestURI+" auth="+r.Header.Get("Proxy-Authorization"))
		mu.Unlock()
		io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go origin.Serve(ln)
	defer origin.Close()
	p, err := Start(Config{Forward: true, Conns: []Script{{CloseAfterForwarding: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for n, path := range []string{"/one", "/two"} {
		io.WriteString(c, "GET http://"+ln.Addr().String()+path+" HTTP/1.1\r\nHost: "+ln.Addr().String()+"\r\nProxy-Authorization: Basic eDp5\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if n == 1 {
			if err == nil {
				t.Fatalf("request 2 answered %d, want the connection closed unanswered", resp.StatusCode)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request 1: %d %q", resp.StatusCode, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /one auth=", "GET /two auth="}; !slices.Equal(got, want) {
		t.Errorf("origin saw %q, want %q", got, want)
	}
	if reqs := p.Requests(); len(reqs) != 2 || reqs[0].Status != 200 || p.Conns() != 1 {
		t.Errorf("proxy recorded %+v on %d connections", reqs, p.Conns())
	}
}
