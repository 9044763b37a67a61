package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// h2Proxy starts the test kit's proxy in its HTTP/2 mode.
func h2Proxy(t *testing.T, cfg connectproxy.Config) *connectproxy.Server {
	t.Helper()
	cfg.TLS = true
	if cfg.ALPN == nil {
		cfg.ALPN = []string{"h2", "http/1.1"}
	}
	return startProxy(t, cfg)
}

// RFC 9113 §8.5: tunnels through an HTTPS proxy that picks h2 are
// streams of one connection, whatever their targets.
func TestH2TunnelsShareOneProxyConnection(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{})
	origins := []*listener{startEcho(t), startEcho(t)}
	pool := &H2Pool{}
	d := &Dialer{H2: pool}
	const n = 20
	hop := hopTo(p, nil, "") // one TLS configuration: one pool key
	conns := make([]net.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conns[i], errs[i] = DialChain(t.Context(), d, []Hop{hop}, origins[i%2].addr(), budget(ample))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		defer conns[i].Close()
	}
	for i, c := range conns {
		echoRoundTrip(t, c, "tunnel "+string(rune('a'+i)))
	}
	if p.Conns() != 1 || p.H2Conns() != 1 || pool.Conns() != 1 {
		t.Errorf("proxy accepted %d connections (%d HTTP/2), pool holds %d; want 1", p.Conns(), p.H2Conns(), pool.Conns())
	}
	if got := p.TunnelsPerConn(); got[0] != n || len(got) != 1 {
		t.Errorf("tunnels per proxy connection = %v; want %d on connection 0", got, n)
	}
	for _, r := range p.Requests() {
		if r.Proto != "HTTP/2.0" || r.Method != http.MethodConnect || !slices.Equal(r.ALPN, []string{"h2", "http/1.1"}) {
			t.Fatalf("proxy read %+v; want HTTP/2 CONNECT after an offer of h2, http/1.1", r)
		}
	}
	for i, o := range origins {
		if o.conns() != n/2 {
			t.Errorf("origin %d accepted %d connections, want %d", i, o.conns(), n/2)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if pool.Conns() != 0 {
		t.Errorf("pool holds %d connections after every tunnel closed, want 0", pool.Conns())
	}
}

// A proxy that picks HTTP/1.1 gets the HTTP/1.1 CONNECT, one connection
// per tunnel, as without H2.
func TestH2PoolFallsBackToHTTP1(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{ALPN: []string{"http/1.1"}})
	e := startEcho(t)
	pool := &H2Pool{}
	d := &Dialer{H2: pool}
	for i := range 3 {
		c, err := DialChain(t.Context(), d, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echoRoundTrip(t, c, "h1 "+string(rune('0'+i)))
	}
	if p.Conns() != 3 || p.H2Conns() != 0 || pool.Conns() != 0 {
		t.Errorf("proxy conns=%d h2=%d pool=%d; want 3, 0, 0", p.Conns(), p.H2Conns(), pool.Conns())
	}
	for _, r := range p.Requests() {
		if r.Proto != "HTTP/1.1" || !slices.Equal(r.ALPN, []string{"h2", "http/1.1"}) {
			t.Errorf("proxy read %+v; want an HTTP/1.1 CONNECT after an offer of h2, http/1.1", r)
		}
	}
}

// A refusal is a *ConnectError with the challenge; credentials go on the
// stream as Proxy-Authorization.
func TestH2Connect407(t *testing.T) {
	creds := &connectproxy.Credentials{Username: "u", Password: "p"}
	p := h2Proxy(t, connectproxy.Config{RequireAuth: creds})
	e := startEcho(t)
	d := &Dialer{H2: &H2Pool{}}
	_, err := DialChain(t.Context(), d, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusProxyAuthRequired || len(ce.ProxyAuthenticate) != 1 || ce.Hop != 1 {
		t.Fatalf("without credentials: %v; want a 407 ConnectError with its challenge", err)
	}
	c, err := DialChain(t.Context(), d, []Hop{hopTo(p, &Auth{Username: "u", Password: "p"}, "u")}, e.addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoRoundTrip(t, c, "authorized")
	reqs := p.Requests()
	if len(reqs) != 2 || reqs[1].Header.Get("Proxy-Authorization") != basic("u", "p") || reqs[1].Status != 200 || e.conns() != 1 {
		t.Errorf("proxy requests %+v, origin conns %d; want the second authorized and tunneled", reqs, e.conns())
	}
}

// The acquisition budget covers the CONNECT stream: a proxy that never
// answers fails the dial at step connect, hop 1, and no tunnel opens.
func TestH2ConnectDeadline(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{Default: &connectproxy.Script{Stall: connectproxy.StallAfterRequest}})
	e := startEcho(t)
	pool := &H2Pool{}
	_, err := DialChain(t.Context(), &Dialer{H2: pool}, []Hop{hopTo(p, nil, "")}, e.addr(), budget(limit))
	var de *route.DeadlineError
	if !errors.As(err, &de) || de.Step != route.StepConnect || de.Hop != 1 {
		t.Fatalf("DialChain = %v; want a DeadlineError at connect, hop 1", err)
	}
	if len(p.Requests()) != 1 || p.Tunnels() != 0 || e.conns() != 0 || pool.Conns() != 0 {
		t.Errorf("requests=%d tunnels=%d origin conns=%d pool=%d; want 1, 0, 0, 0", len(p.Requests()), p.Tunnels(), e.conns(), pool.Conns())
	}
	// The caller's context bounds it too.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for range 2000 { // bounded wait for the second CONNECT to arrive
			if len(p.Requests()) == 2 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err = DialChain(ctx, &Dialer{H2: pool}, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || se.Step != route.StepConnect {
		t.Fatalf("DialChain canceled = %v; want a StepError at connect wrapping context.Canceled", err)
	}
}

// A tunnel the proxy resets reads as a reset TCP connection.
func TestH2TunnelResetReadsAsConnReset(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{})
	e := startEcho(t)
	c, err := DialChain(t.Context(), &Dialer{H2: &H2Pool{}}, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoRoundTrip(t, c, "before")
	if n := p.ResetTunnels(); n != 1 {
		t.Fatalf("ResetTunnels = %d, want 1", n)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the proxy's reset = %v; want ECONNRESET", err)
	}
}

// An HTTP/2 first hop carries the CONNECT to a second hop in its tunnel.
func TestH2FirstHopOfChain(t *testing.T) {
	p1 := h2Proxy(t, connectproxy.Config{})
	p2 := startProxy(t, connectproxy.Config{})
	e := startEcho(t)
	c, err := DialChain(t.Context(), &Dialer{H2: &H2Pool{}}, []Hop{hopTo(p1, nil, ""), hopTo(p2, nil, "")}, e.addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoRoundTrip(t, c, "two hops")
	r1, r2 := p1.Requests(), p2.Requests()
	if len(r1) != 1 || r1[0].Proto != "HTTP/2.0" || r1[0].Target != p2.Addr() || len(r2) != 1 || r2[0].Target != e.addr() || e.conns() != 1 {
		t.Errorf("hop 1 %+v, hop 2 %+v, origin conns %d", r1, r2, e.conns())
	}
}

// DATA the proxy sends right after its 2xx, before any request, counts
// as early bytes: CheckPlainTunnel refuses the tunnel for a plain-http
// origin.
func TestH2EarlyBytes(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{Default: &connectproxy.Script{Extra: []byte("HTTP/1.1 200 OK\r\n\r\n")}})
	e := startSilent(t)
	c, err := DialChain(t.Context(), &Dialer{H2: &H2Pool{}}, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 1000 { // the DATA frame follows the HEADERS: bounded wait for it
		if EarlyBytes(c) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var ee *EarlyResponseError
	if err := CheckPlainTunnel(c, 1, p.Addr()); !errors.As(err, &ee) || ee.Bytes != len("HTTP/1.1 200 OK\r\n\r\n") {
		t.Fatalf("CheckPlainTunnel = %v; want an EarlyResponseError for the %d bytes", err, len("HTTP/1.1 200 OK\r\n\r\n"))
	}
}

// The proxy connection ending before the CONNECT's 2xx fails the dial at
// step connect, hop 1: no tunnel, nothing reached the origin.
func TestH2ProxyGoneBeforeAnswer(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{Default: &connectproxy.Script{Stall: connectproxy.StallAfterRequest}})
	e := startEcho(t)
	pool := &H2Pool{}
	done := make(chan error, 1)
	go func() {
		c, err := DialChain(t.Context(), &Dialer{H2: pool}, []Hop{hopTo(p, nil, "")}, e.addr(), budget(ample))
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	for range 2000 { // bounded wait for the CONNECT to arrive
		if len(p.Requests()) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Close()
	err := <-done
	var se *StepError
	var de *route.DeadlineError
	if !errors.As(err, &se) || se.Step != route.StepConnect || se.Hop != 1 || errors.As(err, &de) {
		t.Fatalf("DialChain = %v; want a StepError at connect, hop 1, not a deadline", err)
	}
	if len(p.Requests()) != 1 || p.Tunnels() != 0 || e.conns() != 0 || pool.Conns() != 0 {
		t.Errorf("requests=%d tunnels=%d origin conns=%d pool=%d; want 1, 0, 0, 0", len(p.Requests()), p.Tunnels(), e.conns(), pool.Conns())
	}
}

// Once a proxy picked HTTP/1.1, later acquisitions dial in parallel: one
// whose TLS with the proxy stalls holds up no other.
func TestH2PoolRemembersHTTP1Proxy(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{ALPN: []string{"http/1.1"}, Conns: []connectproxy.Script{
		{}, {Stall: connectproxy.StallBeforeHandshake, StallFor: time.Minute},
	}})
	e := startEcho(t)
	pool := &H2Pool{}
	d := &Dialer{H2: pool}
	hop := hopTo(p, nil, "")
	first, err := DialChain(t.Context(), d, []Hop{hop}, e.addr(), budget(ample))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctx, cancel := context.WithCancel(t.Context())
	stalled := make(chan error, 1)
	go func() {
		c, err := DialChain(ctx, d, []Hop{hop}, e.addr(), budget(ample))
		if c != nil {
			c.Close()
		}
		stalled <- err
	}()
	for range 2000 { // bounded wait for the stalled connection's accept
		if p.Conns() == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	third, err := DialChain(t.Context(), d, []Hop{hop}, e.addr(), budget(ample))
	if err != nil {
		t.Fatalf("third dial, beside a stalled one: %v", err)
	}
	defer third.Close()
	echoRoundTrip(t, third, "not held up")
	select {
	case err := <-stalled:
		t.Fatalf("the stalled dial ended first: %v", err)
	default:
	}
	cancel()
	if err := <-stalled; !errors.Is(err, context.Canceled) {
		t.Errorf("stalled dial = %v; want context.Canceled", err)
	}
	if p.Conns() != 3 || p.Tunnels() != 2 || e.conns() != 2 {
		t.Errorf("proxy conns=%d tunnels=%d origin conns=%d; want 3, 2, 2", p.Conns(), p.Tunnels(), e.conns())
	}
}

// The proxy's SETTINGS_MAX_CONCURRENT_STREAMS bounds the tunnels on one
// connection: 10 tunnels through a proxy allowing 4 use three
// connections, none carrying more than 4, every tunnel working.
func TestH2TunnelsBoundedByProxyStreams(t *testing.T) {
	p := h2Proxy(t, connectproxy.Config{H2MaxStreams: 4})
	e := startEcho(t)
	pool := &H2Pool{}
	d := &Dialer{H2: pool}
	hop := hopTo(p, nil, "")
	const n = 10
	conns := make([]net.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conns[i], errs[i] = DialChain(t.Context(), d, []Hop{hop}, e.addr(), budget(ample))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		defer conns[i].Close()
	}
	for i, c := range conns {
		echoRoundTrip(t, c, "bounded "+string(rune('a'+i)))
	}
	per := p.TunnelsPerConn()
	total := 0
	for conn, k := range per {
		if k > 4 {
			t.Errorf("proxy connection %d carried %d tunnels, more than its limit of 4", conn, k)
		}
		total += k
	}
	if total != n || p.H2Conns() != 3 || pool.Conns() != 3 {
		t.Errorf("tunnels per connection %v (total %d), %d HTTP/2 connections, pool holds %d; want %d tunnels on 3", per, total, p.H2Conns(), pool.Conns(), n)
	}
}
