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
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/transports/proxy"
	"go.uber.org/goleak"
)

// pipeDialer returns a DialContext whose connections are in-memory
// pipes served by serve, counting the dials.
func pipeDialer(dials *atomic.Int32, serve func(net.Conn)) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		c, s := net.Pipe()
		go serve(s)
		return c, nil
	}
}

// TestTLSHandshakeTimeout: a TLS server that never answers the
// ClientHello fails the acquisition after TLSHandshakeTimeout exactly
// (DefaultTLSHandshakeTimeout, 10 s, when zero), with an error naming the
// handshake whose Timeout reports true, decided as an acquisition
// failure (RS04: nothing was sent), dialed once. Fake time.
func TestTLSHandshakeTimeout(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
		want  time.Duration
	}{{"default", 0, replaysafe.DefaultTLSHandshakeTimeout}, {"2s", 2 * time.Second, 2 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials atomic.Int32
				silent := func(s net.Conn) { io.Copy(io.Discard, s); s.Close() }
				tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, TLSHandshakeTimeout: c.limit, DialContext: pipeDialer(&dials, silent)})
				defer tr.CloseIdleConnections()
				req, _ := http.NewRequest("GET", "https://silent.test/", nil)
				began := time.Now()
				_, err := tr.RoundTrip(req)
				if took := time.Since(began); took != c.want {
					t.Errorf("failed after %v, want %v", took, c.want)
				}
				wantRule(t, err, fsm.RuleAcquireFailed, 1)
				var he *proxy.HandshakeTimeoutError
				var te interface{ Timeout() bool }
				if !errors.As(err, &he) || he.Limit != c.want || !errors.As(err, &te) || !te.Timeout() {
					t.Errorf("error %v, want a HandshakeTimeoutError of %v that is a timeout", err, c.want)
				}
				if n := dials.Load(); n != 1 {
					t.Errorf("%d dials", n)
				}
			})
		})
	}
}

// TestExpectContinueTimeout: a request with "Expect: 100-continue" to a
// server that never sends 100 sends its body after
// ExpectContinueTimeout (DefaultExpectContinueTimeout, 1 s, when zero),
// and at once when it is negative. The server reads one request with its
// body and answers it. Fake time.
func TestExpectContinueTimeout(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
		want  time.Duration
	}{{"default", 0, time.Second}, {"3s", 3 * time.Second, 3 * time.Second}, {"negative", -1, 0}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials atomic.Int32
				var bodyAfter atomic.Int64
				var body atomic.Value
				serve := func(s net.Conn) {
					defer s.Close()
					br := bufio.NewReader(s)
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					head := time.Now()
					b, _ := io.ReadAll(req.Body)
					bodyAfter.Store(int64(time.Since(head)))
					body.Store(string(b))
					io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				}
				tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, ExpectContinueTimeout: c.limit, DialContext: pipeDialer(&dials, serve)})
				defer tr.CloseIdleConnections()
				req, _ := http.NewRequest("POST", "http://expect.test/", strings.NewReader("payload"))
				req.Header.Set("Expect", "100-continue")
				code, _, err := roundTrip(tr, req)
				if err != nil || code != 200 {
					t.Fatalf("POST: %d %v", code, err)
				}
				if got := time.Duration(bodyAfter.Load()); got != c.want || body.Load() != "payload" {
					t.Errorf("body %q came %v after the header, want after %v", body.Load(), got, c.want)
				}
			})
		})
	}
}

// TestDisableKeepAlives: every request says "Connection: close" and gets
// a connection of its own; none stays idle.
func TestDisableKeepAlives(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{DisableKeepAlives: true})
	for _, p := range []string{"/a", "/b", "/c"} {
		get(t, tr, s, p)
		if got := wantCopies(t, s, p, 1); got[0].Header.Get("Connection") != "close" {
			t.Errorf("%s sent Connection %q", p, got[0].Header.Get("Connection"))
		}
	}
	if n := s.Conns(); n != 3 {
		t.Errorf("%d connections for 3 requests, want 3", n)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections", n)
	}
}

