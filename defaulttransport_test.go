package replaysafe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
)

// TestDefaultTransportAlike drives a clone of http.DefaultTransport and
// New(Options{}) through the same table of requests and checks that
// both behave alike and as the row expects, counted at the servers: an
// https origin that speaks HTTP/2 (both negotiate h2 by ALPN), an http
// one (HTTP/1.1), HTTPS_PROXY (a CONNECT at the proxy, h2 inside the
// tunnel), HTTP_PROXY (absolute form at the proxy), NO_PROXY (direct), a
// TLS handshake that never finishes (TLSHandshakeTimeout, set small in
// both), and keep-alives on and off (DisableKeepAlives in both).
//
// net/http reads the proxy environment once per process
// (http.ProxyFromEnvironment caches it), and so does replaysafe
// (ProxyFromEnvironment); the other tests of this binary have read it
// unset. So the table runs in a child process of the test binary that
// sets HTTPS_PROXY, HTTP_PROXY and NO_PROXY before anything reads them:
// there http.DefaultTransport's clone keeps its Proxy,
// http.ProxyFromEnvironment, and the zero Options read the same
// variables. Each client is given only what the test needs in both: the
// origin's certificate trusted (a cloned TLSClientConfig), and a dialer
// that sends the test's host names to 127.0.0.1 (loopback addresses are
// never proxied, so the proxied rows name hosts).
func TestDefaultTransportAlike(t *testing.T) {
	if os.Getenv("REPLAYSAFE_DEFAULT_ALIKE_CHILD") == "1" {
		defaultAlikeChild(t)
		return
	}
	inChild(t, "TestDefaultTransportAlike", "REPLAYSAFE_DEFAULT_ALIKE_CHILD=1")
}

// alikeOutcome is what one client's requests of a row came to: what the
// client saw and what the servers received.
type alikeOutcome struct {
	Status, Proto int  // the last response's status and major version
	Timeout       bool // the call failed with an error that is a timeout
	Failed        bool // the call failed
	Requests      int  // requests the origin received for the row's path
	ReqProto      int  // their major version (the last one's)
	ReqClose      int  // of them, those that asked to close the connection
	Conns         int  // connections the origin (or the silent server) accepted
	Connects      int  // CONNECTs the proxy received
	Absolute      int  // absolute-form requests the proxy received
}

// alikeServers records what the test's servers received.
type alikeServers struct {
	mu       sync.Mutex
	requests map[string][]*http.Request
	conns    map[string]int // by server: "h2", "h1", "silent"
	connects int
	absolute int
}

func (s *alikeServers) add(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func defaultAlikeChild(t *testing.T) {
	rec := &alikeServers{requests: map[string][]*http.Request{}, conns: map[string]int{}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(func() { rec.requests[r.URL.Path] = append(rec.requests[r.URL.Path], r) })
		io.WriteString(w, "ok")
	})
	counted := func(name string) func(net.Conn, http.ConnState) {
		return func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				rec.add(func() { rec.conns[name]++ })
			}
		}
	}
	h2 := httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.Config.ConnState = counted("h2")
	h2.StartTLS()
	defer h2.Close()
	h1 := httptest.NewUnstartedServer(handler)
	h1.Config.ConnState = counted("h1")
	h1.Start()
	defer h1.Close()
	silent := startSilent(t, func() { rec.add(func() { rec.conns["silent"]++ }) })
	_, h2Port, _ := net.SplitHostPort(h2.Listener.Addr().String())
	_, h1Port, _ := net.SplitHostPort(h1.Listener.Addr().String())

	// The test's host names (the certificate's *.example.com) are dialed
	// on loopback, by the clients and by the proxy alike.
	toLoopback := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".example.com") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	proxy, proxyIdle := startAlikeProxy(t, rec, toLoopback)
	t.Setenv("HTTPS_PROXY", proxy)
	t.Setenv("HTTP_PROXY", proxy)
	t.Setenv("NO_PROXY", "direct.example.com")
	for _, v := range []string{"https_proxy", "http_proxy", "no_proxy"} {
		t.Setenv(v, "")
	}
	trusted := h2.Client().Transport.(*http.Transport).TLSClientConfig

	type row struct {
		name  string
		url   string
		n     int                   // requests made, one after the other
		conns string                // the server whose connections count
		net   func(*http.Transport) // the row's setting, net/http's way
		ours  func(*replaysafe.Options)
		want  alikeOutcome
	}
	https := "https://127.0.0.1:" + h2Port
	plain := "http://127.0.0.1:" + h1Port
	rows := []row{
		{name: "https with h2", url: https + "/h2", n: 2, conns: "h2",
			want: alikeOutcome{Status: 200, Proto: 2, Requests: 2, ReqProto: 2, Conns: 1}},
		{name: "http", url: plain + "/h1", n: 2, conns: "h1",
			want: alikeOutcome{Status: 200, Proto: 1, Requests: 2, ReqProto: 1, Conns: 1}},
		{name: "HTTPS_PROXY", url: "https://origin.example.com:" + h2Port + "/https-proxy", n: 2, conns: "h2",
			want: alikeOutcome{Status: 200, Proto: 2, Requests: 2, ReqProto: 2, Conns: 1, Connects: 1}},
		{name: "HTTP_PROXY", url: "http://origin.example.com:" + h1Port + "/http-proxy", n: 2, conns: "h1",
			want: alikeOutcome{Status: 200, Proto: 1, Requests: 2, ReqProto: 1, Conns: 1, Absolute: 2}},
		{name: "NO_PROXY", url: "https://direct.example.com:" + h2Port + "/no-proxy", n: 1, conns: "h2",
			want: alikeOutcome{Status: 200, Proto: 2, Requests: 1, ReqProto: 2, Conns: 1}},
		{name: "slow TLS handshake", url: "https://127.0.0.1:" + silent + "/slow", n: 1, conns: "silent",
			net:  func(ht *http.Transport) { ht.TLSHandshakeTimeout = 200 * time.Millisecond },
			ours: func(o *replaysafe.Options) { o.TLSHandshakeTimeout = 200 * time.Millisecond },
			want: alikeOutcome{Failed: true, Timeout: true, Conns: 1}},
		{name: "keep-alives off", url: plain + "/keep-alives-off", n: 3, conns: "h1",
			net:  func(ht *http.Transport) { ht.DisableKeepAlives = true },
			ours: func(o *replaysafe.Options) { o.DisableKeepAlives = true },
			want: alikeOutcome{Status: 200, Proto: 1, Requests: 3, ReqProto: 1, ReqClose: 3, Conns: 3}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ht := http.DefaultTransport.(*http.Transport).Clone()
			ht.TLSClientConfig = trusted.Clone()
			ht.DialContext = toLoopback
			o := replaysafe.Options{TLSClientConfig: trusted.Clone(), DialContext: toLoopback}
			if r.net != nil {
				r.net(ht)
				r.ours(&o)
			}
			tr := replaysafe.New(o)
			var outcomes []alikeOutcome
			for _, c := range []struct {
				name string
				rt   http.RoundTripper
				idle func()
			}{{"net/http", ht, ht.CloseIdleConnections}, {"replaysafe", tr, tr.CloseIdleConnections}} {
				var got alikeOutcome
				before := rec.snapshot(r.conns)
				for range r.n {
					got = alikeCall(t, c.rt, r.url)
				}
				c.idle()
				proxyIdle()
				after := rec.snapshot(r.conns)
				path := r.url[strings.LastIndex(r.url, "/"):]
				reqs := rec.since(path, before)
				got.Requests = len(reqs)
				for _, q := range reqs {
					got.ReqProto = q.ProtoMajor
					if q.Close {
						got.ReqClose++
					}
				}
				got.Conns = after.conns - before.conns
				got.Connects = after.connects - before.connects
				got.Absolute = after.absolute - before.absolute
				if got != r.want {
					t.Errorf("%s: %+v, want %+v", c.name, got, r.want)
				}
				outcomes = append(outcomes, got)
			}
			if outcomes[0] != outcomes[1] {
				t.Errorf("net/http %+v, replaysafe %+v: not alike", outcomes[0], outcomes[1])
			}
		})
	}
}

