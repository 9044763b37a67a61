package replaysafe_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// processed returns the streams for path the server ran its action for:
// neither refused before its SETTINGS were acknowledged nor ignored above
// a GOAWAY's last stream ID.
func processed(s *h2server.Server, path string) []h2server.Received {
	var out []h2server.Received
	for _, r := range h2Copies(s, path) {
		if !r.PrereadRefused && !r.Ignored {
			out = append(out, r)
		}
	}
	return out
}

// TestH2PrereadRefusalDelivered: a server that refuses a request body
// arriving before the client acknowledged its SETTINGS (nginx with a
// small http2_body_preread_size) refuses the first POST of every new
// connection. The resend runs on the same connection, whose SETTINGS are
// acknowledged by then, and is delivered: 30 of 30, one connection each,
// the origin processing one copy, byte-identical to what was sent.
func TestH2PrereadRefusalDelivered(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		s := startH2(t, h2server.Config{TLS: useTLS, RefuseBodyBeforeSettingsAck: true})
		for i := range 30 {
			tr, obs := h2Client(t, s, replaysafe.Options{})
			path := fmt.Sprintf("/p%d", i)
			body := strings.Repeat("x", 2048)
			code, got, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+path, body))
			tr.CloseIdleConnections()
			if err != nil || code != 200 || got != "ok" {
				t.Fatalf("run %d: %d %q %v", i, code, got, err)
			}
			all := h2Copies(s, path)
			if len(all) > 2 {
				t.Fatalf("run %d: %d copies arrived", i, len(all))
			}
			ok := processed(s, path)
			if len(ok) != 1 || string(ok[0].Body) != body {
				t.Fatalf("run %d: processed %d copies (%+v)", i, len(ok), all)
			}
			if all[0].Conn != ok[0].Conn {
				t.Errorf("run %d: resend on connection %d, the refusal on %d", i, ok[0].Conn, all[0].Conn)
			}
			if as := obs.attemptsFor(path); len(all) == 2 && (len(as) != 2 || as[0].Decision.Rule != fsm.RuleEvidenceRefusedStream) {
				t.Errorf("run %d: attempts %v", i, as)
			}
		}
		if n := len(s.Conns()); n != 30 {
			t.Errorf("%d connections for 30 calls, want 30", n)
		}
	})
}

// burst runs n concurrent GETs of /b<i> through rt and returns the errors.
func burst(t *testing.T, rt http.RoundTripper, url string, n int) []error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req := newRequest(t, t.Context(), "GET", fmt.Sprintf("%s/b%d", url, i), "")
			code, body, err := roundTrip(rt, req)
			if err == nil && (code != 200 || body != "ok") {
				err = fmt.Errorf("status %d body %q", code, body)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// TestH2GoAwayBurstConnections: a server that serves 10 streams per
// connection and then sends a graceful GOAWAY (nginx keepalive_requests
// 10) gets a burst of 64 GETs. The displaced requests share new
// connections, up to what the server showed it serves on one, instead of
// each dialing: replaysafe opens no more connections than net/http's
// Transport against the same server, delivers all 64 and the origin
// processes each exactly once.
func TestH2GoAwayBurstConnections(t *testing.T) {
	const n = 64
	cfg := h2server.Config{TLS: true, MaxRequestsPerConn: 10}

	peer := startH2(t, cfg)
	std := &http.Transport{TLSClientConfig: peer.ClientTLSConfig(), ForceAttemptHTTP2: true}
	t.Cleanup(std.CloseIdleConnections)
	peerErrs := burst(t, std, peer.URL(), n)
	peerConns := len(peer.Conns())

	s := startH2(t, cfg)
	tr, _ := h2Client(t, s, replaysafe.Options{})
	errs := burst(t, tr, s.URL(), n)
	conns := len(s.Conns())

	failed, peerFailed := 0, 0
	for i := range n {
		if errs[i] != nil {
			failed++
			t.Logf("replaysafe /b%d: %v", i, errs[i])
		}
		if peerErrs[i] != nil {
			peerFailed++
		}
		if got := len(processed(s, fmt.Sprintf("/b%d", i))); got != 1 {
			t.Errorf("/b%d processed %d times", i, got)
		}
		if all := len(h2Copies(s, fmt.Sprintf("/b%d", i))); all > 2 {
			t.Errorf("/b%d arrived %d times", i, all)
		}
	}
	t.Logf("connections: replaysafe %d, net/http %d; failures: replaysafe %d, net/http %d", conns, peerConns, failed, peerFailed)
	if failed != 0 {
		t.Errorf("%d of %d failed", failed, n)
	}
	if conns > peerConns {
		t.Errorf("replaysafe opened %d connections, net/http %d", conns, peerConns)
	}
}

// connGauge counts a test server's open connections and their peak.
type connGauge struct {
	open, peak, total atomic.Int64
}

func (g *connGauge) state(_ any, st http.ConnState) {
	switch st {
	case http.StateNew:
		g.total.Add(1)
		n := g.open.Add(1)
		for {
			p := g.peak.Load()
			if n <= p || g.peak.CompareAndSwap(p, n) {
				break
			}
		}
	case http.StateClosed, http.StateHijacked:
		g.open.Add(-1)
	}
}

// dial is a DialContext that counts the connections the client holds
// open: from the dial until their Close.
func (g *connGauge) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.state(nil, http.StateNew)
	return &gaugedConn{Conn: c, g: g}, nil
}

