package replaysafe_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// ---- proxy harness -----------------------------------------------------

// startProxy starts a scripted CONNECT proxy closed at the end of the
// test.
func startProxy(t *testing.T, cfg connectproxy.Config) *connectproxy.Server {
	t.Helper()
	cfg.Logf = t.Logf
	p, err := connectproxy.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// mustURL parses s.
func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// selector counts its calls and returns the chain of urls.
type selector struct {
	calls atomic.Int32
	urls  []*url.URL
}

func (s *selector) chain(*http.Request) ([]*url.URL, error) {
	s.calls.Add(1)
	return s.urls, nil
}

func (s *selector) proxy(*http.Request) (*url.URL, error) {
	s.calls.Add(1)
	if len(s.urls) == 0 {
		return nil, nil
	}
	return s.urls[0], nil
}

// proxied returns a Transport for origin s through proxy p (Options.Proxy
// counted by the returned selector), tunneling plain http with CONNECT,
// and what its Observer saw.
func proxied(t *testing.T, s *replaysafetest.Server, p *connectproxy.Server, o replaysafe.Options) (*replaysafe.Transport, *observed, *selector) {
	t.Helper()
	sel := &selector{urls: []*url.URL{mustURL(t, p.URL())}}
	if o.Proxy == nil && o.ProxyChain == nil {
		o.Proxy = sel.proxy
	}
	if o.ProxyTLSClientConfig == nil {
		o.ProxyTLSClientConfig = p.ClientTLSConfig() // nil for a plain proxy
	}
	o.ProxyConnectPlainHTTP = true // a CONNECT proxy: tunnel plain http too
	tr, obs := client(t, s, o)
	return tr, obs, sel
}

// tunnelCut scripts the origin for a request crossing an idle tunnel cut:
// connection 0 answers the warm-up and then never answers, so the proxy
// cuts the tunnel (IdleCut after the warm-up's response) while the
// target is at the origin; later connections answer.
func tunnelCut() replaysafetest.Config {
	return replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.OK()),
	}}
}

// cutAfter is the idle cut of the tunnel-cut tests: long enough for the
// target to reach the origin first, even under the race detector.
const cutAfter = 300 * time.Millisecond

// ---- route snapshot and pool identity -----------------------------------

// A GET crossing an idle tunnel cut is resent once on a new tunnel: the
// origin gets exactly two copies (the first went through before the cut),
// and the selector ran once for the call, its resend included.
func TestProxyTunnelCutGETResent(t *testing.T) {
	s := start(t, tunnelCut())
	p := startProxy(t, connectproxy.Config{IdleCut: cutAfter})
	var authCalls atomic.Int32
	tr, obs, sel := proxied(t, s, p, replaysafe.Options{
		ProxyAuth: func(*http.Request, int, *url.URL) (*replaysafe.ProxyCredentials, error) {
			authCalls.Add(1)
			return &replaysafe.ProxyCredentials{ID: "u@1", Username: "u", Password: "p"}, nil
		},
	})
	get(t, tr, s, "/warm")
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("GET: %d %q %v", code, body, err)
	}
	wantCopies(t, s, "/target", 2)
	wantDecisions(t, obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
	if n := sel.calls.Load(); n != 2 {
		t.Errorf("selector called %d times for two calls (one with a resend), want 2", n)
	}
	if n := authCalls.Load(); n != 2 {
		t.Errorf("credential resolver called %d times for two calls, want 2", n)
	}
	if reqs := p.Requests(); len(reqs) != 2 || reqs[1].Header.Get("Proxy-Authorization") != reqs[0].Header.Get("Proxy-Authorization") {
		t.Errorf("the resend's CONNECT did not carry the first attempt's credentials: %+v", reqs)
	}
	if n := p.Tunnels(); n != 2 {
		t.Errorf("%d tunnels, want 2 (warm-up and target, then the resend's)", n)
	}
	if n := p.Cuts(); n != 1 {
		t.Errorf("%d idle cuts, want 1", n)
	}
}

