package proxy

//lint:file-ignore SA1019 the HTTP/2 leg drives x/net/http2's ClientConn directly, as the Transport does.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// dribbleConn yields its input one byte per Read and swallows writes.
type dribbleConn struct {
	net.Conn // nil: only Read, Write and Close are used
	in       []byte
	reads    int
}

func (c *dribbleConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	c.reads++
	p[0] = c.in[0]
	c.in = c.in[1:]
	return 1, nil
}

func (c *dribbleConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *dribbleConn) Close() error                { return nil }

// connectReply is a 200 whose header section is n bytes long, made of
// short fields.
func connectReply(n int) []byte {
	b := []byte("HTTP/1.1 200 OK\r\n")
	const last = len("Z: \r\n\r\n")
	for len(b)+len("X: y\r\n")+last <= n {
		b = append(b, "X: y\r\n"...)
	}
	b = append(b, "Z: "...)
	b = append(b, strings.Repeat("z", n-len(b)-len("\r\n\r\n"))...)
	return append(b, "\r\n\r\n"...)
}

// measure runs f and returns how long it took and the bytes it (and
// anything running meanwhile) allocated. The duration is for the log
// only: no test judges it.
func measure(f func()) (time.Duration, float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return took, float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
}

// dribble runs a CONNECT exchange over a reply dribbled a byte at a time
// and returns the connection, which counts the reads.
func dribble(reply []byte) (*dribbleConn, error) {
	c := &dribbleConn{in: reply}
	_, _, err := Connect(c, ConnectRequest{Target: "origin:80", Hop: 1, Proxy: "p:1"})
	return c, err
}

// A CONNECT reply dribbled one byte per read goes through exchange's
// resumed parse: the 64 KiB reply (just under MaxHeaderBytes) is read
// once, byte by byte, and parsed with a bounded allocation. That each
// byte is searched once and each line judged once, which makes the work
// linear, is checked on the parser's state by
// TestConnectParserSearchesEachByteOnce, and measured by
// BenchmarkConnectReplyDribble (before, the whole buffer was parsed again
// after every read: 188 ms of CPU for 64 KiB).
func TestConnectReplyDribbleIsLinear(t *testing.T) {
	for _, size := range []int{16 << 10, MaxHeaderBytes} {
		reply := connectReply(size)
		var (
			c   *dribbleConn
			err error
		)
		took, mib := measure(func() { c, err = dribble(reply) })
		t.Logf("%d-byte reply, a byte per read: %v, %.2f MiB allocated", size, took, mib)
		if err != nil || c.reads != len(reply) || len(c.in) != 0 {
			t.Fatalf("%d-byte reply: %v after %d reads, %d bytes unread", size, err, c.reads, len(c.in))
		}
		if mib > 16 {
			t.Errorf("%d-byte reply allocated %.1f MiB", size, mib)
		}
	}
	// One byte over the bound, without a line end: too large as soon as
	// the bound is reached, and nothing past it is read.
	c, err := dribble([]byte("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes)))
	if !errors.Is(err, ErrHeaderTooLarge) || c.reads != MaxHeaderBytes {
		t.Errorf("oversized dribble: %v after %d reads, want ErrHeaderTooLarge after %d", err, c.reads, MaxHeaderBytes)
	}
}

// rawProxy accepts one connection, reads a CONNECT request and writes
// reply; then it relays to target if target is set, else reads until the
// client goes. It counts the CONNECT requests it read.
type rawProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	requests int
	wg       sync.WaitGroup
}

func startRawProxy(t *testing.T, reply string) *rawProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rawProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				p.mu.Lock()
				p.requests++
				p.mu.Unlock()
				io.WriteString(c, reply)
				io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *rawProxy) addr() string { return p.ln.Addr().String() }