// TestMaxIdleConns: with MaxIdleConns 2, three hosts' connections go
// idle in turn and the one idle the longest (the first host's) closes:
// the next calls to the others reuse theirs, and one to the first dials
// again.
func TestMaxIdleConns(t *testing.T) {
	servers := []*replaysafetest.Server{start(t, replaysafetest.Config{}), start(t, replaysafetest.Config{}), start(t, replaysafetest.Config{})}
	tr, _ := client(t, servers[0], replaysafe.Options{MaxIdleConns: 2})
	for _, s := range servers {
		get(t, tr, s, "/first")
	}
	if n := tr.IdleConns(); n != 2 {
		t.Errorf("%d idle connections, want 2", n)
	}
	for _, i := range []int{1, 2, 0} {
		get(t, tr, servers[i], "/again")
	}
	for i, want := range []int{2, 1, 1} {
		if n := servers[i].Conns(); n != want {
			t.Errorf("host %d: %d connections, want %d", i, n, want)
		}
	}
}

// TestDialTLSContext: DialTLSContext makes the https connection, once;
// replaysafe does no TLS over it, and the connection is reused.
func TestDialTLSContext(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	var calls atomic.Int32
	cfg := s.ClientTLSConfig()
	tr, _ := client(t, s, replaysafe.Options{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		calls.Add(1)
		return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
	}})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b")
	if n, c := calls.Load(), s.Conns(); n != 1 || c != 1 {
		t.Errorf("%d DialTLSContext calls, %d connections, want 1 and 1", n, c)
	}
}

// TestProxyConnectHeaders: ProxyConnectHeader goes with every CONNECT;
// GetProxyConnectHeader replaces it, asked with the proxy and the
// target, and its error refuses the call before anything is dialed.
// OnProxyConnectResponse sees the proxy's 200, and its error fails the
// acquisition (RS04), the origin receiving nothing.
func TestProxyConnectHeaders(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{})
	pu := mustURL(t, p.URL())
	via := func(o replaysafe.Options) replaysafe.Options {
		o.Proxy = func(*http.Request) (*url.URL, error) { return pu, nil }
		return o
	}
	tr, _ := client(t, s, via(replaysafe.Options{ProxyConnectHeader: http.Header{"X-Static": {"1"}}}))
	get(t, tr, s, "/static")
	var asked atomic.Value
	tr2, _ := client(t, s, via(replaysafe.Options{
		ProxyConnectHeader: http.Header{"X-Static": {"ignored"}},
		GetProxyConnectHeader: func(_ context.Context, u *url.URL, target string) (http.Header, error) {
			asked.Store(u.Host + " " + target)
			return http.Header{"X-Dynamic": {target}}, nil
		},
	}))
	get(t, tr2, s, "/dynamic")
	reqs := p.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("X-Static") != "1" || reqs[1].Header.Get("X-Dynamic") != s.Addr() || reqs[1].Header.Get("X-Static") != "" {
		t.Errorf("CONNECTs %+v", reqs)
	}
	if got := asked.Load(); got != pu.Host+" "+s.Addr() {
		t.Errorf("GetProxyConnectHeader asked for %v", got)
	}

	boom := errors.New("no header today")
	tr3, _ := client(t, s, via(replaysafe.Options{GetProxyConnectHeader: func(context.Context, *url.URL, string) (http.Header, error) { return nil, boom }}))
	_, _, err := roundTrip(tr3, newRequest(t, t.Context(), "GET", s.URL()+"/refused", ""))
	var pe *replaysafe.ProxyError
	if !errors.As(err, &pe) || pe.Hop != 1 || !errors.Is(err, boom) || p.Conns() != 2 {
		t.Errorf("error %v with %d proxy connections, want a ProxyError for hop 1 wrapping the callback's, nothing dialed", err, p.Conns())
	}

	var seen atomic.Value
	deny := errors.New("not this proxy")
	tr4, _ := client(t, s, via(replaysafe.Options{OnProxyConnectResponse: func(_ context.Context, u *url.URL, req *http.Request, resp *http.Response) error {
		seen.Store(u.Host + " " + req.Method + " " + req.Host + " " + resp.Status)
		return deny
	}}))
	_, _, err = roundTrip(tr4, newRequest(t, t.Context(), "GET", s.URL()+"/denied", ""))
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	if !errors.Is(err, deny) {
		t.Errorf("error %v does not wrap the callback's", err)
	}
	if got := seen.Load(); got != pu.Host+" CONNECT "+s.Addr()+" 200 Connection established" {
		t.Errorf("OnProxyConnectResponse saw %v", got)
	}
	wantCopies(t, s, "/denied", 0)
}