// A POST crossing the same cut is not resent (RS18): one copy, an error.
func TestProxyTunnelCutPOSTNotResent(t *testing.T) {
	s := start(t, tunnelCut())
	p := startProxy(t, connectproxy.Config{IdleCut: cutAfter})
	tr, _, sel := proxied(t, s, p, replaysafe.Options{})
	get(t, tr, s, "/warm")
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/target", "hello"))
	wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
	wantCopies(t, s, "/target", 1)
	if n := sel.calls.Load(); n != 2 {
		t.Errorf("selector called %d times, want 2", n)
	}
	if n := p.Tunnels(); n != 1 {
		t.Errorf("%d tunnels, want 1", n)
	}
}

// Connections are pooled per route: the same proxy and credentials reuse
// the tunnel; other credentials, or no proxy, never do.
func TestProxyPoolKeyedByRoute(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{})
	var user atomic.Value
	user.Store("alice")
	var authCalls atomic.Int32
	useProxy := atomic.Bool{}
	useProxy.Store(true)
	pu := mustURL(t, p.URL())
	tr, _ := client(t, s, replaysafe.Options{
		ProxyConnectPlainHTTP: true,
		Proxy: func(*http.Request) (*url.URL, error) {
			if useProxy.Load() {
				return pu, nil
			}
			return nil, nil
		},
		ProxyAuth: func(_ *http.Request, hop int, u *url.URL) (*replaysafe.ProxyCredentials, error) {
			authCalls.Add(1)
			if hop != 1 || u.Host != pu.Host {
				t.Errorf("resolver asked for hop %d at %v", hop, u)
			}
			return &replaysafe.ProxyCredentials{Username: user.Load().(string), Password: "pw"}, nil
		},
	})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b") // same route: the pooled tunnel
	if n := p.Tunnels(); n != 1 {
		t.Fatalf("%d tunnels after two calls on one route, want 1", n)
	}
	user.Store("bob")
	get(t, tr, s, "/c") // other credentials: a new tunnel
	if n := p.Tunnels(); n != 2 {
		t.Fatalf("%d tunnels after a credential change, want 2", n)
	}
	useProxy.Store(false)
	get(t, tr, s, "/d") // direct: a new TCP connection, no tunnel
	if n, c := p.Tunnels(), s.Conns(); n != 2 || c != 3 {
		t.Fatalf("%d tunnels, %d origin connections after a direct call, want 2 and 3", n, c)
	}
	if n := authCalls.Load(); n != 3 {
		t.Errorf("credential resolver called %d times for three proxied calls, want 3", n)
	}
	reqs := p.Requests()
	if len(reqs) != 2 || !strings.HasPrefix(reqs[0].Header.Get("Proxy-Authorization"), "Basic ") ||
		reqs[0].Header.Get("Proxy-Authorization") == reqs[1].Header.Get("Proxy-Authorization") {
		t.Errorf("CONNECT requests %+v", reqs)
	}
}

// ---- errors ------------------------------------------------------------

// A 407 surfaces as a *proxy.ConnectError inside *replaysafe.Error
// (acquisition failure, RS04); the origin sees nothing.
func TestProxy407(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "u", Password: "secret"}})
	tr, _, _ := proxied(t, s, p, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	var ce *proxy.ConnectError
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusProxyAuthRequired || ce.Hop != 1 || len(ce.ProxyAuthenticate) != 1 {
		t.Fatalf("error %v, want a 407 ConnectError at hop 1 with its challenge", err)
	}
	if n := s.Count(); n != 0 {
		t.Errorf("origin received %d requests, want 0", n)
	}
}

// With the right credentials the call goes through, and no
// Proxy-Authorization reaches the origin, not even one the caller set.
func TestProxyAuthNeverReachesOrigin(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "u", Password: "secret"}})
	u := mustURL(t, p.URL())
	u.User = url.UserPassword("u", "secret")
	tr, _ := client(t, s, replaysafe.Options{ProxyConnectPlainHTTP: true, Proxy: func(*http.Request) (*url.URL, error) { return u, nil }})
	req := newRequest(t, t.Context(), "GET", s.URL()+"/target", "", "Proxy-Authorization", "Basic leak")
	code, _, err := roundTrip(tr, req)
	if err != nil || code != 200 {
		t.Fatalf("GET: %d %v", code, err)
	}
	got := wantCopies(t, s, "/target", 1)
	if v, ok := got[0].Header["Proxy-Authorization"]; ok {
		t.Errorf("origin received Proxy-Authorization %q", v)
	}
	if req.Header.Get("Proxy-Authorization") != "Basic leak" {
		t.Errorf("caller's header changed")
	}
	if reqs := p.Requests(); len(reqs) != 1 || reqs[0].Status != 200 {
		t.Errorf("CONNECT requests %+v", reqs)
	}
}