func (p *rawProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// A 407 with a 60 KB Proxy-Authenticate challenge and a 2 KB reason
// phrase: the error keeps both whole in its fields, and its message
// quotes MaxPeerText bytes of each and says how much it cut.
func TestConnectErrorTextFromPeerIsCut(t *testing.T) {
	challenge := `Basic realm="` + strings.Repeat("r", 60<<10) + `"`
	reason := strings.Repeat("é", 1<<10) // 2 KiB, two bytes a rune: the cut keeps runes whole
	p := startRawProxy(t, "HTTP/1.1 407 "+reason+"\r\nProxy-Authenticate: "+challenge+"\r\n\r\n")
	hop := Hop{Hop: routeHop(route.ProxyHTTP, p.addr(), "")}
	var err error
	took, mib := measure(func() { _, err = DialChain(context.Background(), nil, []Hop{hop}, "origin.example:80", budget(ample)) })
	t.Logf("407 with %d bytes of challenge: failed in %v, %.2f MiB allocated", len(challenge), took, mib)
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.StatusCode != 407 {
		t.Fatalf("err = %v, want a 407 ConnectError", err)
	}
	if len(ce.ProxyAuthenticate) != 1 || ce.ProxyAuthenticate[0] != challenge || ce.Status != reason {
		t.Error("the error's fields do not keep the whole challenge and reason")
	}
	msg := err.Error()
	t.Logf("message of %d bytes for %d bytes of peer text: ...%s", len(msg), len(challenge)+len(reason), msg[len(msg)-60:])
	if len(msg) > 3*MaxPeerText {
		t.Errorf("message is %d bytes", len(msg))
	}
	if !strings.Contains(msg, "... (61,198 bytes cut))") || !strings.Contains(msg, "... (1,792 bytes cut)") {
		t.Errorf("message does not say how much was cut: %q", msg)
	}
	if !strings.Contains(msg, "refused CONNECT origin.example:80: 407 éé") {
		t.Errorf("message %q", msg)
	}
}

func TestPeerTextAndThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 59800: "59,800", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if s := strings.Repeat("a", MaxPeerText); peerText(s) != s {
		t.Error("text at the bound was cut")
	}
	if got := peerText(strings.Repeat("a", MaxPeerText+59800)); got != strings.Repeat("a", MaxPeerText)+"... (59,800 bytes cut)" {
		t.Errorf("peerText = %q", got[MaxPeerText-4:])
	}
}