// alikeSnapshot is what the servers had received at one moment.
type alikeSnapshot struct {
	conns, connects, absolute int
	requests                  map[string]int
}

func (s *alikeServers) snapshot(server string) (snap alikeSnapshot) {
	s.add(func() {
		snap = alikeSnapshot{conns: s.conns[server], connects: s.connects, absolute: s.absolute, requests: map[string]int{}}
		for p, rs := range s.requests {
			snap.requests[p] = len(rs)
		}
	})
	return snap
}

// since returns the requests for path received after snap.
func (s *alikeServers) since(path string, snap alikeSnapshot) (reqs []*http.Request) {
	s.add(func() { reqs = s.requests[path][snap.requests[path]:] })
	return reqs
}

// alikeCall makes one GET of url and returns what the client saw.
func alikeCall(t *testing.T, rt http.RoundTripper, url string) alikeOutcome {
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		var te interface{ Timeout() bool }
		return alikeOutcome{Failed: true, Timeout: errors.As(err, &te) && te.Timeout()}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return alikeOutcome{Status: resp.StatusCode, Proto: resp.ProtoMajor}
}

// startSilent starts a TCP server on 127.0.0.1 that accepts connections
// and never answers (a TLS handshake to it never finishes), calling
// accepted for each; it returns its port.
func startSilent(t *testing.T, accepted func()) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted()
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startAlikeProxy starts an HTTP proxy on 127.0.0.1 that tunnels
// CONNECTs and forwards absolute-form requests, dialing through dial,
// and counts both in rec; it returns its URL and a function that closes
// its idle connections to origins.
func startAlikeProxy(t *testing.T, rec *alikeServers, dial func(context.Context, string, string) (net.Conn, error)) (string, func()) {
	fwd := &http.Transport{DialContext: dial}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var tunnels []net.Conn
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			rec.add(func() { rec.absolute++ })
			if !r.URL.IsAbs() {
				http.Error(w, "not absolute form", http.StatusBadRequest)
				return
			}
			out := r.Clone(r.Context())
			out.RequestURI = ""
			resp, err := fwd.RoundTrip(out)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
			return
		}
		rec.add(func() { rec.connects++ })
		up, err := dial(r.Context(), "tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		mu.Lock()
		tunnels = append(tunnels, conn, up)
		mu.Unlock()
		io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		// What the client sent, the bytes brw buffered included.
		wg.Go(func() { io.Copy(up, brw); up.(*net.TCPConn).CloseWrite() })
		wg.Go(func() { io.Copy(conn, up); conn.Close() })
	}))
	t.Cleanup(func() {
		p.Close()
		fwd.CloseIdleConnections()
		mu.Lock()
		for _, c := range tunnels {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p.URL, fwd.CloseIdleConnections
}
