package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
)

// The acquisition deadline under fake time (testing/synctest): every
// step's stall ends at the budget's deadline to the nanosecond, one
// deadline covers every hop, and a canceled context ends the dial the
// instant it is canceled. The proxies, the origin and the network are
// in-memory (net.Pipe), inside the bubble, so that nothing waits on the
// real clock; TestDeadlineNamesStep runs the same steps against the
// scripted proxies over loopback TCP.

// fakeClock reads the bubble's clock, from the instant it was made.
type fakeClock struct{ origin time.Time }

func (c fakeClock) Now() route.Instant { return route.Instant(time.Since(c.origin)) }

// memNet is an in-memory network of handlers, by address: a dial gets
// one end of a net.Pipe, the handler the other, on its own goroutine.
// close ends every stall and connection and waits for the handlers.
type memNet struct {
	mu       sync.Mutex
	handlers map[string]func(net.Conn)
	conns    []net.Conn
	wg       sync.WaitGroup
	done     chan struct{}
}

func newMemNet() *memNet {
	return &memNet{handlers: map[string]func(net.Conn){}, done: make(chan struct{})}
}

// listen serves addr with h.
func (n *memNet) listen(addr string, h func(net.Conn)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handlers[addr] = h
}

func (n *memNet) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.handlers[addr]
	if h == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	client, server := net.Pipe()
	n.conns = append(n.conns, client, server)
	n.wg.Go(func() {
		defer server.Close()
		h(server)
	})
	return client, nil
}

func (n *memNet) close() {
	close(n.done)
	n.mu.Lock()
	for _, c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// stall blocks until the network closes: a peer that never answers.
func (n *memNet) stall() { <-n.done }

// wait waits d on the bubble's clock, or until the network closes.
func (n *memNet) wait(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-n.done:
		return false
	}
}

// stallPoint is where an in-memory proxy stops answering.
type stallPoint uint8

const (
	stallNone stallPoint = iota
	stallBeforeHandshake
	stallAfterHandshake
	stallBeforeRequest
	stallAfterRequest
	stallMidResponse
)

// memProxy is an in-memory CONNECT proxy: TLS when cfg is set, stalling
// at point (for stallFor, or until the network closes), else tunneling to
// the target through the network. It counts the tunnels it opened.
type memProxy struct {
	n        *memNet
	cfg      *tls.Config
	point    stallPoint
	stallFor time.Duration
	tunnels  atomic.Int32
}

func (p *memProxy) pause() bool {
	if p.stallFor > 0 {
		return p.n.wait(p.stallFor)
	}
	p.n.stall()
	return false
}

func (p *memProxy) serve(c net.Conn) {
	if p.point == stallBeforeHandshake || p.point == stallBeforeRequest && p.cfg == nil {
		if !p.pause() {
			return
		}
	}
	if p.cfg != nil {
		tc := tls.Server(c, p.cfg)
		if tc.Handshake() != nil {
			return
		}
		c = tc
		if p.point == stallAfterHandshake || p.point == stallBeforeRequest {
			if !p.pause() {
				return
			}
		}
	}
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	switch p.point {
	case stallAfterRequest:
		if !p.pause() {
			return
		}
	case stallMidResponse:
		io.WriteString(c, "HTTP/1.1 2")
		p.pause()
		return
	}
	up, err := p.n.DialContext(context.Background(), "tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	p.tunnels.Add(1)
	relay(c, br, up)
}

// relay copies both ways until either side ends, then closes both.
func relay(c net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// memSOCKS is an in-memory SOCKS5 server (no authentication) that stalls
// before reading the greeting, or after reading the connect request.
func memSOCKS(n *memNet, point stallPoint) func(net.Conn) {
	return func(c net.Conn) {
		if point == stallBeforeRequest {
			n.stall()
			return
		}
		var greet [2]byte
		if _, err := io.ReadFull(c, greet[:]); err != nil || greet[0] != 5 {
			return
		}
		if _, err := io.ReadFull(c, make([]byte, greet[1])); err != nil {
			return
		}
		if _, err := c.Write([]byte{5, 0}); err != nil {
			return
		}
		var head [4]byte // VER CMD RSV ATYP
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return
		}
		var addrLen int
		switch head[3] {
		case 1:
			addrLen = 4
		case 4:
			addrLen = 16
		case 3:
			var l [1]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			addrLen = int(l[0])
		}
		if _, err := io.ReadFull(c, make([]byte, addrLen+2)); err != nil {
			return
		}
		n.stall() // after the request, before the reply
	}
}

// memSilent accepts and reads, and never answers: an origin that does not
// do TLS.
func memSilent(c net.Conn) { io.Copy(io.Discard, c) }

// memCert returns a server configuration with a certificate for
// 127.0.0.1 valid around the bubble's clock (which starts in 2000), and a
// client configuration that trusts it alone.
func memCert(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "replaysafe synctest proxy"},
		NotBefore:    time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, NextProtos: []string{"http/1.1"}}
	return server, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
}