type gaugedConn struct {
	net.Conn
	g    *connGauge
	once sync.Once
}

func (c *gaugedConn) Close() error {
	c.once.Do(func() { c.g.state(nil, http.StateClosed) })
	return c.Conn.Close()
}

// slowServer starts a net/http server whose handler takes 5 ms, over TLS
// with HTTP/2 (one stream per connection) or HTTP/1.1, counting each
// path's receipts and the open connections.
func slowServer(t *testing.T, h2 bool) (*httptest.Server, *connGauge, *sync.Map) {
	t.Helper()
	g := &connGauge{}
	var seen sync.Map // path → *atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := seen.LoadOrStore(r.URL.Path, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) { g.state(c, st) }
	if h2 {
		srv.EnableHTTP2 = true
		srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, g, &seen
}

// TestMaxConnsPerHost: 32 concurrent calls against a route limited to 4
// connections never find more than 4 open at the server, HTTP/1.1 and
// HTTP/2 alike (the HTTP/2 server takes one stream per connection, so
// without the limit the burst would open a connection per call), and
// every call is delivered with one copy.
func TestMaxConnsPerHost(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			srv, g, seen := slowServer(t, h2)
			cg := &connGauge{}
			o := replaysafe.Options{MaxConnsPerHost: 4, DialContext: cg.dial}
			if h2 {
				o.Protocol = replaysafe.ProtocolHTTP2
				o.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
			}
			tr := replaysafe.New(o)
			t.Cleanup(tr.CloseIdleConnections)
			errs := burst(t, tr, srv.URL, 32)
			for i, err := range errs {
				if err != nil {
					t.Errorf("/b%d: %v", i, err)
				}
				v, ok := seen.Load(fmt.Sprintf("/b%d", i))
				if !ok || v.(*atomic.Int64).Load() != 1 {
					t.Errorf("/b%d not received exactly once", i)
				}
			}
			if p := cg.peak.Load(); p > 4 {
				t.Errorf("peak %d open connections at the client, limit 4", p)
			}
			t.Logf("client: %d dials, peak %d open; server: %d connections, peak %d open",
				cg.total.Load(), cg.peak.Load(), g.total.Load(), g.peak.Load())
			if h2 && g.total.Load() < 2 {
				t.Errorf("%d connections: the test did not need more than one", g.total.Load())
			}
			if n := tr.IdleConns(); n > replaysafe.DefaultMaxIdleConnsPerHost {
				t.Errorf("%d idle connections, cap %d", n, replaysafe.DefaultMaxIdleConnsPerHost)
			}
		})
	}
}

