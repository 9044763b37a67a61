//go:build linux

package replaysafe_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/testservers/squid"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// ---- HTTP/2 CONNECT (RFC 9113 §8.5) to an HTTPS proxy that picks h2 ----

// h2ProxyClient is a Transport for https origins whose certificates are all
// trusted, through the HTTPS proxy at proxyURL (trusted by proxyTLS),
// counting the TCP connections it dials to the proxy.
type h2ProxyClient struct {
	tr         *replaysafe.Transport
	obs        *observed
	proxyDials atomic.Int32
}

func newH2ProxyClient(t *testing.T, proxyURL string, proxyTLS *tls.Config, origins ...*replaysafetest.Server) *h2ProxyClient {
	t.Helper()
	roots := x509.NewCertPool()
	for _, o := range origins {
		roots.AddCert(o.Certificate())
	}
	c := &h2ProxyClient{obs: &observed{}}
	pu := mustURL(t, proxyURL)
	var d net.Dialer
	c.tr = replaysafe.New(replaysafe.Options{
		TLSClientConfig:      &tls.Config{RootCAs: roots},
		ProxyTLSClientConfig: proxyTLS,
		Proxy:                func(*http.Request) (*url.URL, error) { return pu, nil },
		Observer:             c.obs.observer(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == pu.Host {
				c.proxyDials.Add(1)
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(c.tr.CloseIdleConnections)
	return c
}

// concurrentGETs sends n GETs at once, alternating between origins, to
// paths /c0, /c1, ...; each must answer 200 "ok" and be delivered once.
func concurrentGETs(t *testing.T, tr http.RoundTripper, n int, origins ...*replaysafetest.Server) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			o := origins[i%len(origins)]
			req, err := http.NewRequestWithContext(t.Context(), "GET", o.URL()+"/c"+strconv.Itoa(i), nil)
			if err != nil {
				errs <- err
				return
			}
			code, body, err := roundTrip(tr, req)
			if err != nil || code != 200 || body != "ok" {
				errs <- fmt.Errorf("GET /c%d: %d %q %v", i, code, body, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		wantCopies(t, origins[i%len(origins)], "/c"+strconv.Itoa(i), 1)
	}
}

// 64 concurrent https requests to two origins through one HTTPS proxy
// that picks h2 use one proxy connection: every tunnel is a CONNECT
// stream of it. Counted at the proxy (connections, tunnels per
// connection), at our dialer, and at the origins (one copy each).
func TestProxyH2ConnectOneProxyConnection(t *testing.T) {
	const n = 64
	o1, o2 := start(t, replaysafetest.Config{TLS: true}), start(t, replaysafetest.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{TLS: true, ALPN: []string{"h2", "http/1.1"}})
	c := newH2ProxyClient(t, p.URL(), p.ClientTLSConfig(), o1, o2)
	concurrentGETs(t, c.tr, n, o1, o2)
	if p.Conns() != 1 || p.H2Conns() != 1 || c.proxyDials.Load() != 1 {
		t.Errorf("proxy accepted %d connections (%d HTTP/2), client dialed it %d times; want 1", p.Conns(), p.H2Conns(), c.proxyDials.Load())
	}
	tunnels := o1.Conns() + o2.Conns()
	if got := p.TunnelsPerConn(); len(got) != 1 || got[0] != tunnels {
		t.Errorf("tunnels per proxy connection = %v; want all %d origin connections on connection 0", got, tunnels)
	}
	for _, r := range p.Requests() {
		if r.Proto != "HTTP/2.0" || r.Method != http.MethodConnect {
			t.Fatalf("proxy read %s %s %s; want HTTP/2 CONNECT", r.Method, r.Target, r.Proto)
		}
	}
}

// HTTP/2 to the origin inside an HTTP/2 CONNECT tunnel: a GET and a
// POST share the one tunnel, each reaching the origin once.
func TestProxyH2ConnectH2Origin(t *testing.T) {
	s := startH2(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("hello"))})
	p := startProxy(t, connectproxy.Config{TLS: true, ALPN: []string{"h2", "http/1.1"}})
	tr, _ := h2Proxied(t, s, p, replaysafe.ProtocolNegotiate)
	for _, r := range []struct{ method, path, body string }{{"GET", "/g", ""}, {"POST", "/p", "up"}} {
		resp, err := tr.RoundTrip(newRequest(t, t.Context(), r.method, s.URL()+r.path, r.body))
		if err != nil {
			t.Fatalf("%s: %v", r.method, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "hello" || resp.ProtoMajor != 2 {
			t.Fatalf("%s: %q %v proto %s", r.method, b, err, resp.Proto)
		}
	}
	wantH2Copies(t, s, "/g", 0)
	wantH2Copies(t, s, "/p", 0)
	reqs := p.Requests()
	if p.H2Conns() != 1 || p.Tunnels() != 1 || len(reqs) != 1 || reqs[0].Proto != "HTTP/2.0" || reqs[0].Target != s.Addr() {
		t.Errorf("proxy h2 conns %d, tunnels %d, requests %+v; want one HTTP/2 CONNECT to %s", p.H2Conns(), p.Tunnels(), reqs, s.Addr())
	}
}

// An HTTPS proxy that offers only http/1.1 gets HTTP/1.1 CONNECT, one
// proxy connection per tunnel, as before.
func TestProxyH2ConnectFallsBackToHTTP1(t *testing.T) {
	o := start(t, replaysafetest.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{TLS: true, ALPN: []string{"http/1.1"}})
	c := newH2ProxyClient(t, p.URL(), p.ClientTLSConfig(), o)
	concurrentGETs(t, c.tr, 4, o)
	if p.H2Conns() != 0 || p.Conns() != o.Conns() || p.Tunnels() != o.Conns() {
		t.Errorf("proxy conns=%d (h2 %d) tunnels=%d, origin conns=%d; want one HTTP/1.1 proxy connection per tunnel", p.Conns(), p.H2Conns(), p.Tunnels(), o.Conns())
	}
	for _, r := range p.Requests() {
		if r.Proto != "HTTP/1.1" {
			t.Errorf("proxy read %s %s", r.Method, r.Proto)
		}
	}
}

// resetMidRequest sends a warm-up GET, then method /target on the same
// (reused) origin connection, and resets its tunnel (RST_STREAM from the
// proxy) once the origin has the request.
func resetMidRequest(t *testing.T, method string) (*replaysafetest.Server, *connectproxy.Server, *h2ProxyClient, error) {
	t.Helper()
	s := start(t, replaysafetest.Config{TLS: true, Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	p := startProxy(t, connectproxy.Config{TLS: true, ALPN: []string{"h2", "http/1.1"}})
	c := newH2ProxyClient(t, p.URL(), p.ClientTLSConfig(), s)
	get(t, c.tr, s, "/warm")
	body := ""
	if method == "POST" {
		body = "hello"
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(c.tr, newRequest(t, t.Context(), method, s.URL()+"/target", body))
		done <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Wait(ctx, func() bool { return len(copies(s, "/target")) == 1 }); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetTunnels(); n != 1 {
		t.Fatalf("ResetTunnels = %d, want the one tunnel", n)
	}
	return s, p, c, <-done
}

// A GET whose tunnel is reset mid-request on a reused connection, before
// any response byte, is resent once on a new tunnel: two copies at the
// origin.
func TestProxyH2ConnectTunnelResetGETResent(t *testing.T) {
	s, p, c, err := resetMidRequest(t, "GET")
	if err != nil {
		t.Fatalf("GET after the reset: %v", err)
	}
	wantCopies(t, s, "/target", 2)
	wantDecisions(t, c.obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
	if n := p.Tunnels(); n != 2 {
		t.Errorf("%d tunnels, want 2 (the reset one, the resend's)", n)
	}
}

// A POST whose tunnel is reset mid-request is not resent (RS18): one
// copy at the origin, an error.
func TestProxyH2ConnectTunnelResetPOSTNotResent(t *testing.T) {
	s, p, _, err := resetMidRequest(t, "POST")
	wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
	wantCopies(t, s, "/target", 1)
	if n := p.Tunnels(); n != 1 {
		t.Errorf("%d tunnels, want 1", n)
	}
}

// ---- nghttpx --http2-proxy in front of squid ----------------------------

// nghttpxBinary finds nghttpx (Debian nghttp2-proxy) or skips the test;
// in CI, where .ci/setup installs it, a missing nghttpx is a failure.
func nghttpxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nghttpx"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/nghttpx"); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/nghttpx"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("nghttpx is required in CI: .ci/setup installs it (apt-get install nghttp2-proxy)")
	}
	t.Skip("nghttpx is not installed; to run this interop test, install it with: sudo apt-get install nghttp2-proxy (the test starts one of its own; the system service need not run)")
	return ""
}

// nghttpx is a running nghttpx --http2-proxy.
type nghttpx struct {
	addr string
	dir  string
	cert *x509.Certificate
}

// startNghttpx runs nghttpx as an HTTP/2 proxy (TLS, ALPN h2) on a
// loopback port, forwarding to the HTTP proxy at backend, with a fresh
// self-signed certificate, stopped at the end of the test.
func startNghttpx(t *testing.T, bin, backend string) *nghttpx {
	t.Helper()
	dir := t.TempDir()
	cert, certPEM, keyPEM := selfSigned(t)
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, b := range map[string][]byte{certPath: certPEM, keyPath: keyPEM, filepath.Join(dir, "nghttpx.conf"): nil} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bh, bp, err := net.SplitHostPort(backend)
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "--http2-proxy",
			"--conf="+filepath.Join(dir, "nghttpx.conf"),
			"--frontend=127.0.0.1,"+strconv.Itoa(port),
			"--backend="+bh+","+bp,
			"--workers=1", "--no-ocsp", "--log-level=WARN",
			"--errorlog-file="+filepath.Join(dir, "error.log"),
			"--accesslog-file="+filepath.Join(dir, "access.log"),
			keyPath, certPath)
		cmd.Dir = dir
		out, err := os.Create(filepath.Join(dir, "nghttpx.out"))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Start()
		out.Close()
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cancel()
			<-exited
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if waitListening(addr, exited) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					for _, f := range []string{"nghttpx.out", "error.log", "access.log"} {
						b, _ := os.ReadFile(filepath.Join(dir, f))
						t.Logf("nghttpx %s:\n%s", f, b)
					}
				}
			})
			return &nghttpx{addr: addr, dir: dir, cert: cert}
		}
		stop()
		b, _ := os.ReadFile(filepath.Join(dir, "nghttpx.out"))
		t.Logf("nghttpx launch %d of %d did not listen:\n%s", attempt, attempts, b)
		if attempt == attempts {
			t.Fatal("nghttpx did not start")
		}
	}
}

