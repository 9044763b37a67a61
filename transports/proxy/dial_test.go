package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// limit is the acquisition budget of the deadline tests: short enough to
// keep them fast, long enough that a loaded machine finishes the steps
// that should succeed.
const limit = 200 * time.Millisecond

// ample is the budget of tests that must not time out.
const ample = 10 * time.Second

func budget(d time.Duration) route.Budget { return route.Start(SystemClock.Now(), d) }

// listener is a loopback TCP server: echo echoes, silent accepts and
// never answers.
type listener struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs []net.Conn
}

func startListener(t *testing.T, serve func(net.Conn)) *listener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.cs = append(l.cs, c)
			l.mu.Unlock()
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		for _, c := range l.cs {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l
}

func startEcho(t *testing.T) *listener {
	return startListener(t, func(c net.Conn) { io.Copy(c, c) })
}

func startSilent(t *testing.T) *listener {
	return startListener(t, func(c net.Conn) { io.Copy(io.Discard, c) })
}

func (l *listener) addr() string { return l.ln.Addr().String() }

func (l *listener) conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cs)
}

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

func startSOCKS(t *testing.T, cfg connectproxy.SOCKSConfig) *connectproxy.SOCKSServer {
	t.Helper()
	cfg.Logf = t.Logf
	p, err := connectproxy.StartSOCKS5(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func startOrigin(t *testing.T, useTLS bool) *replaysafetest.Server {
	t.Helper()
	o, err := replaysafetest.Start(replaysafetest.Config{TLS: useTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// routeHop returns the route's view of a proxy listening on addr.
func routeHop(kind route.ProxyKind, addr, credID string) route.Hop {
	ap := netip.MustParseAddrPort(addr)
	return route.Hop{Kind: kind, Host: ap.Addr().String(), Port: ap.Port(), CredentialID: credID}
}

// hopTo returns the Hop for p, with auth presented as credID.
func hopTo(p *connectproxy.Server, auth *Auth, credID string) Hop {
	kind := route.ProxyHTTP
	if p.Certificate() != nil {
		kind = route.ProxyHTTPS
	}
	return Hop{Hop: routeHop(kind, p.Addr(), credID), HopConfig: HopConfig{Auth: auth, TLSConfig: p.ClientTLSConfig()}}
}

func socksHop(p *connectproxy.SOCKSServer, auth *Auth) Hop {
	return Hop{Hop: routeHop(route.ProxySOCKS5, p.Addr(), ""), HopConfig: HopConfig{Auth: auth}}
}

func echoRoundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo = %q, %v", got, err)
	}
}

func dial(t *testing.T, hops []Hop, target string) net.Conn {
	t.Helper()
	c, err := DialChain(context.Background(), nil, hops, target, budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func basic(user, pass string) string {
	v, _ := (&Auth{Username: user, Password: pass}).basic()
	return v
}

func TestDialChainDirect(t *testing.T) {
	e := startEcho(t)
	c := dial(t, nil, e.addr())
	echoRoundTrip(t, c, "direct")
	if e.conns() != 1 {
		t.Errorf("origin conns = %d", e.conns())
	}
}

// Reference: "HTTP and HTTPS proxy hops establish transparent CONNECT
// tunnels ... HTTPS proxies negotiate HTTP/1.1 for the textual CONNECT
// exchange."
func TestDialChainThroughProxies(t *testing.T) {
	tests := []struct {
		name string
		tls  []bool // per hop, in dial order
	}{
		{"http", []bool{false}},
		{"https", []bool{true}},
		{"http>http", []bool{false, false}},
		{"https>https", []bool{true, true}},
		{"http>https", []bool{false, true}},
		{"https>http", []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEcho(t)
			var proxies []*connectproxy.Server
			var hops []Hop
			for _, useTLS := range tt.tls {
				// A TLS proxy that would prefer h2: the client must
				// offer http/1.1 alone.
				p := startProxy(t, connectproxy.Config{TLS: useTLS, ALPN: []string{"h2", "http/1.1"}})
				proxies = append(proxies, p)
				hops = append(hops, hopTo(p, nil, ""))
			}
			c := dial(t, hops, e.addr())
			echoRoundTrip(t, c, "through "+tt.name)
			for i, p := range proxies {
				want := e.addr()
				if i+1 < len(proxies) {
					want = proxies[i+1].Addr()
				}
				reqs := p.Requests()
				if p.Tunnels() != 1 || p.Conns() != 1 || len(reqs) != 1 || reqs[0].Target != want || reqs[0].Host != want {
					t.Errorf("hop %d: tunnels=%d conns=%d requests=%+v; want one tunnel to %s", i+1, p.Tunnels(), p.Conns(), reqs, want)
				}
				if tt.tls[i] && !slices.Equal(reqs[0].ALPN, []string{"http/1.1"}) {
					t.Errorf("hop %d: client offered ALPN %q, want only http/1.1", i+1, reqs[0].ALPN)
				}
			}
			if e.conns() != 1 {
				t.Errorf("origin conns = %d", e.conns())
			}
		})
	}
}

func httpGet(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: origin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Credentials go to their hop only: every proxy sees its own
// Proxy-Authorization or none, and the origin sees none.
func TestDialRouteCredentialsOnlyToTheirHop(t *testing.T) {
	for _, originTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http-origin", true: "https-origin"}[originTLS], func(t *testing.T) {
			o := startOrigin(t, originTLS)
			p1 := startProxy(t, connectproxy.Config{TLS: true, RequireAuth: &connectproxy.Credentials{Username: "one", Password: "1"}})
			p2 := startProxy(t, connectproxy.Config{})
			// Hop 3 has credentials, so it is an https proxy: they cross
			// hops 1 and 2 inside TLS with hop 3 (CheckChainCredentials).
			p3 := startProxy(t, connectproxy.Config{TLS: true, RequireAuth: &connectproxy.Credentials{Username: "three", Password: "3"}})
			scheme := route.SchemeHTTP
			if originTLS {
				scheme = route.SchemeHTTPS
			}
			ap := netip.MustParseAddrPort(o.Addr())
			r, err := route.New(route.Spec{Scheme: scheme, Host: ap.Addr().String(), Port: ap.Port(), UseProxy: true, Policy: route.PolicyH1,
				Chain: []route.Hop{routeHop(route.ProxyHTTPS, p1.Addr(), "one#1"), routeHop(route.ProxyHTTP, p2.Addr(), ""), routeHop(route.ProxyHTTPS, p3.Addr(), "three#3")}})
			if err != nil {
				t.Fatal(err)
			}
			configs := []HopConfig{
				{Auth: &Auth{Username: "one", Password: "1"}, TLSConfig: p1.ClientTLSConfig()},
				{},
				{Auth: &Auth{Username: "three", Password: "3"}, TLSConfig: p3.ClientTLSConfig()},
			}
			c, err := DialRoute(context.Background(), nil, r, configs, o.ClientTLSConfig(), budget(ample))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if originTLS {
				tc, ok := c.(*tls.Conn)
				if !ok || !tc.ConnectionState().PeerCertificates[0].Equal(o.Certificate()) {
					t.Errorf("connection is not TLS with the origin: %T", c)
				}
			}
			if resp := httpGet(t, c); resp.StatusCode != 200 {
				t.Fatalf("origin answered %s", resp.Status)
			}
			want := []string{basic("one", "1"), "", basic("three", "3")}
			for i, p := range []*connectproxy.Server{p1, p2, p3} {
				reqs := p.Requests()
				if p.Tunnels() != 1 || len(reqs) != 1 {
					t.Fatalf("hop %d: tunnels=%d requests=%d", i+1, p.Tunnels(), len(reqs))
				}
				if got := reqs[0].Header.Values("Proxy-Authorization"); strings.Join(got, ",") != want[i] {
					t.Errorf("hop %d received Proxy-Authorization %q, want %q", i+1, got, want[i])
				}
			}
			reqs := o.Requests()
			if o.Count() != 1 || o.Conns() != 1 || len(reqs) != 1 {
				t.Fatalf("origin count=%d conns=%d", o.Count(), o.Conns())
			}
			if v := reqs[0].Header.Values("Proxy-Authorization"); len(v) != 0 {
				t.Errorf("origin received Proxy-Authorization %q", v)
			}
		})
	}
}

// Reference: "Any successful 2xx CONNECT response establishes a tunnel.
// Informational, redirect, client-error, and server-error responses
// fail."
func TestConnectStatuses(t *testing.T) {
	for _, code := range []int{100, 101, 103, 199, 200, 201, 202, 204, 206, 299, 300, 301, 302, 304, 307, 308, 400, 403, 404, 405, 407, 408, 429, 500, 502, 503, 504, 599} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			e := startEcho(t)
			p := startProxy(t, connectproxy.Config{Default: &connectproxy.Script{Status: code}})
			c, err := DialChain(context.Background(), nil, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
			if code >= 200 && code <= 299 {
				if err != nil {
					t.Fatalf("%d did not open the tunnel: %v", code, err)
				}
				defer c.Close()
				echoRoundTrip(t, c, "ok")
				return
			}
			var ce *ConnectError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *ConnectError", err)
			}
			if ce.Hop != 1 || ce.Proxy != p.Addr() || ce.Target != e.addr() || ce.StatusCode != code || ce.Status != http.StatusText(code) && ce.Status != "Status" {
				t.Errorf("ConnectError = %+v", ce)
			}
			if !strings.Contains(err.Error(), "hop 1 ("+p.Addr()+")") || !strings.Contains(err.Error(), strconv.Itoa(code)) {
				t.Errorf("error text %q does not name the hop and status", err)
			}
			if e.conns() != 0 {
				t.Errorf("origin conns = %d", e.conns())
			}
		})
	}
}