// A selector error ends the call before any wire attempt.
func TestProxySelectorError(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	boom := errors.New("boom")
	tr, obs := client(t, s, replaysafe.Options{Proxy: func(*http.Request) (*url.URL, error) { return nil, boom }})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	var pe *replaysafe.ProxyError
	if !errors.As(err, &pe) || !errors.Is(err, boom) {
		t.Fatalf("error %v, want a ProxyError wrapping the selector's", err)
	}
	if s.Conns() != 0 || len(obs.attempts) != 0 {
		t.Errorf("%d connections, %d attempts, want none", s.Conns(), len(obs.attempts))
	}
}

// ---- chains and TLS -------------------------------------------------------

// Through a chain of two proxies each hop carries one tunnel, sees only
// its own credentials, and the last one reaches the origin. Hop 2 is an
// https proxy: its credentials cross hop 1 inside TLS with hop 2.
func TestProxyChainOfTwo(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p1 := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "one", Password: "1"}})
	p2 := startProxy(t, connectproxy.Config{TLS: true, RequireAuth: &connectproxy.Credentials{Username: "two", Password: "2"}})
	sel := &selector{urls: []*url.URL{mustURL(t, p1.URL()), mustURL(t, p2.URL())}}
	tr, _ := client(t, s, replaysafe.Options{
		ProxyChain:           sel.chain,
		ProxyTLSClientConfig: p2.ClientTLSConfig(),
		ProxyAuth: func(_ *http.Request, hop int, _ *url.URL) (*replaysafe.ProxyCredentials, error) {
			return &replaysafe.ProxyCredentials{ID: "hop" + string(rune('0'+hop)), Username: []string{"", "one", "two"}[hop], Password: string(rune('0' + hop))}, nil
		},
	})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b")
	if p1.Tunnels() != 1 || p2.Tunnels() != 1 || s.Conns() != 1 {
		t.Errorf("tunnels %d and %d, origin connections %d, want 1, 1, 1", p1.Tunnels(), p2.Tunnels(), s.Conns())
	}
	r1, r2 := p1.Requests(), p2.Requests()
	if len(r1) != 1 || len(r2) != 1 || r1[0].Target != p2.Addr() || r2[0].Target != s.Addr() {
		t.Fatalf("CONNECT targets %+v / %+v", r1, r2)
	}
	if r1[0].Status != 200 || r2[0].Status != 200 {
		t.Errorf("statuses %d and %d", r1[0].Status, r2[0].Status)
	}
	if n := sel.calls.Load(); n != 2 {
		t.Errorf("chain selector called %d times, want 2", n)
	}
}

