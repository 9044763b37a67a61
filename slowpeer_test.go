package replaysafe_test

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
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/driver"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// Slow peers are bounded by default (issue 33, item 5): each test plays a
// peer that sends nothing wrong, only too slowly to ever finish, and
// checks that a call with the zero Options ends at its default bound,
// with an *Error naming the rule and wrapping a timeout that names the
// bound, and what the peer received meanwhile. Fake time
// (testing/synctest), in-memory connections.

// TestSlowPeerH1DribbledHeader: an HTTP/1.1 server that sends its status
// line and header fields one byte a second. Once the first byte of the
// header section has arrived, the rest must arrive within
// driver.DefaultHeaderSectionTimeout (spec/choices.md): the attempt
// fails then, as a timeout (RS06), never resent; the server received one
// request on one connection.
func TestSlowPeerH1DribbledHeader(t *testing.T) {
	for _, c := range []struct {
		name    string
		interim string // sent at once before the dribbled final section
		n       int    // informational sections before it
		header  time.Duration
		https   bool // over TLS, ALPN choosing http/1.1 (the leg offered h2 too)
	}{
		{"final section", "", 0, 0, false},
		{"after 103", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 1, 0, false},
		// The attempt then runs on a context of its own, which the
		// bound cancels too.
		{"with ResponseHeaderTimeout 1h", "", 0, time.Hour, false},
		{"https", "", 0, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials, requests, sent atomic.Int32
				var firstByte atomic.Int64
				origin := time.Now()
				served := make(chan struct{})
				scheme, opts := "http", replaysafe.Options{IgnoreProxyEnvironment: true, ResponseHeaderTimeout: c.header}
				var serverTLS *tls.Config
				if c.https {
					scheme = "https"
					serverTLS, opts.TLSClientConfig = slowPeerTLS(t, "dribble.test")
				}
				serve := func(s net.Conn) {
					defer close(served)
					defer s.Close()
					if serverTLS != nil {
						s = tls.Server(s, serverTLS)
					}
					if _, err := http.ReadRequest(bufio.NewReader(s)); err != nil {
						return
					}
					requests.Add(1)
					if c.interim != "" {
						io.WriteString(s, c.interim)
						time.Sleep(time.Minute) // the server thinks: not bounded
					}
					// A header field that never ends, a byte a second;
					// past a minute the server waits for the client to
					// give up.
					head := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Slow: " + strings.Repeat("z", 60)
					firstByte.Store(int64(time.Since(origin)))
					for i := range len(head) {
						if _, err := io.WriteString(s, head[i:i+1]); err != nil {
							return
						}
						sent.Add(1)
						time.Sleep(time.Second)
					}
					io.Copy(io.Discard, s)
				}
				opts.DialContext = pipeDialer(&dials, serve)
				tr := replaysafe.New(opts)
				defer tr.CloseIdleConnections()
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // the caller's own bound
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", scheme+"://dribble.test/", nil)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
					t.Fatal("the dribbled response was delivered")
				}
				took := time.Since(origin) - time.Duration(firstByte.Load())
				if took != driver.DefaultHeaderSectionTimeout {
					t.Errorf("failed %v after the section's first byte, want %v", took, driver.DefaultHeaderSectionTimeout)
				}
				t.Log(err)
				e := wantRule(t, err, fsm.RuleTimeout, 1)
				var he *h1.HeaderTimeoutError
				if !errors.As(err, &he) || he.Limit != driver.DefaultHeaderSectionTimeout || he.Interim != c.n {
					t.Errorf("error %v (%+v), want an *h1.HeaderTimeoutError of %v after %d interim sections", err, he, driver.DefaultHeaderSectionTimeout, c.n)
				}
				if !e.Timeout() || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "header section did not end within 20s") {
					t.Errorf("error %q is not a timeout naming the header section bound", err)
				}
				<-served
				if d, r := dials.Load(), requests.Load(); d != 1 || r != 1 {
					t.Errorf("%d dials, %d requests received, want 1 and 1", d, r)
				}
				// One byte a second for 20 s; the one due as the bound
				// passes may or may not have been taken. Over TLS the
				// call ends as fast, but closing the connection first
				// sends close_notify, which a server that does not read
				// holds for up to 5 s (crypto/tls), as in net/http.
				want := int32(driver.DefaultHeaderSectionTimeout / time.Second)
				most := want + 1
				if c.https {
					most += 5
				}
				if n := sent.Load(); n < want || n > most {
					t.Errorf("the server sent %d bytes of the section before the client closed, want %d to %d", n, want, most)
				}
			})
		})
	}
}