func TestConnect407(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "u", Password: "p"},
		Conns: []connectproxy.Script{{}, {}, {Status: 407, Reason: "Login Needed Here", Header: http.Header{"Proxy-Authenticate": {`Negotiate`, `Basic realm="corp"`}}}}})
	hop := hopTo(p, nil, "")

	_, err := DialChain(context.Background(), nil, []Hop{hop}, e.addr(), budget(ample))
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.StatusCode != 407 || ce.Status != "Proxy Authentication Required" ||
		!slices.Equal(ce.ProxyAuthenticate, []string{`Basic realm="connectproxy"`}) {
		t.Fatalf("without credentials: %v (%+v)", err, ce)
	}
	want := `proxy: hop 1 (` + p.Addr() + `) refused CONNECT ` + e.addr() + `: 407 Proxy Authentication Required (Proxy-Authenticate: Basic realm="connectproxy")`
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}

	hop.Auth = &Auth{Username: "u", Password: "wrong"}
	if _, err := DialChain(context.Background(), nil, []Hop{hop}, e.addr(), budget(ample)); !errors.As(err, &ce) || ce.StatusCode != 407 {
		t.Fatalf("wrong password: %v", err)
	}

	hop.Auth = &Auth{Username: "u", Password: "p"}
	_, err = DialChain(context.Background(), nil, []Hop{hop}, e.addr(), budget(ample))
	if !errors.As(err, &ce) || ce.Status != "Login Needed Here" || !slices.Equal(ce.ProxyAuthenticate, []string{"Negotiate", `Basic realm="corp"`}) {
		t.Fatalf("scripted 407: %v", err)
	}
	c := dial(t, []Hop{hop}, e.addr())
	echoRoundTrip(t, c, "authorised")
	if p.Tunnels() != 1 || p.Conns() != 4 {
		t.Errorf("tunnels=%d conns=%d", p.Tunnels(), p.Conns())
	}
}