// A chain whose second hop is a cleartext proxy (http, or socks5) with
// credentials would show them to hop 1: the call fails with an *Error
// (RS04) wrapping a *ProxyError naming hop 2, before any proxy or the
// origin gets a byte.
func TestProxyChainCleartextCredentialsRefused(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p1 := startProxy(t, connectproxy.Config{})
	p2 := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "two", Password: "2"}})
	sp, err := connectproxy.StartSOCKS5(connectproxy.SOCKSConfig{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	for _, second := range []string{p2.URL(), sp.URL()} {
		u2 := mustURL(t, second)
		u2.User = url.UserPassword("two", "2")
		sel := &selector{urls: []*url.URL{mustURL(t, p1.URL()), u2}}
		tr, _ := client(t, s, replaysafe.Options{ProxyChain: sel.chain})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
		var pe *replaysafe.ProxyError
		var ce *proxy.ChainCredentialsError
		if !errors.As(err, &pe) || pe.Hop != 2 || !errors.As(err, &ce) || ce.Addr != u2.Host || !errors.Is(err, proxy.ErrCleartextChainCredentials) {
			t.Fatalf("%s: error %v, want a ProxyError for hop 2 wrapping a ChainCredentialsError", u2.Scheme, err)
		}
		// The refusal names its rule like every failed call: the
		// acquisition failed before anything was sent, after no attempt.
		var e *replaysafe.Error
		if !errors.As(err, &e) || e.Rule != fsm.RuleAcquireFailed || e.Attempts != 0 || !errors.As(e.Err, &pe) {
			t.Fatalf("%s: error %v, want a *replaysafe.Error (RS04, 0 attempts) wrapping the ProxyError", u2.Scheme, err)
		}
		t.Log(err)
	}
	if p1.Conns() != 0 || len(p2.Requests()) != 0 || len(sp.Requests()) != 0 || s.Conns() != 0 {
		t.Errorf("connections: hop 1 %d, hop 2 %d CONNECTs and %d SOCKS sessions, origin %d; want none",
			p1.Conns(), len(p2.Requests()), len(sp.Requests()), s.Conns())
	}
}

// rawConnectProxy accepts connections, reads one CONNECT request on each
// and writes reply in one write, then reads until the client goes. It
// counts the CONNECT requests it read.
func rawConnectProxy(t *testing.T, reply string) (addr string, requests func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				n.Add(1)
				io.WriteString(c, reply)
				io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), func() int { return int(n.Load()) }
}

// A proxy that pipelines a forged response right behind its CONNECT 200,
// for a plain-http origin: those bytes came before the request was
// written, so the attempt fails as an acquisition failure (RS04, nothing
// of the request left) with a *proxy.EarlyResponseError naming the hop;
// the forged response is never returned and the origin gets nothing.
func TestProxyPlainOriginEarlyBytesFail(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	forged := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	addr, requests := rawConnectProxy(t, "HTTP/1.1 200 Connection established\r\n\r\n"+forged)
	u := mustURL(t, "http://"+addr)
	tr, _ := client(t, s, replaysafe.Options{ProxyConnectPlainHTTP: true, Proxy: func(*http.Request) (*url.URL, error) { return u, nil }})
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	if err == nil {
		t.Fatalf("call succeeded: %d %q", code, body)
	}
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	var ee *proxy.EarlyResponseError
	if !errors.As(err, &ee) || ee.Hop != 1 || ee.Bytes != len(forged) {
		t.Fatalf("error %v, want an EarlyResponseError at hop 1 for %d bytes", err, len(forged))
	}
	t.Log(err)
	if requests() != 1 || s.Count() != 0 {
		t.Errorf("proxy read %d CONNECTs, origin %d requests; want 1 and 0", requests(), s.Count())
	}
}

// An https origin through an https proxy: TLS to the proxy offers h2,
// then http/1.1, which this proxy picks; TLS to the origin runs inside
// the tunnel.
func TestProxyHTTPSThroughHTTPS(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{TLS: true})
	tr, _, _ := proxied(t, s, p, replaysafe.Options{})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || !resp.TLS.HandshakeComplete || resp.TLS.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("status %d, TLS %+v", resp.StatusCode, resp.TLS)
	}
	wantCopies(t, s, "/target", 1)
	reqs := p.Requests()
	if len(reqs) != 1 || len(reqs[0].ALPN) != 2 || reqs[0].ALPN[1] != "http/1.1" || reqs[0].Proto != "HTTP/1.1" || reqs[0].Target != s.Addr() {
		t.Errorf("CONNECT requests %+v", reqs)
	}
}

// ---- one acquisition deadline ----------------------------------------------