// Bytes a proxy pipelines after its CONNECT 200, for a plain-http
// origin, arrived before the request was written: the dial fails with an
// *EarlyResponseError naming the hop and the byte count, and the origin
// gets nothing. For an https origin the same bytes would be kept for the
// TLS handshake (TestTunnelKeepsBytesAfterTheResponse and
// TestDialRouteCredentialsOnlyToTheirHop/https-origin).
func TestPlainOriginEarlyBytesFail(t *testing.T) {
	forged := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	p := startRawProxy(t, "HTTP/1.1 200 Connection established\r\n\r\n"+forged)
	o := startEcho(t)
	ap := netip.MustParseAddrPort(o.addr())
	r, err := route.New(route.Spec{Scheme: route.SchemeHTTP, Host: ap.Addr().String(), Port: ap.Port(), UseProxy: true, Policy: route.PolicyH1,
		Chain: []route.Hop{routeHop(route.ProxyHTTP, p.addr(), "")}})
	if err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	took, mib := measure(func() { c, err = DialRoute(context.Background(), nil, r, nil, nil, budget(ample)) })
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded")
	}
	t.Logf("failed in %v, %.2f MiB allocated", took, mib)
	var ee *EarlyResponseError
	if !errors.As(err, &ee) || ee.Hop != 1 || ee.Bytes != len(forged) || !errors.Is(err, ErrEarlyResponse) {
		t.Fatalf("err = %v, want an EarlyResponseError at hop 1 for %d bytes", err, len(forged))
	}
	t.Log(err)
	if p.count() != 1 || o.conns() != 0 {
		t.Errorf("proxy read %d CONNECTs, origin %d connections; want 1 and 0", p.count(), o.conns())
	}
	// Without early bytes the same route dials.
	p2 := startRawProxy(t, "HTTP/1.1 200 Connection established\r\n\r\n")
	r2, _ := route.New(route.Spec{Scheme: route.SchemeHTTP, Host: ap.Addr().String(), Port: ap.Port(), UseProxy: true, Policy: route.PolicyH1,
		Chain: []route.Hop{routeHop(route.ProxyHTTP, p2.addr(), "")}})
	c, err = DialRoute(context.Background(), nil, r2, nil, nil, budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// A chain whose second hop is a cleartext proxy with credentials is
// refused before anything is dialed, naming the hop; allowed explicitly,
// it dials, and hop 1 then reads hop 2's Basic header in its tunnel.
func TestChainCleartextCredentials(t *testing.T) {
	o := startOrigin(t, false)
	p1 := startProxy(t, connectproxy.Config{})
	p2 := startProxy(t, connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "two", Password: "2"}})
	hops := []Hop{
		{Hop: routeHop(route.ProxyHTTP, p1.Addr(), "")},
		{Hop: routeHop(route.ProxyHTTP, p2.Addr(), "two#2"), HopConfig: HopConfig{Auth: &Auth{Username: "two", Password: "2"}}},
	}
	_, err := DialChain(context.Background(), nil, hops, o.Addr(), budget(ample))
	var ce *ChainCredentialsError
	if !errors.As(err, &ce) || ce.Hop != 2 || ce.Addr != p2.Addr() || !errors.Is(err, ErrCleartextChainCredentials) {
		t.Fatalf("err = %v, want a ChainCredentialsError for hop 2", err)
	}
	t.Log(err)
	if len(p1.Requests()) != 0 || len(p2.Requests()) != 0 {
		t.Fatalf("proxies received %d and %d CONNECTs, want none", len(p1.Requests()), len(p2.Requests()))
	}
	c, err := DialChain(context.Background(), &Dialer{AllowCleartextChainCredentials: true}, hops, o.Addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp := httpGet(t, c); resp.StatusCode != 200 {
		t.Fatalf("origin answered %s", resp.Status)
	}
	if r2 := p2.Requests(); len(r2) != 1 || r2[0].Header.Get("Proxy-Authorization") != basic("two", "2") {
		t.Errorf("hop 2 CONNECTs %+v", r2)
	}
	for _, tc := range []struct {
		name string
		hops []Hop
		hop  int
	}{
		{"first hop's own credentials", []Hop{{Hop: routeHop(route.ProxyHTTP, "127.0.0.1:1", "a"), HopConfig: HopConfig{Auth: &Auth{Username: "a"}}}}, 0},
		{"https second hop", []Hop{{Hop: routeHop(route.ProxyHTTP, "127.0.0.1:1", "")}, {Hop: routeHop(route.ProxyHTTPS, "127.0.0.1:2", "b"), HopConfig: HopConfig{Auth: &Auth{Username: "b"}}}}, 0},
		{"socks second hop", []Hop{{Hop: routeHop(route.ProxyHTTPS, "127.0.0.1:1", "")}, {Hop: routeHop(route.ProxySOCKS5, "127.0.0.1:2", "b"), HopConfig: HopConfig{Auth: &Auth{Username: "b"}}}}, 2},
		{"http third hop behind https ones", []Hop{{Hop: routeHop(route.ProxyHTTPS, "127.0.0.1:1", "")}, {Hop: routeHop(route.ProxyHTTPS, "127.0.0.1:2", "")}, {Hop: routeHop(route.ProxyHTTP, "127.0.0.1:3", "c"), HopConfig: HopConfig{Auth: &Auth{Username: "c"}}}}, 3},
	} {
		err := CheckChainCredentials(tc.hops, false)
		got := 0
		if errors.As(err, &ce) {
			got = ce.Hop
		}
		if got != tc.hop || CheckChainCredentials(tc.hops, true) != nil {
			t.Errorf("%s: %v, want hop %d refused", tc.name, err, tc.hop)
		}
	}
}