func TestConnectMalformed(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want error // matched with errors.Is; nil means any *ParseError
	}{
		{"not HTTP", "SSH-2.0-x\r\n\r\n", nil},
		{"HTTP/2 status line", "HTTP/2 200\r\n\r\n", nil},
		{"obs-fold", "HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n", nil},
		{"oversized", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes) + "\r\n\r\n", ErrHeaderTooLarge},
		{"closed mid-header", "HTTP/1.1 200 OK\r\nVia: 1.1", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEcho(t)
			p := startProxy(t, connectproxy.Config{Default: &connectproxy.Script{Raw: []byte(tt.raw)}})
			_, err := DialChain(context.Background(), nil, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
			var se *StepError
			if !errors.As(err, &se) || se.Step != route.StepConnect || se.Hop != 1 || se.Addr != p.Addr() {
				t.Fatalf("err = %v, want a *StepError at connect, hop 1", err)
			}
			var pe *ParseError
			if tt.want == nil && !errors.As(err, &pe) || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// Reference: "CONNECT parsing is bounded and leaves bytes following the
// response header section available to the tunneled protocol."
func TestLeftoverBytesReachTunneledProtocol(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			e := startEcho(t)
			// The proxy sends the start of the tunneled exchange in the
			// same write as its 200: a whole HTTP response.
			early := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly"
			p := startProxy(t, connectproxy.Config{TLS: useTLS, Default: &connectproxy.Script{Extra: []byte(early)}})
			c := dial(t, []Hop{hopTo(p, nil, "")}, e.addr())
			c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != "early" {
				t.Fatalf("tunneled body = %q, %v", body, err)
			}
			if br.Buffered() != 0 {
				t.Fatalf("%d unexpected bytes", br.Buffered())
			}
			echoRoundTrip(t, c, "and then the origin")
		})
	}
}