// TestH2IdleCap: a burst that needs 16 HTTP/2 connections (one stream
// each) leaves at most MaxIdleConnsPerHost of them open once it is over,
// and CloseIdleConnections closes those.
func TestH2IdleCap(t *testing.T) {
	srv, g, _ := slowServer(t, true)
	tr := replaysafe.New(replaysafe.Options{
		Protocol:            replaysafe.ProtocolHTTP2,
		MaxIdleConnsPerHost: 3,
		TLSClientConfig:     &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
	})
	for i, err := range burst(t, tr, srv.URL, 16) {
		if err != nil {
			t.Errorf("/b%d: %v", i, err)
		}
	}
	if g.total.Load() < 4 {
		t.Fatalf("%d connections: the burst did not need more than the cap", g.total.Load())
	}
	if n := tr.IdleConns(); n > 3 {
		t.Errorf("%d idle connections, cap 3", n)
	}
	waitFor(t, func() bool { return g.open.Load() <= 3 }, "server sees ≤ 3 open connections")
	tr.CloseIdleConnections()
	waitFor(t, func() bool { return g.open.Load() == 0 }, "server sees no open connection")
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

// TestH2ResendAfterConnectionLossShares: four GETs share a reused
// connection that the server then closes under them (an ambiguous
// failure, RS20). The resends wait on one new dial and share the new
// connection, as after a GOAWAY (spec/choices.md, choice 23): every GET
// is delivered, processed twice at most, and one new connection carries
// all four resends.
func TestH2ResendAfterConnectionLossShares(t *testing.T) {
	hang := h2server.Hang(5 * time.Second)
	s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), hang, hang, hang, h2server.CloseConn()}))
	tr, obs := h2Client(t, s, replaysafe.Options{})
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if errs := burst(t, tr, s.URL(), 4); errs[0] != nil || errs[1] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v", errs)
	}
	for i := range 4 {
		path := fmt.Sprintf("/b%d", i)
		cs := h2Copies(s, path)
		if len(cs) != 2 || cs[0].Conn != 0 || cs[1].Conn == 0 {
			t.Errorf("%s: copies %+v", path, cs)
		}
		if as := obs.attemptsFor(path); len(as) != 2 || as[0].Decision.Rule != fsm.RuleAmbiguousIdempotentResend {
			t.Errorf("%s: attempts %v", path, as)
		}
	}
	if n := len(s.Conns()); n != 2 {
		t.Errorf("%d connections, want 2 (one shared by the resends)", n)
	}
	if n := len(s.RequestsOn(1)); n != 4 {
		t.Errorf("the new connection carried %d streams, want 4", n)
	}
}

// TestH2StreamsPerConnBounded: a server that allows 2³¹−1 concurrent
// streams gets 1,200 GETs at once, and holds every one until all have
// arrived. replaysafe runs at most h2.DefaultMaxConcurrentStreams (1,000) of
// them on one connection and opens a second for the rest, so that the
// Wire watching each connection keeps the record of every running
// stream (it keeps 4,096, and would forget a running stream's evidence
// beyond that). Every GET is answered after one attempt, the server got
// one copy of each, and no connection was dialed beyond the two needed.
func TestH2StreamsPerConnBounded(t *testing.T) {
	const n, limit = 1200, h2.DefaultMaxConcurrentStreams
	var (
		mu      sync.Mutex
		running = map[string]int{} // by connection (remote address)
		peak    int
		arrived atomic.Int64
		seen    sync.Map // path → *atomic.Int64
	)
	all := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := seen.LoadOrStore(r.URL.Path, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		mu.Lock()
		running[r.RemoteAddr]++
		peak = max(peak, running[r.RemoteAddr])
		mu.Unlock()
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		running[r.RemoteAddr]--
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1<<31 - 1}
	g := &connGauge{}
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) { g.state(c, st) }
	srv.StartTLS()
	t.Cleanup(srv.Close)
	obs := &observed{}
	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolHTTP2,
		TLSClientConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
		Observer:        obs.observer(),
	})
	t.Cleanup(tr.CloseIdleConnections)
	for i, err := range burst(t, tr, srv.URL, n) {
		if err != nil {
			t.Fatalf("/b%d: %v", i, err)
		}
		if v, ok := seen.Load(fmt.Sprintf("/b%d", i)); !ok || v.(*atomic.Int64).Load() != 1 {
			t.Fatalf("/b%d not received exactly once", i)
		}
	}
	if len(obs.attempts) != n {
		t.Errorf("%d attempts for %d calls", len(obs.attempts), n)
	}
	if peak > limit {
		t.Errorf("%d streams at once on one connection, bound %d", peak, limit)
	}
	if got, want := g.total.Load(), int64((n+limit-1)/limit); got != want {
		t.Errorf("%d connections for %d streams, want %d", got, n, want)
	}
	t.Logf("%d GETs: %d connections, at most %d streams at once on one", n, g.total.Load(), peak)
}