// TestSlowPeerH1DribbleOnReusedConn: the bound holds on a pooled
// connection too, where the attempt may run on the caller's context
// alone: closing the connection ends net/http's read. A reused
// connection's dribbled response started, so it is not resent either.
func TestSlowPeerH1DribbleOnReusedConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials, requests atomic.Int32
		var firstByte atomic.Int64
		origin := time.Now()
		served := make(chan struct{})
		serve := func(s net.Conn) {
			defer close(served)
			defer s.Close()
			br := bufio.NewReader(s)
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			requests.Add(1)
			io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			requests.Add(1)
			firstByte.Store(int64(time.Since(origin)))
			for {
				if _, err := io.WriteString(s, "H"); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}
		tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, DialContext: pipeDialer(&dials, serve)})
		defer tr.CloseIdleConnections()
		first, _ := http.NewRequest("GET", "http://dribble.test/first", nil)
		if code, body, err := roundTrip(tr, first); err != nil || code != 200 || body != "ok" {
			t.Fatalf("first GET: %d %q %v", code, body, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://dribble.test/second", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatal("the dribbled response was delivered")
		}
		if took := time.Since(origin) - time.Duration(firstByte.Load()); took != driver.DefaultHeaderSectionTimeout {
			t.Errorf("failed %v after the section's first byte, want %v", took, driver.DefaultHeaderSectionTimeout)
		}
		wantRule(t, err, fsm.RuleTimeout, 1)
		var he *h1.HeaderTimeoutError
		if !errors.As(err, &he) {
			t.Errorf("error %v, want an *h1.HeaderTimeoutError", err)
		}
		<-served
		if d, r := dials.Load(), requests.Load(); d != 1 || r != 2 {
			t.Errorf("%d dials, %d requests received, want 1 and 2", d, r)
		}
	})
}

// TestSlowPeerH1InterimThenSlowFinal: the bound is per header section. A
// server that sends 103 (Early Hints) at once and its final response a
// minute later is slow but honest: the call succeeds.
func TestSlowPeerH1InterimThenSlowFinal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials atomic.Int32
		serve := func(s net.Conn) {
			defer s.Close()
			if _, err := http.ReadRequest(bufio.NewReader(s)); err != nil {
				return
			}
			io.WriteString(s, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			time.Sleep(time.Minute)
			io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		}
		tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, DialContext: pipeDialer(&dials, serve)})
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://hints.test/", nil)
		code, body, err := roundTrip(tr, req)
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("GET: %d %q %v", code, body, err)
		}
	})
}

// TestSlowPeerH2Settings: an HTTP/2 server (h2c with prior knowledge)
// that never finishes the SETTINGS exchange. One that sends its SETTINGS
// and answers PINGs but never acknowledges ours is cut when
// h2.DefaultSettingsTimeout (10 s) passed, with SETTINGS_TIMEOUT; one
// that sends nothing at all is found dead sooner, by the liveness PING
// (2 s without a frame, then 2 s for an answer). Either way the call
// fails with an *Error wrapping the *h2.TimeoutError that names the
// timer. The server counted the requests' HEADERS frames: at most the
// one request, on one connection.
func TestSlowPeerH2Settings(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings bool // the server sends its SETTINGS and answers PINGs, never acknowledging ours
		kind     h2.TimeoutKind
		after    time.Duration // the timer's limit
		took     time.Duration // from the request to the error
		goAway   http2.ErrCode // the GOAWAY the server got as the client closed (0: none, or NO_ERROR)
	}{
		{"SETTINGS never acknowledged", true, h2.TimeoutSettings, h2.DefaultSettingsTimeout, h2.DefaultSettingsTimeout, http2.ErrCodeSettingsTimeout},
		{"nothing sent", false, h2.TimeoutPing, h2.DefaultPingTimeout, h2.DefaultPingAfter + h2.DefaultPingTimeout, http2.ErrCodeNo},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials, headers atomic.Int32
				var goAway atomic.Uint32
				serve := func(s net.Conn) {
					defer s.Close()
					if !readPreface(s) {
						return
					}
					fr := http2.NewFramer(s, s)
					if c.settings {
						if err := fr.WriteSettings(); err != nil {
							return
						}
					}
					for {
						f, err := fr.ReadFrame()
						if err != nil {
							return
						}
						switch f := f.(type) {
						case *http2.HeadersFrame:
							headers.Add(1)
						case *http2.PingFrame:
							if c.settings && !f.IsAck() {
								if err := fr.WritePing(true, f.Data); err != nil {
									return
								}
							}
						case *http2.GoAwayFrame:
							goAway.Store(uint32(f.ErrCode))
						}
					}
				}
				tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, Protocol: replaysafe.ProtocolHTTP2, DialContext: pipeDialer(&dials, serve)})
				defer tr.CloseIdleConnections()
				req, _ := http.NewRequest("GET", "http://settings.test/", nil)
				began := time.Now()
				resp, err := tr.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
					t.Fatal("a response without the SETTINGS exchange")
				}
				if took := time.Since(began); took != c.took {
					t.Errorf("failed after %v, want %v", took, c.took)
				}
				// The request's HEADERS may have left on the new
				// connection: an ambiguous failure of a fresh
				// connection, never resent.
				t.Log(err)
				e := wantRule(t, err, fsm.RuleAmbiguousFreshConn, 1)
				var te *h2.TimeoutError
				if !errors.As(err, &te) || te.Kind != c.kind || te.After != c.after {
					t.Errorf("error %v, want an *h2.TimeoutError of kind %v after %v", err, c.kind, c.after)
				}
				if !e.Timeout() {
					t.Errorf("error %v is not a timeout", err)
				}
				synctest.Wait()
				if d, h := dials.Load(), headers.Load(); d != 1 || h > 1 {
					t.Errorf("%d dials, %d HEADERS frames received, want 1 and at most 1", d, h)
				}
				if g := http2.ErrCode(goAway.Load()); g != c.goAway {
					t.Errorf("the server got GOAWAY %v, want %v", g, c.goAway)
				}
			})
		})
	}
}