// TestProxyFromEnvironmentByDefault: the zero Options read HTTP_PROXY
// and NO_PROXY, as net/http's DefaultTransport does, unless
// IgnoreProxyEnvironment. The environment is read once per process, so
// the check runs in a child process of the test binary with the
// variables set; its dialer sends the test's host names to loopback
// (loopback addresses themselves are never proxied).
func TestProxyFromEnvironmentByDefault(t *testing.T) {
	if os.Getenv("REPLAYSAFE_ENV_PROXY_CHILD") == "1" {
		envProxyChild(t)
		return
	}
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{Forward: true})
	_, port, _ := net.SplitHostPort(s.Addr())
	inChild(t, "TestProxyFromEnvironmentByDefault", "REPLAYSAFE_ENV_PROXY_CHILD=1", "CHILD_PORT="+port,
		"HTTP_PROXY="+p.URL(), "http_proxy=", "NO_PROXY=direct.test", "no_proxy=")
	if reqs := p.Requests(); len(reqs) != 1 || reqs[0].Target != "http://origin.test:"+port+"/via-env" {
		t.Errorf("proxy saw %+v, want the one call NO_PROXY does not name, in absolute form", reqs)
	}
	wantCopies(t, s, "/via-env", 0) // the test proxy reaches loopback only
	wantCopies(t, s, "/no-proxy", 1)
	wantCopies(t, s, "/ignored", 1)
}

// envProxyChild runs in the child: a call through the proxy HTTP_PROXY
// names (which answers it: it reaches no origin.test), a call NO_PROXY
// sends direct, and one IgnoreProxyEnvironment sends direct.
func envProxyChild(t *testing.T) {
	port := os.Getenv("CHILD_PORT")
	loopback := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".test") {
			addr = "127.0.0.1:" + port
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr := replaysafe.New(replaysafe.Options{DialContext: loopback})
	defer tr.CloseIdleConnections()
	if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", "http://origin.test:"+port+"/via-env", "")); err != nil {
		t.Errorf("GET through the environment's proxy: %v", err)
	}
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", "http://direct.test:"+port+"/no-proxy", "")); err != nil || code != 200 {
		t.Errorf("GET NO_PROXY names: %d %v", code, err)
	}
	tr2 := replaysafe.New(replaysafe.Options{DialContext: loopback, IgnoreProxyEnvironment: true})
	defer tr2.CloseIdleConnections()
	if code, _, err := roundTrip(tr2, newRequest(t, t.Context(), "GET", "http://origin.test:"+port+"/ignored", "")); err != nil || code != 200 {
		t.Errorf("GET ignoring the environment: %d %v", code, err)
	}
}

// TestClone: a clone has the same options and pools of its own.
func TestClone(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/a")
	c := tr.Clone()
	defer c.CloseIdleConnections()
	get(t, c, s, "/b")
	get(t, tr, s, "/c")
	if n := s.Conns(); n != 2 {
		t.Errorf("%d connections, want 2: one per Transport", n)
	}
}

// TestCloneKeepsOptions: a clone of a Transport with keep-alives off
// keeps them off: each of its requests says "Connection: close" on a
// connection of its own.
func TestCloneKeepsOptions(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{DisableKeepAlives: true})
	c := tr.Clone()
	defer c.CloseIdleConnections()
	get(t, c, s, "/a")
	get(t, c, s, "/b")
	for _, p := range []string{"/a", "/b"} {
		if got := wantCopies(t, s, p, 1); got[0].Header.Get("Connection") != "close" {
			t.Errorf("%s sent Connection %q", p, got[0].Header.Get("Connection"))
		}
	}
	if n := s.Conns(); n != 2 {
		t.Errorf("%d connections for 2 requests, want 2", n)
	}
}