// stalledH2 is an h2c server whose first connection grants one stream
// and windows of 2 GiB, reads the first request's HEADERS, closes saw,
// and then reads nothing more until the test ends: the client's upload
// fills the socket and x/net's write blocks, holding its connection
// write lock. Later connections to it are accepted and never answered.
func stalledH2(t *testing.T) (url string, saw <-chan struct{}, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	headers := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	release = func() { once.Do(func() { close(stop); ln.Close(); wg.Wait() }) }
	t.Cleanup(release)
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				go func() { <-stop; c.Close() }()
				if !first {
					<-stop
					return
				}
				if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1},
					http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
				fr.WriteWindowUpdate(0, 1<<31-1-65535)
				for range 100 {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							fr.WriteSettingsAck()
						}
					case *http2.HeadersFrame:
						close(headers)
						<-stop
						return
					}
				}
			})
		}
	})
	return "http://" + ln.Addr().String(), headers, release
}

// countingZeros is an endless body of zeros that counts what was read.
type countingZeros struct{ n atomic.Int64 }

func (z *countingZeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// TestH2StalledUploadFreezesNothing: a server that stops reading while a
// POST uploads blocks the connection's socket write. Nothing else of the
// Transport waits for it: a GET to the stalled host, its stream queued
// behind the blocked write, ends with its context's deadline; a GET to a
// healthy host made meanwhile answers; CloseIdleConnections returns.
// (On x/net's ClientConn, the pool once asked the stalled connection for
// its state, which took its write lock, while holding the pool's lock,
// and every HTTP/2 call to any host waited behind the stalled write.)
func TestH2StalledUploadFreezesNothing(t *testing.T) {
	stalled, saw, release := stalledH2(t)
	healthy := h2cServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2})
	t.Cleanup(tr.CloseIdleConnections)
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", healthy+"/warm", "")); err != nil || code != 200 {
		t.Fatalf("warm-up: %d %v", code, err) // a pooled connection to the healthy host
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer release() // unblocks whatever still waits, before wg.Wait
	upload := &countingZeros{}
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", stalled+"/big", io.LimitReader(upload, 1<<30))
		req.ContentLength = 1 << 30
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	})
	<-saw
	for last, still := int64(-1), 0; still < 5; { // the upload stopped moving for 5 × 20 ms
		time.Sleep(20 * time.Millisecond)
		n := upload.n.Load()
		if n >= 1<<30 {
			t.Fatal("the whole upload went through a server that reads nothing")
		}
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
	}

	// returns runs f and fails the test when it has not returned after
	// a minute: the stalled server never reads again until the test ends,
	// so a call that waits for it never returns, and one that returns at
	// all has passed. When f does not return, release at the end of the
	// test lets it.
	returns := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		wg.Go(func() { defer close(done); f() })
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("%s still waiting after a minute", what)
		}
	}
	stalledGET := make(chan struct{})
	// The GET to the stalled host ends only when the test cancels it,
	// after the healthy host has answered: so the healthy GET ran while
	// the stalled one was still waiting.
	stalledCtx, cancelStalled := context.WithCancel(t.Context())
	defer cancelStalled()
	onConn := make(chan struct{}) // the GET to the stalled host has its stream there
	wg.Go(func() {
		defer close(stalledGET)
		ctx := httptrace.WithClientTrace(stalledCtx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { close(onConn) }})
		_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", stalled+"/second", ""))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("GET to the stalled host: %v, want its cancellation's error", err)
		}
	})
	select { // the GET to the stalled host waits on the stalled connection
	case <-onConn:
	case <-stalledGET:
		t.Fatal("the GET to the stalled host ended before it had a connection")
	}
	returns("GET to the healthy host", func() {
		if code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", healthy+"/ok", "")); err != nil || code != 200 || body != "ok" {
			t.Errorf("healthy host: %d %q %v", code, body, err)
		}
	})
	returns("CloseIdleConnections", tr.CloseIdleConnections)
	select {
	case <-stalledGET:
		t.Fatal("the GET to the stalled host ended before the test canceled it: the healthy GET was not shown to pass it")
	default:
	}
	cancelStalled()
	returns("GET to the stalled host", func() { <-stalledGET })
}