// TestSlowPeerSOCKS5AuthStalls: a SOCKS5 proxy that asks for
// user/password authentication, reads the credentials and never answers.
// The acquisition deadline (DefaultAcquireTimeout, 30 s) ends the
// negotiation, the error naming the step and hop; nothing reached the
// origin: the proxy received one greeting, one authentication and no
// CONNECT request.
func TestSlowPeerSOCKS5AuthStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials, greetings, auths, connects atomic.Int32
		serve := func(s net.Conn) {
			defer s.Close()
			var greet [2]byte
			if _, err := io.ReadFull(s, greet[:]); err != nil || greet[0] != 5 {
				return
			}
			methods := make([]byte, greet[1])
			if _, err := io.ReadFull(s, methods); err != nil {
				return
			}
			greetings.Add(1)
			if _, err := s.Write([]byte{5, 2}); err != nil { // username/password
				return
			}
			var ver [2]byte // VER ULEN
			if _, err := io.ReadFull(s, ver[:]); err != nil || ver[0] != 1 {
				return
			}
			if _, err := io.ReadFull(s, make([]byte, ver[1])); err != nil {
				return
			}
			var plen [1]byte
			if _, err := io.ReadFull(s, plen[:]); err != nil {
				return
			}
			if _, err := io.ReadFull(s, make([]byte, plen[0])); err != nil {
				return
			}
			auths.Add(1)
			// No reply: whatever comes next would be the CONNECT request.
			if n, _ := io.Copy(io.Discard, s); n > 0 {
				connects.Add(1)
			}
		}
		proxyURL, _ := url.Parse("socks5h://user:secret@10.0.0.1:1080")
		tr := replaysafe.New(replaysafe.Options{
			Proxy:       func(*http.Request) (*url.URL, error) { return proxyURL, nil },
			DialContext: pipeDialer(&dials, serve),
		})
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://origin.test/", nil)
		began := time.Now()
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatal("a response through a stalled SOCKS5 proxy")
		}
		if took := time.Since(began); took != replaysafe.DefaultAcquireTimeout {
			t.Errorf("failed after %v, want %v", took, replaysafe.DefaultAcquireTimeout)
		}
		t.Log(err)
		wantRule(t, err, fsm.RuleTimeout, 1)
		var de *route.DeadlineError
		if !errors.As(err, &de) || de.Step != route.StepSOCKS || de.Hop != 1 {
			t.Errorf("error %v, want the acquisition deadline naming step socks at hop 1", err)
		}
		var te *replaysafe.TimeoutError
		if !errors.As(err, &te) || te.Phase != fsm.PhaseAcquire {
			t.Errorf("error %v, want an acquire-phase TimeoutError", err)
		}
		synctest.Wait()
		if d, g, a, c := dials.Load(), greetings.Load(), auths.Load(), connects.Load(); d != 1 || g != 1 || a != 1 || c != 0 {
			t.Errorf("%d dials; the proxy received %d greetings, %d authentications, %d CONNECT requests; want 1, 1, 1, 0", d, g, a, c)
		}
	})
}

// slowPeerTLS returns a server configuration with a certificate for host,
// valid around the clock now (a synctest bubble's starts in 2000) and
// speaking HTTP/1.1 alone, and a client configuration that trusts it.
func slowPeerTLS(t *testing.T, host string) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"http/1.1"}}
	return server, &tls.Config{RootCAs: pool}
}