// TestFromTransport: each http.Transport field with a counterpart keeps
// its meaning: net/http's zero durations and MaxIdleConns (no limit, no
// wait) become negative, a nil Proxy ignores the environment, and the
// protocol policy is net/http's choice (HTTP/2 by ALPN for
// DefaultTransport, which forces it; HTTP/1.1 for a custom dialer that
// does not; Protocols when set).
func TestFromTransport(t *testing.T) {
	def := replaysafe.FromTransport(http.DefaultTransport.(*http.Transport))
	if def.Protocol != replaysafe.ProtocolNegotiate || def.Proxy == nil || def.IgnoreProxyEnvironment ||
		def.TLSHandshakeTimeout != 10*time.Second || def.IdleConnTimeout != 90*time.Second || def.MaxIdleConns != 100 ||
		def.ExpectContinueTimeout != time.Second || def.DialContext == nil {
		t.Errorf("DefaultTransport: %+v", def)
	}
	zero := replaysafe.FromTransport(&http.Transport{})
	if zero.Protocol != replaysafe.ProtocolNegotiate || zero.Proxy != nil || !zero.IgnoreProxyEnvironment ||
		zero.TLSHandshakeTimeout != -1 || zero.IdleConnTimeout != -1 || zero.MaxIdleConns != -1 || zero.ExpectContinueTimeout != -1 {
		t.Errorf("zero Transport: %+v", zero)
	}
	var dialed, dialedTLS bool
	custom := &http.Transport{
		//lint:ignore SA1019 FromTransport takes the deprecated dialers too
		Dial: func(string, string) (net.Conn, error) { dialed = true; return nil, errors.New("x") },
		//lint:ignore SA1019 as above
		DialTLS:                func(string, string) (net.Conn, error) { dialedTLS = true; return nil, errors.New("x") },
		TLSClientConfig:        &tls.Config{ServerName: "s"},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxIdleConns:           7,
		MaxIdleConnsPerHost:    3,
		MaxConnsPerHost:        9,
		ResponseHeaderTimeout:  time.Minute,
		ProxyConnectHeader:     http.Header{"X": {"1"}},
		MaxResponseHeaderBytes: 1 << 16,
	}
	o := replaysafe.FromTransport(custom)
	o.DialContext(t.Context(), "tcp", "a:1")
	o.DialTLSContext(t.Context(), "tcp", "a:1")
	if o.Protocol != replaysafe.ProtocolHTTP1 || !dialed || !dialedTLS || o.TLSClientConfig == custom.TLSClientConfig || o.TLSClientConfig.ServerName != "s" ||
		!o.DisableKeepAlives || !o.DisableCompression || o.MaxIdleConns != 7 || o.MaxIdleConnsPerHost != 3 || o.MaxConnsPerHost != 9 ||
		o.ResponseHeaderTimeout != time.Minute || o.ProxyConnectHeader.Get("X") != "1" || o.MaxResponseHeaderBytes != 1<<16 {
		t.Errorf("custom Transport: %+v", o)
	}
	custom.ForceAttemptHTTP2 = true
	if p := replaysafe.FromTransport(custom).Protocol; p != replaysafe.ProtocolNegotiate {
		t.Errorf("ForceAttemptHTTP2: %v", p)
	}
	// An empty TLSNextProto turns HTTP/2 off, ForceAttemptHTTP2 or not;
	// one with an "h2" entry keeps it (on replaysafe's own connection).
	custom.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if p := replaysafe.FromTransport(custom).Protocol; p != replaysafe.ProtocolHTTP1 {
		t.Errorf("empty TLSNextProto: %v", p)
	}
	custom.TLSNextProto["h2"] = func(string, *tls.Conn) http.RoundTripper { return nil }
	if p := replaysafe.FromTransport(custom).Protocol; p != replaysafe.ProtocolNegotiate {
		t.Errorf("TLSNextProto with h2: %v", p)
	}
	for _, c := range []struct {
		set  func(*http.Protocols)
		want replaysafe.Protocol
	}{
		{func(p *http.Protocols) { p.SetHTTP1(true) }, replaysafe.ProtocolHTTP1},
		{func(p *http.Protocols) { p.SetHTTP2(true) }, replaysafe.ProtocolHTTP2},
		{func(p *http.Protocols) { p.SetHTTP1(true); p.SetHTTP2(true) }, replaysafe.ProtocolNegotiate},
		// net/http speaks h2c only without HTTP/1.
		{func(p *http.Protocols) { p.SetHTTP1(true); p.SetUnencryptedHTTP2(true) }, replaysafe.ProtocolHTTP1},
		{func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }, replaysafe.ProtocolHTTP2},
	} {
		var p http.Protocols
		c.set(&p)
		if got := replaysafe.FromTransport(&http.Transport{Protocols: &p}).Protocol; got != c.want {
			t.Errorf("Protocols %v: %v, want %v", p, got, c.want)
		}
	}
}