// blockingResolver and blockingTCP stand for a DNS server and a network
// that never answer.
type blockingResolver struct{}

func (blockingResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

type blockingTCP struct{}

func (blockingTCP) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}

// Reference: "One absolute connection-acquisition deadline ... covers
// DNS resolution and TCP connection; TLS to every HTTPS proxy; CONNECT or
// SOCKS negotiation for every hop; TLS to the origin inside the completed
// tunnel." Every step that stalls hits the deadline and is named, here
// against the scripted proxies over loopback TCP; the same steps under
// fake time (TestDeadlineNamesStepFakeTime) end at the deadline exactly.
func TestDeadlineNamesStep(t *testing.T) {
	type setup struct {
		d      *Dialer
		hops   []Hop
		target string
		origin *tls.Config // non-nil: HandshakeOrigin after DialChain
	}
	stallProxy := func(t *testing.T, useTLS bool, p connectproxy.Point) *connectproxy.Server {
		return startProxy(t, connectproxy.Config{TLS: useTLS, Default: &connectproxy.Script{Stall: p}})
	}
	okProxy := func(t *testing.T, useTLS bool) *connectproxy.Server {
		return startProxy(t, connectproxy.Config{TLS: useTLS})
	}
	originTLS := &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	tests := []struct {
		name  string
		setup func(t *testing.T) setup
		step  route.Step
		hop   int
	}{
		{"dns to first proxy", func(t *testing.T) setup {
			return setup{d: &Dialer{Resolver: blockingResolver{}}, hops: []Hop{{Hop: route.Hop{Kind: route.ProxyHTTP, Host: "proxy.example", Port: 3128}}}, target: "origin.example:443"}
		}, route.StepDNS, 1},
		{"dns to origin", func(t *testing.T) setup {
			return setup{d: &Dialer{Resolver: blockingResolver{}}, target: "origin.example:443"}
		}, route.StepDNS, 0},
		{"tcp to first proxy", func(t *testing.T) setup {
			return setup{d: &Dialer{TCP: blockingTCP{}}, hops: []Hop{hopTo(okProxy(t, false), nil, "")}, target: "127.0.0.1:9"}
		}, route.StepTCP, 1},
		{"tcp to origin", func(t *testing.T) setup {
			return setup{d: &Dialer{TCP: blockingTCP{}}, target: "127.0.0.1:9"}
		}, route.StepTCP, 0},
		{"tls to proxy 1", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(stallProxy(t, true, connectproxy.StallBeforeHandshake), nil, "")}, target: startEcho(t).addr()}
		}, route.StepProxyTLS, 1},
		{"tls to proxy 2", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(okProxy(t, false), nil, ""), hopTo(stallProxy(t, true, connectproxy.StallBeforeHandshake), nil, "")}, target: startEcho(t).addr()}
		}, route.StepProxyTLS, 2},
		{"connect: proxy stalls before reading", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(stallProxy(t, false, connectproxy.StallBeforeRequest), nil, "")}, target: startEcho(t).addr()}
		}, route.StepConnect, 1},
		{"connect: TLS proxy stalls after handshake", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(stallProxy(t, true, connectproxy.StallAfterHandshake), nil, "")}, target: startEcho(t).addr()}
		}, route.StepConnect, 1},
		{"connect: proxy stalls after reading", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(stallProxy(t, false, connectproxy.StallAfterRequest), nil, "")}, target: startEcho(t).addr()}
		}, route.StepConnect, 1},
		{"connect: proxy stalls mid status line", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(stallProxy(t, false, connectproxy.StallMidResponse), nil, "")}, target: startEcho(t).addr()}
		}, route.StepConnect, 1},
		{"connect at hop 2", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(okProxy(t, true), nil, ""), hopTo(stallProxy(t, false, connectproxy.StallAfterRequest), nil, "")}, target: startEcho(t).addr()}
		}, route.StepConnect, 2},
		{"socks at hop 1", func(t *testing.T) setup {
			s := startSOCKS(t, connectproxy.SOCKSConfig{Stall: connectproxy.StallBeforeRequest})
			return setup{hops: []Hop{socksHop(s, nil)}, target: startEcho(t).addr()}
		}, route.StepSOCKS, 1},
		{"socks at hop 2 after reading the request", func(t *testing.T) setup {
			s := startSOCKS(t, connectproxy.SOCKSConfig{Stall: connectproxy.StallAfterRequest})
			return setup{hops: []Hop{hopTo(okProxy(t, false), nil, ""), socksHop(s, nil)}, target: startEcho(t).addr()}
		}, route.StepSOCKS, 2},
		{"tls to origin, direct", func(t *testing.T) setup {
			return setup{target: startSilent(t).addr(), origin: originTLS}
		}, route.StepOriginTLS, 0},
		{"tls to origin through two proxies", func(t *testing.T) setup {
			return setup{hops: []Hop{hopTo(okProxy(t, true), nil, ""), hopTo(okProxy(t, false), nil, "")}, target: startSilent(t).addr(), origin: originTLS}
		}, route.StepOriginTLS, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.setup(t)
			b := budget(limit)
			begin := time.Now()
			c, err := DialChain(context.Background(), s.d, s.hops, s.target, b)
			if err == nil && s.origin != nil {
				c, err = HandshakeOrigin(context.Background(), s.d, c, s.origin, b)
			}
			took := time.Since(begin)
			if err == nil {
				c.Close()
				t.Fatal("acquisition succeeded")
			}
			var de *route.DeadlineError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want *route.DeadlineError", err)
			}
			if de.Step != tt.step || de.Hop != tt.hop {
				t.Errorf("deadline hit at %v hop %d, want %v hop %d: %v", de.Step, de.Hop, tt.step, tt.hop, err)
			}
			if de.Limit != limit || de.Elapsed < limit || !de.Timeout() || de.Cause == nil {
				t.Errorf("DeadlineError = %+v", de)
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Error("not a net.Error timeout")
			}
			// Not before the budget ran out. How soon after is exact in
			// TestDeadlineNamesStepFakeTime, where nothing else runs.
			if took < limit {
				t.Errorf("gave up after %v with a %v budget", took, limit)
			}
		})
	}
}