// memHop is the hop for an in-memory proxy at addr ("10.0.0.n:port").
func memHop(kind route.ProxyKind, addr string, cfg *tls.Config) Hop {
	ap := netip.MustParseAddrPort(addr)
	return Hop{Hop: route.Hop{Kind: kind, Host: ap.Addr().String(), Port: ap.Port()}, HopConfig: HopConfig{TLSConfig: cfg}}
}

// TestDeadlineNamesStepFakeTime: every step that stalls fails with a
// *route.DeadlineError naming it, exactly when the budget runs out: the
// call returns limit after it began on the bubble's clock, and the error
// says limit elapsed, to the nanosecond.
func TestDeadlineNamesStepFakeTime(t *testing.T) {
	serverTLS, clientTLS := memCert(t)
	const limit = 200 * time.Millisecond
	originTLS := &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	type setup struct {
		hops     []Hop
		target   string
		resolver Resolver
		tcp      ContextDialer
		origin   *tls.Config
	}
	proxy := func(n *memNet, addr string, useTLS bool, point stallPoint) Hop {
		p := &memProxy{n: n, point: point}
		kind, cfg := route.ProxyHTTP, (*tls.Config)(nil)
		if useTLS {
			p.cfg, kind, cfg = serverTLS, route.ProxyHTTPS, clientTLS
		}
		n.listen(addr, p.serve)
		return memHop(kind, addr, cfg)
	}
	origin := func(n *memNet) string {
		n.listen("10.0.0.9:443", memSilent)
		return "10.0.0.9:443"
	}
	tests := []struct {
		name  string
		setup func(n *memNet) setup
		step  route.Step
		hop   int
	}{
		{"dns to first proxy", func(n *memNet) setup {
			return setup{resolver: blockingResolver{}, hops: []Hop{{Hop: route.Hop{Kind: route.ProxyHTTP, Host: "proxy.example", Port: 3128}}}, target: "origin.example:443"}
		}, route.StepDNS, 1},
		{"dns to origin", func(n *memNet) setup {
			return setup{resolver: blockingResolver{}, target: "origin.example:443"}
		}, route.StepDNS, 0},
		{"tcp to first proxy", func(n *memNet) setup {
			return setup{tcp: blockingTCP{}, hops: []Hop{memHop(route.ProxyHTTP, "10.0.0.1:3128", nil)}, target: "10.0.0.9:443"}
		}, route.StepTCP, 1},
		{"tcp to origin", func(n *memNet) setup {
			return setup{tcp: blockingTCP{}, target: "10.0.0.9:443"}
		}, route.StepTCP, 0},
		{"tls to proxy 1", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", true, stallBeforeHandshake)}, target: origin(n)}
		}, route.StepProxyTLS, 1},
		{"tls to proxy 2", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", false, stallNone), proxy(n, "10.0.0.2:3128", true, stallBeforeHandshake)}, target: origin(n)}
		}, route.StepProxyTLS, 2},
		{"connect: proxy stalls before reading", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", false, stallBeforeRequest)}, target: origin(n)}
		}, route.StepConnect, 1},
		{"connect: TLS proxy stalls after handshake", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", true, stallAfterHandshake)}, target: origin(n)}
		}, route.StepConnect, 1},
		{"connect: proxy stalls after reading", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", false, stallAfterRequest)}, target: origin(n)}
		}, route.StepConnect, 1},
		{"connect: proxy stalls mid status line", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", false, stallMidResponse)}, target: origin(n)}
		}, route.StepConnect, 1},
		{"connect at hop 2", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", true, stallNone), proxy(n, "10.0.0.2:3128", false, stallAfterRequest)}, target: origin(n)}
		}, route.StepConnect, 2},
		{"socks at hop 1", func(n *memNet) setup {
			n.listen("10.0.0.1:1080", memSOCKS(n, stallBeforeRequest))
			return setup{hops: []Hop{memHop(route.ProxySOCKS5, "10.0.0.1:1080", nil)}, target: origin(n)}
		}, route.StepSOCKS, 1},
		{"socks at hop 2 after reading the request", func(n *memNet) setup {
			n.listen("10.0.0.2:1080", memSOCKS(n, stallAfterRequest))
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", false, stallNone), memHop(route.ProxySOCKS5, "10.0.0.2:1080", nil)}, target: origin(n)}
		}, route.StepSOCKS, 2},
		{"tls to origin, direct", func(n *memNet) setup {
			return setup{target: origin(n), origin: originTLS}
		}, route.StepOriginTLS, 0},
		{"tls to origin through two proxies", func(n *memNet) setup {
			return setup{hops: []Hop{proxy(n, "10.0.0.1:3128", true, stallNone), proxy(n, "10.0.0.2:3128", false, stallNone)}, target: origin(n), origin: originTLS}
		}, route.StepOriginTLS, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet()
				defer n.close()
				s := tt.setup(n)
				clock := fakeClock{time.Now()}
				d := &Dialer{Resolver: s.resolver, TCP: s.tcp, Clock: clock}
				if d.TCP == nil {
					d.TCP = n
				}
				begin := time.Now()
				b := route.Start(clock.Now(), limit)
				c, err := DialChain(context.Background(), d, s.hops, s.target, b)
				if err == nil && s.origin != nil {
					c, err = HandshakeOrigin(context.Background(), d, c, s.origin, b)
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
				if de.Limit != limit || de.Elapsed != limit || !de.Timeout() || de.Cause == nil {
					t.Errorf("DeadlineError = %+v, want %v elapsed of %v, with its cause", de, limit, limit)
				}
				if took != limit {
					t.Errorf("gave up after %v with a %v budget", took, limit)
				}
			})
		})
	}
}