// waitListening probes addr until it accepts a connection (true), the
// process exits or 15 s pass (false).
func waitListening(addr string, exited <-chan struct{}) bool {
	for range 600 { // 600 × 25 ms
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp4", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

// selfSigned makes a certificate for 127.0.0.1 and its key, in PEM.
func selfSigned(t *testing.T) (*x509.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "replaysafe nghttpx test proxy"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func (n *nghttpx) clientTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(n.cert)
	return &tls.Config{RootCAs: pool}
}

// tunnelRules let loopback clients CONNECT to loopback origins on any
// port (squid's stock rules allow CONNECT to 443 only).
var tunnelRules = []string{
	"acl rs_from src 127.0.0.1/32",
	"acl rs_to dst 127.0.0.1/32",
	"http_access allow rs_from rs_to",
	"http_access deny all",
}

// TestNghttpxH2ConnectThroughSquid runs nghttpx --http2-proxy (an
// HTTP/2 CONNECT proxy) in front of squid and counts at the origins:
//
//   - 64 concurrent https GETs to two origins use one TCP connection to
//     nghttpx (our dialer counts it), each delivered exactly once;
//   - a GET whose origin connection is cut (TCP RST) right after the
//     origin read it, on a reused tunnel, is resent once: two copies;
//   - a POST cut the same way is not: one copy, RS18.
func TestNghttpxH2ConnectThroughSquid(t *testing.T) {
	bin := nghttpxBinary(t)
	sq := squid.Start(t, squid.Binary(t), squid.Config{Rules: tunnelRules})
	nx := startNghttpx(t, bin, sq.Open.Addr())
	proxyURL := "https://" + nx.addr

	wantTunnels := map[string]int{} // origin address → connections it accepted: squid's CONNECTs
	o1, o2 := start(t, replaysafetest.Config{TLS: true}), start(t, replaysafetest.Config{TLS: true})
	t.Run("64 concurrent, one proxy connection", func(t *testing.T) {
		c := newH2ProxyClient(t, proxyURL, nx.clientTLS(), o1, o2)
		concurrentGETs(t, c.tr, 64, o1, o2)
		if n := c.proxyDials.Load(); n != 1 {
			t.Errorf("dialed nghttpx %d times, want 1 (HTTP/2 CONNECT streams on one connection)", n)
		}
		c.tr.CloseIdleConnections()
		wantTunnels[o1.Addr()], wantTunnels[o2.Addr()] = o1.Conns(), o2.Conns()
	})
	for _, tc := range []struct {
		method string
		copies int
	}{{"GET", 2}, {"POST", 1}} {
		t.Run(tc.method+" cut mid-request", func(t *testing.T) {
			s := start(t, replaysafetest.Config{TLS: true, Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseRST)),
				replaysafetest.Script(replaysafetest.OK()),
			}})
			c := newH2ProxyClient(t, proxyURL, nx.clientTLS(), s)
			get(t, c.tr, s, "/warm")
			body := ""
			if tc.method == "POST" {
				body = "hello"
			}
			code, got, err := roundTrip(c.tr, newRequest(t, t.Context(), tc.method, s.URL()+"/target", body))
			if tc.method == "GET" {
				if err != nil || code != 200 || got != "ok" {
					t.Fatalf("GET: %d %q %v", code, got, err)
				}
				wantDecisions(t, c.obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
			} else {
				wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
			}
			wantCopies(t, s, "/target", tc.copies)
		})
	}
	// Every tunnel of the first subtest reached squid as one CONNECT.
	got := map[string]int{}
	for _, e := range sq.AccessLog(t) {
		if e.Method == http.MethodConnect {
			got[e.URL]++
		}
	}
	t.Logf("tunnels (origin connections) per origin %v; CONNECTs squid logged %v", wantTunnels, got)
	if len(wantTunnels) != 2 {
		t.Fatalf("the concurrent subtest counted %d origins, want 2", len(wantTunnels))
	}
	for addr, n := range wantTunnels {
		if got[addr] != n {
			t.Errorf("squid logged %d CONNECTs to %s, want %d (one per origin connection)", got[addr], addr, n)
		}
	}
}