func TestExpiredBudgetStartsNothing(t *testing.T) {
	e := startEcho(t)
	b := route.Start(SystemClock.Now()-route.Instant(time.Second), limit)
	_, err := DialChain(context.Background(), nil, nil, e.addr(), b)
	var de *route.DeadlineError
	if !errors.As(err, &de) || de.Step != route.StepDNS || de.Cause != nil {
		t.Fatalf("err = %v", err)
	}
	if e.conns() != 0 {
		t.Errorf("dialed %d connections on an expired budget", e.conns())
	}
	// A resend after a stale pooled connection gets a fresh budget.
	c, err := DialChain(context.Background(), nil, nil, e.addr(), b.Renew(SystemClock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestSOCKSHops(t *testing.T) {
	creds := &connectproxy.Credentials{Username: "sock", Password: "s3"}
	tests := []struct {
		name    string
		require *connectproxy.Credentials
		auth    *Auth
		before  bool // an HTTP proxy before the SOCKS hop
		after   bool // an HTTP proxy after the SOCKS hop
		ok      bool
	}{
		{name: "no auth", ok: true},
		{name: "username and password", require: creds, auth: &Auth{Username: "sock", Password: "s3"}, ok: true},
		{name: "behind an http proxy", require: creds, auth: &Auth{Username: "sock", Password: "s3"}, before: true, ok: true},
		{name: "in front of an http proxy", after: true, ok: true},
		{name: "wrong password", require: creds, auth: &Auth{Username: "sock", Password: "no"}},
		{name: "password required, none given", require: creds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEcho(t)
			s := startSOCKS(t, connectproxy.SOCKSConfig{RequireAuth: tt.require})
			hops := []Hop{socksHop(s, tt.auth)}
			socksAt := 1
			var p *connectproxy.Server
			if tt.before || tt.after {
				p = startProxy(t, connectproxy.Config{})
			}
			if tt.before {
				hops = append([]Hop{hopTo(p, nil, "")}, hops...)
				socksAt = 2
			}
			if tt.after {
				hops = append(hops, hopTo(p, nil, ""))
			}
			var d *Dialer
			if tt.before && tt.auth != nil {
				// The SOCKS password would cross the http hop in
				// cleartext: refused unless allowed, and nothing dialed.
				_, err := DialChain(context.Background(), nil, hops, e.addr(), budget(ample))
				var ce *ChainCredentialsError
				if !errors.As(err, &ce) || ce.Hop != 2 || ce.Kind != route.ProxySOCKS5 || p.Conns() != 0 {
					t.Fatalf("err = %v (proxy conns %d), want a ChainCredentialsError at hop 2 before any dial", err, p.Conns())
				}
				d = &Dialer{AllowCleartextChainCredentials: true}
			}
			c, err := DialChain(context.Background(), d, hops, e.addr(), budget(ample))
			if !tt.ok {
				var se *StepError
				if !errors.As(err, &se) || se.Step != route.StepSOCKS || se.Hop != socksAt {
					t.Fatalf("err = %v, want a socks failure at hop %d", err, socksAt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			echoRoundTrip(t, c, "socks")
			reqs := s.Requests()
			want := e.addr()
			if tt.after {
				want = p.Addr()
			}
			if s.Tunnels() != 1 || len(reqs) != 1 || reqs[0].Target != want {
				t.Errorf("socks tunnels=%d requests=%+v", s.Tunnels(), reqs)
			}
			if tt.auth != nil && (reqs[0].Username != "sock" || reqs[0].Password != "s3") {
				t.Errorf("socks credentials %+v", reqs[0])
			}
			if p != nil {
				if pr := p.Requests(); p.Tunnels() != 1 || len(pr) != 1 || pr[0].Header.Get("Proxy-Authorization") != "" {
					t.Errorf("http hop: tunnels=%d requests=%+v", p.Tunnels(), pr)
				}
			}
		})
	}
}

func TestDialRouteRejects(t *testing.T) {
	r, err := route.New(route.Spec{Scheme: route.SchemeHTTP, Host: "127.0.0.1", Port: 9, UseProxy: true,
		Chain: []route.Hop{{Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: 9, CredentialID: "alice"}, {Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := route.New(route.Spec{Scheme: route.SchemeHTTPS, Host: "127.0.0.1", Policy: route.PolicyH3})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		r       route.Route
		configs []HopConfig
	}{
		{"zero route", route.Route{}, nil},
		{"h3", h3, nil},
		{"credential identity without credentials", r, nil},
		{"credentials without identity", r, []HopConfig{{Auth: &Auth{Username: "alice"}}, {Auth: &Auth{Username: "bob"}}}},
		{"config count", r, []HopConfig{{Auth: &Auth{Username: "alice"}}}},
	}
	for _, tt := range tests {
		if c, err := DialRoute(context.Background(), nil, tt.r, tt.configs, nil, budget(ample)); err == nil {
			c.Close()
			t.Errorf("%s: accepted", tt.name)
		}
	}
}

func TestDialChainRejects(t *testing.T) {
	for _, target := range []string{"", "no-port", "[::1"} {
		if c, err := DialChain(context.Background(), nil, nil, target, budget(ample)); err == nil {
			c.Close()
			t.Errorf("target %q accepted", target)
		}
	}
	if _, err := DialChain(context.Background(), nil, make([]Hop, route.MaxHops+1), "a:1", budget(ample)); err == nil {
		t.Error("overlong chain accepted")
	}
}