// TestClientTimeoutError: when http.Client.Timeout passes, net/http
// replaces the transport's error with one of its own that keeps only the
// text ("Client.Timeout exceeded"), unless the transport's error reached
// it first: errors.As may find no *replaysafe.Error in what Client.Do
// returns. The Observer's OnError always receives it (the documented
// way), naming the rule: RS06 for the deadline, or RS05 for the request's
// Cancel channel that net/http closes for a RoundTripper it does not
// know. With the request's context deadline instead, the *Error always
// comes back through Client.Do. The server never answers; it sees each
// request once.
func TestClientTimeoutError(t *testing.T) {
	hang := replaysafetest.Script(replaysafetest.Hang(5 * time.Second))
	s := start(t, replaysafetest.Config{Default: &hang})
	var seen atomic.Value
	tr, _ := client(t, s, replaysafe.Options{})
	tr2 := replaysafe.New(replaysafe.Options{TLSClientConfig: s.ClientTLSConfig(), Observer: replaysafe.Observer{
		OnError: func(_ *http.Request, err error) { seen.Store(err) },
	}})
	defer tr2.CloseIdleConnections()

	c := &http.Client{Transport: tr2, Timeout: 100 * time.Millisecond}
	_, err := c.Get(s.URL() + "/client-timeout")
	var rerr *replaysafe.Error
	if err == nil || !errors.As(err, &rerr) && !strings.Contains(err.Error(), "Client.Timeout exceeded") {
		t.Fatalf("Client.Timeout: %v, want the *Error or net/http's flat timeout error", err)
	}
	got, _ := seen.Load().(error)
	if !errors.As(got, &rerr) || rerr.Rule != fsm.RuleTimeout && rerr.Rule != fsm.RuleCanceled || rerr.Attempts != 1 {
		t.Errorf("OnError saw %v, want the call's *Error (RS05 or RS06, 1 attempt)", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/ctx-timeout", nil)
	_, err = (&http.Client{Transport: tr}).Do(req)
	if !errors.As(err, &rerr) || rerr.Rule != fsm.RuleTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("request deadline: %v, want an *Error by RS06 that is context.DeadlineExceeded", err)
	}
	wantCopies(t, s, "/client-timeout", 1)
	wantCopies(t, s, "/ctx-timeout", 1)
}

// TestCancelChannelWatchReleased: a request with the deprecated Cancel
// channel (http.Client sets one under Timeout for a RoundTripper it does
// not know) is watched by replaysafe until its call is over; a channel
// never closed, on a context that never ends, leaves no goroutine behind
// once each response body is read, nor after a failed call.
func TestCancelChannelWatchReleased(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 20 {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", s.URL()+"/call", nil)
		//lint:ignore SA1019 the deprecated field, as http.Client sets it
		req.Cancel = make(chan struct{})
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://127.0.0.1:1/refused", nil)
	//lint:ignore SA1019 as above
	req.Cancel = make(chan struct{})
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	wantCopies(t, s, "/call", 20)
}