// TestOneDeadlineAcrossHops: one deadline, not one per step. Two hops
// that each take 400ms to answer a CONNECT, under a 600ms budget: the
// dial fails at the second hop when the budget runs out, 600ms after it
// began, and not when a fresh allowance for that hop would (1000ms), nor
// when the second hop's stall ends (800ms).
func TestOneDeadlineAcrossHops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			stall = 400 * time.Millisecond
			total = 600 * time.Millisecond
		)
		n := newMemNet()
		defer n.close()
		p1 := &memProxy{n: n, point: stallAfterRequest, stallFor: stall}
		p2 := &memProxy{n: n, point: stallAfterRequest, stallFor: stall}
		n.listen("10.0.0.1:3128", p1.serve)
		n.listen("10.0.0.2:3128", p2.serve)
		n.listen("10.0.0.9:80", memSilent)
		clock := fakeClock{time.Now()}
		begin := time.Now()
		_, err := DialChain(context.Background(), &Dialer{TCP: n, Clock: clock},
			[]Hop{memHop(route.ProxyHTTP, "10.0.0.1:3128", nil), memHop(route.ProxyHTTP, "10.0.0.2:3128", nil)},
			"10.0.0.9:80", route.Start(clock.Now(), total))
		took := time.Since(begin)
		var de *route.DeadlineError
		if !errors.As(err, &de) || de.Step != route.StepConnect || de.Hop != 2 {
			t.Fatalf("err = %v, want deadline at connect hop 2", err)
		}
		if de.Elapsed != total || took != total {
			t.Errorf("Elapsed %v, took %v: want the %v budget to end it", de.Elapsed, took, total)
		}
		if p1.tunnels.Load() != 1 || p2.tunnels.Load() != 0 {
			t.Errorf("tunnels %d %d, want 1 0", p1.tunnels.Load(), p2.tunnels.Load())
		}
	})
}

// TestContextCanceled: a canceled context ends a dial blocked in a step
// at once (20ms after it began, when the context is canceled), as a
// *StepError wrapping context.Canceled that names the step, not as a
// deadline.
func TestContextCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		defer n.close()
		p := &memProxy{n: n, point: stallAfterRequest}
		n.listen("10.0.0.1:3128", p.serve)
		clock := fakeClock{time.Now()}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(20*time.Millisecond, cancel)
		begin := time.Now()
		_, err := DialChain(ctx, &Dialer{TCP: n, Clock: clock}, []Hop{memHop(route.ProxyHTTP, "10.0.0.1:3128", nil)}, "10.0.0.9:80",
			route.Start(clock.Now(), ample))
		took := time.Since(begin)
		var se *StepError
		if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || se.Step != route.StepConnect || se.Hop != 1 {
			t.Fatalf("err = %v, want canceled during connect at hop 1", err)
		}
		var de *route.DeadlineError
		if errors.As(err, &de) {
			t.Error("cancellation reported as a deadline")
		}
		if took != 20*time.Millisecond {
			t.Errorf("cancellation took %v, want 20ms", took)
		}
	})
}