// A slow proxy at every acquisition step runs the one deadline out, and
// the error names the step and hop: an acquire-phase timeout (RS06) whose
// cause is also a *route.DeadlineError.
func TestProxyDeadlineNamesStep(t *testing.T) {
	const limit = 150 * time.Millisecond
	// silent accepts TCP and never speaks: a TLS origin that stalls.
	silent, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	held.Go(func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		silent.Close()
		held.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	blockTCP := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	for _, tc := range []struct {
		name   string
		tls    bool
		stall  connectproxy.Point
		second bool // stall at the second hop of a chain
		dial   func(ctx context.Context, network, addr string) (net.Conn, error)
		origin string // "silent" for the stalling TLS origin
		step   route.Step
		hop    int
	}{
		{name: "tcp", dial: blockTCP, step: route.StepTCP, hop: 1},
		{name: "tls-to-proxy", tls: true, stall: connectproxy.StallBeforeHandshake, step: route.StepProxyTLS, hop: 1},
		{name: "connect-before-request", stall: connectproxy.StallBeforeRequest, step: route.StepConnect, hop: 1},
		{name: "connect-after-request", stall: connectproxy.StallAfterRequest, step: route.StepConnect, hop: 1},
		{name: "connect-mid-response", stall: connectproxy.StallMidResponse, step: route.StepConnect, hop: 1},
		{name: "connect-hop-2", stall: connectproxy.StallAfterRequest, second: true, step: route.StepConnect, hop: 2},
		{name: "tls-to-origin", origin: "silent", step: route.StepOriginTLS, hop: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, replaysafetest.Config{TLS: true})
			target := s.URL() + "/target"
			if tc.origin == "silent" {
				target = "https://" + silent.Addr().String() + "/target"
			}
			stall := connectproxy.Script{Stall: tc.stall, StallFor: 10 * time.Second}
			var chain []*url.URL
			var proxyTLS *tls.Config
			if tc.second {
				p2 := startProxy(t, connectproxy.Config{Default: &stall})
				p1 := startProxy(t, connectproxy.Config{})
				chain = []*url.URL{mustURL(t, p1.URL()), mustURL(t, p2.URL())}
			} else {
				p := startProxy(t, connectproxy.Config{TLS: tc.tls, Default: &stall})
				chain = []*url.URL{mustURL(t, p.URL())}
				proxyTLS = p.ClientTLSConfig()
			}
			sel := &selector{urls: chain}
			o := replaysafe.Options{ProxyChain: sel.chain, AcquireTimeout: limit, DialContext: tc.dial, ProxyTLSClientConfig: proxyTLS}
			tr, _ := client(t, s, o)
			_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", target, ""))
			t.Logf("error: %v", err)
			wantRule(t, err, fsm.RuleTimeout, 1)
			var te *replaysafe.TimeoutError
			var de *route.DeadlineError
			if !errors.As(err, &te) || te.Phase != fsm.PhaseAcquire || !errors.As(err, &de) {
				t.Fatalf("error %v, want an acquire TimeoutError and a DeadlineError", err)
			}
			if de.Step != tc.step || de.Hop != tc.hop || de.Limit != limit {
				t.Errorf("deadline error %v: step %v hop %d, want %v hop %d", de, de.Step, de.Hop, tc.step, tc.hop)
			}
			if !strings.Contains(err.Error(), tc.step.String()) {
				t.Errorf("error text %q does not name the step", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(err, context.DeadlineExceeded) is false")
			}
			if s.Count() != 0 {
				t.Errorf("origin received %d requests", s.Count())
			}
		})
	}
}