// headerOrigin is an origin speaking HTTP/1.1 and cleartext HTTP/2 (prior
// knowledge) that records whether each request carried
// Proxy-Authorization.
type headerOrigin struct {
	srv   *http.Server
	ln    net.Listener
	mu    sync.Mutex
	seen  []bool
	proto []string
}

func startHeaderOrigin(t *testing.T) *headerOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &headerOrigin{ln: ln}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	o.srv = &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := r.Header["Proxy-Authorization"]
		o.mu.Lock()
		o.seen = append(o.seen, ok)
		o.proto = append(o.proto, r.Proto)
		o.mu.Unlock()
	})}
	go o.srv.Serve(ln)
	t.Cleanup(func() { o.srv.Close() })
	return o
}

func (o *headerOrigin) last() (bool, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return false, ""
	}
	return o.seen[len(o.seen)-1], o.proto[len(o.proto)-1]
}

// Proxy-Authorization under any spelling of its key, sent through an
// HTTP/1.1 or HTTP/2 tunnel after OriginHeader, never reaches the origin.
// Without OriginHeader each spelling does: net/http writes the key as
// given and x/net lower-cases it, and the origin reads it canonically.
func TestOriginHeaderDropsProxyAuthorizationAnySpelling(t *testing.T) {
	o := startHeaderOrigin(t)
	p := startProxy(t, connectproxy.Config{})
	tunnel := func() net.Conn {
		c, err := DialChain(context.Background(), nil, []Hop{hopTo(p, nil, "")}, o.ln.Addr().String(), budget(ample))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	type roundTripper func(*http.Request) (*http.Response, error)
	h1 := func() (roundTripper, func()) {
		tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return tunnel(), nil }}
		cc, err := tr.NewClientConn(context.Background(), "http", o.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return cc.RoundTrip, func() { cc.Close() }
	}
	h2 := func() (roundTripper, func()) {
		cc, err := (&http2.Transport{}).NewClientConn(tunnel())
		if err != nil {
			t.Fatal(err)
		}
		return cc.RoundTrip, func() { cc.Close() }
	}
	for _, proto := range []struct {
		name string
		want string
		dial func() (roundTripper, func())
	}{{"HTTP/1.1", "HTTP/1.1", h1}, {"HTTP/2", "HTTP/2.0", h2}} {
		for _, key := range []string{"proxy-authorization", "PROXY-authorization", "Proxy-Authorization"} {
			for _, strip := range []bool{false, true} {
				rt, done := proto.dial()
				req, _ := http.NewRequest("GET", "http://"+o.ln.Addr().String()+"/", nil)
				req.Header[key] = []string{"Basic bGVhazpsZWFr"}
				if strip {
					req.Header = OriginHeader(req.Header)
				}
				resp, err := rt(req)
				if err != nil {
					t.Fatalf("%s %q: %v", proto.name, key, err)
				}
				resp.Body.Close()
				done()
				seen, got := o.last()
				if got != proto.want {
					t.Fatalf("origin saw %q, want %s", got, proto.want)
				}
				if seen == strip {
					t.Errorf("%s, key %q, OriginHeader %v: origin saw Proxy-Authorization %v", proto.name, key, strip, seen)
				}
			}
		}
	}
	h := http.Header{"Accept": {"x"}}
	if got := OriginHeader(h); got == nil || len(got) != 1 {
		t.Error("a header without the field changed")
	}
	h = http.Header{"proxy-authorization": {"a"}, "Proxy-Authorization": {"b"}, "Accept": {"x"}}
	if got := OriginHeader(h); len(got) != 1 || len(h) != 3 {
		t.Errorf("OriginHeader = %v; the caller's header is now %v", got, h)
	}
}