// The resend after a stale tunnel starts a budget of its own: the call
// has run longer than AcquireTimeout before the resend acquires, and the
// resend still gets its connection.
func TestProxyResendGetsFreshBudget(t *testing.T) {
	s := start(t, tunnelCut())
	p := startProxy(t, connectproxy.Config{IdleCut: cutAfter})
	tr, obs, _ := proxied(t, s, p, replaysafe.Options{AcquireTimeout: cutAfter / 2})
	get(t, tr, s, "/warm")
	began := time.Now()
	code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	if err != nil || code != 200 {
		t.Fatalf("GET: %d %v", code, err)
	}
	// The proxy's cut comes cutAfter after the tunnel went idle, which
	// was before began: the call waits out most of it, and so outlasts
	// its AcquireTimeout (cutAfter/2) before the resend acquires.
	if took := time.Since(began); took <= cutAfter/2 {
		t.Fatalf("call took %v, not longer than AcquireTimeout %v: the scenario did not happen", took, cutAfter/2)
	}
	wantCopies(t, s, "/target", 2)
	wantDecisions(t, obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
}

// A SOCKS5 hop with username/password authentication, chained before a
// CONNECT proxy: the SOCKS proxy sees only its credentials.
func TestProxySOCKS5ThenConnect(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	sp, err := connectproxy.StartSOCKS5(connectproxy.SOCKSConfig{
		RequireAuth: &connectproxy.Credentials{Username: "sock", Password: "pw"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	p := startProxy(t, connectproxy.Config{})
	su := mustURL(t, sp.URL())
	su.User = url.UserPassword("sock", "pw")
	sel := &selector{urls: []*url.URL{su, mustURL(t, p.URL())}}
	tr, _ := client(t, s, replaysafe.Options{ProxyChain: sel.chain})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b")
	sr := sp.Requests()
	if len(sr) != 1 || sr[0].Username != "sock" || sr[0].Target != p.Addr() || sr[0].Reply != 0 {
		t.Errorf("SOCKS sessions %+v", sr)
	}
	if cr := p.Requests(); len(cr) != 1 || cr[0].Target != s.Addr() || cr[0].Header.Get("Proxy-Authorization") != "" {
		t.Errorf("CONNECT requests %+v", cr)
	}
	wantCopies(t, s, "/b", 1)
}

// ProxyFromEnvironment reads HTTPS_PROXY and NO_PROXY with implicit
// ports. It reads the environment once per process, so the check runs in
// a child process of the test binary with the variables set.
func TestProxyFromEnvironment(t *testing.T) {
	if os.Getenv("REPLAYSAFE_ENV_SELECTOR_CHILD") != "1" {
		inChild(t, "TestProxyFromEnvironment", "REPLAYSAFE_ENV_SELECTOR_CHILD=1",
			"HTTP_PROXY=http://proxy.example:3128", "HTTPS_PROXY=", "NO_PROXY=direct.example:80",
			"http_proxy=", "https_proxy=", "no_proxy=")
		return
	}
	for _, tc := range []struct{ url, want string }{
		{"http://via.example/", "http://proxy.example:3128"},
		{"http://direct.example/", ""}, // implicit :80 matches
		{"http://direct.example:8080/", "http://proxy.example:3128"},
		{"https://via.example/", ""}, // no HTTPS_PROXY
	} {
		req, _ := http.NewRequest("GET", tc.url, nil)
		u, err := replaysafe.ProxyFromEnvironment(req)
		got := ""
		if u != nil {
			got = u.String()
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

// inChild runs test name again in a child process of the test binary
// with env added to the environment, and fails when it fails.
func inChild(t *testing.T, name string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// A plain-http origin through an https proxy still tunnels with CONNECT.
func TestProxyHTTPThroughHTTPS(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{TLS: true})
	tr, _, _ := proxied(t, s, p, replaysafe.Options{})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b")
	if reqs := p.Requests(); len(reqs) != 1 || reqs[0].Method != "CONNECT" || reqs[0].Target != s.Addr() {
		t.Errorf("CONNECT requests %+v", reqs)
	}
}

// A refusal at the second hop names that hop; an unusable proxy URL ends
// the call before any wire attempt.
func TestProxyChainErrors(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p1 := startProxy(t, connectproxy.Config{})
	p2 := startProxy(t, connectproxy.Config{Default: &connectproxy.Script{Status: http.StatusForbidden}})
	sel := &selector{urls: []*url.URL{mustURL(t, p1.URL()), mustURL(t, p2.URL())}}
	tr, _ := client(t, s, replaysafe.Options{ProxyChain: sel.chain})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	var ce *proxy.ConnectError
	if !errors.As(err, &ce) || ce.Hop != 2 || ce.StatusCode != http.StatusForbidden || ce.Proxy != p2.Addr() {
		t.Fatalf("error %v, want a 403 ConnectError at hop 2", err)
	}
	if s.Count() != 0 {
		t.Errorf("origin received %d requests", s.Count())
	}

	bad := &selector{urls: []*url.URL{mustURL(t, p1.URL()), mustURL(t, "ftp://127.0.0.1:21")}}
	tr2, _ := client(t, s, replaysafe.Options{ProxyChain: bad.chain})
	_, _, err = roundTrip(tr2, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	var pe *replaysafe.ProxyError
	if !errors.As(err, &pe) || pe.Hop != 2 {
		t.Fatalf("error %v, want a ProxyError for hop 2", err)
	}
	if p1.Conns() != 1 {
		t.Errorf("first proxy accepted %d connections, want 1 (only the refused call's)", p1.Conns())
	}
}

// Proxy-Authorization set by the caller under any spelling of its key
// (lower, mixed, canonical) never reaches the origin through a tunnel,
// over HTTP/1.1 and HTTP/2: net/http writes a key as given and x/net
// lower-cases it, so only a canonical comparison drops them all.
func TestProxyAuthorizationAnySpellingNeverReachesOrigin(t *testing.T) {
	keys := []string{"proxy-authorization", "PROXY-authorization", "Proxy-Authorization"}
	t.Run("HTTP/1.1", func(t *testing.T) {
		s := start(t, replaysafetest.Config{})
		p := startProxy(t, connectproxy.Config{})
		tr, _, _ := proxied(t, s, p, replaysafe.Options{})
		for i, k := range keys {
			req := newRequest(t, t.Context(), "GET", s.URL()+"/t"+string(rune('0'+i)), "")
			req.Header[k] = []string{"Basic bGVhazpsZWFr"}
			if code, _, err := roundTrip(tr, req); err != nil || code != 200 {
				t.Fatalf("%q: %d %v", k, code, err)
			}
			got := wantCopies(t, s, "/t"+string(rune('0'+i)), 1)
			for hk, v := range got[0].Header {
				if strings.EqualFold(hk, "Proxy-Authorization") {
					t.Errorf("key %q: origin received %s: %q", k, hk, v)
				}
			}
			if len(req.Header[k]) != 1 {
				t.Errorf("key %q: the caller's header changed", k)
			}
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		s := startH2(t, h2server.Config{TLS: true})
		p := startProxy(t, connectproxy.Config{})
		u := mustURL(t, p.URL())
		tr, _ := h2Client(t, s, replaysafe.Options{Proxy: func(*http.Request) (*url.URL, error) { return u, nil }})
		for i, k := range keys {
			req := newRequest(t, t.Context(), "GET", s.URL()+"/t"+string(rune('0'+i)), "")
			req.Header[k] = []string{"Basic bGVhazpsZWFr"}
			if code, _, err := roundTrip(tr, req); err != nil || code != 200 {
				t.Fatalf("%q: %d %v", k, code, err)
			}
		}
		reqs := s.Requests()
		if len(reqs) != len(keys) {
			t.Fatalf("origin received %d streams, want %d", len(reqs), len(keys))
		}
		for _, r := range reqs {
			for _, f := range r.Fields {
				if strings.EqualFold(f.Name, "proxy-authorization") {
					t.Errorf("%s: origin received %s: %q", r.Path, f.Name, f.Value)
				}
			}
		}
		if n := len(p.Requests()); n != 1 {
			t.Errorf("proxy tunnels %d, want 1", n)
		}
	})
}

// Allowed explicitly, the cleartext chain goes through, and hop 1 then
// relays hop 2's Basic header where it can read it.
func TestProxyChainCleartextCredentialsAllowed(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p1 := startProxy(t, connectproxy.Config{})
	p2 := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "two", Password: "2"}})
	u2 := mustURL(t, p2.URL())
	u2.User = url.UserPassword("two", "2")
	sel := &selector{urls: []*url.URL{mustURL(t, p1.URL()), u2}}
	tr, _ := client(t, s, replaysafe.Options{ProxyChain: sel.chain, AllowCleartextChainCredentials: true})
	get(t, tr, s, "/a")
	if r2 := p2.Requests(); len(r2) != 1 || r2[0].Status != 200 || r2[0].Header.Get("Proxy-Authorization") == "" {
		t.Errorf("hop 2 CONNECTs %+v", r2)
	}
}
