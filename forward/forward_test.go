package forward_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/forward"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// httpUpstream starts an upstream serving h, HTTP/1.1, h2c (prior
// knowledge) or HTTP/3 (quic-go's server) by proto, and returns the
// forwarder options that reach it.
func httpUpstream(t *testing.T, proto string, h http.HandlerFunc) forward.Options {
	t.Helper()
	if proto == "h3" {
		base, client := h3Ingress(t, h)
		u, _ := url.Parse(base)
		tlsConf := client.Transport.(*http3.Transport).TLSClientConfig
		return forward.Options{Upstream: u, Egress: forward.EgressHTTP3, TransportOptions: replaysafe.Options{TLSClientConfig: tlsConf}}
	}
	srv := httptest.NewUnstartedServer(h)
	egress := forward.EgressHTTP1
	if proto == "h2" {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		egress = forward.EgressHTTP2
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return forward.Options{Upstream: u, Egress: egress}
}

var pairs = [][2]string{{"h1", "h1"}, {"h1", "h2"}, {"h1", "h3"}, {"h2", "h1"}, {"h2", "h2"}, {"h2", "h3"}, {"h3", "h1"}, {"h3", "h2"}, {"h3", "h3"}}

// TestForwardTrailers: request trailers reach the upstream and response trailers
// reach the client on every pair.
func TestForwardTrailers(t *testing.T) {
	for _, p := range pairs {
		t.Run(p[0]+"→"+p[1], func(t *testing.T) {
			var got struct {
				sync.Mutex
				body, trailer, te string
			}
			o := httpUpstream(t, p[1], func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got.Lock()
				got.body, got.trailer, got.te = string(b), r.Trailer.Get("X-Req-Sum"), r.Header.Get("Te")
				got.Unlock()
				w.Header().Set("Trailer", "X-Resp-Sum")
				io.WriteString(w, "response")
				w.Header().Set("X-Resp-Sum", "42")
			})
			fw := forward.New(o)
			defer fw.Transport().CloseIdleConnections()
			base, client := ingress(t, fw, p[0])

			req, _ := http.NewRequest("POST", base+"/t", io.MultiReader(strings.NewReader("request")))
			req.ContentLength = -1
			req.Trailer = http.Header{"X-Req-Sum": {"7"}}
			req.Header.Set("Te", "trailers")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "response" || resp.Trailer.Get("X-Resp-Sum") != "42" {
				t.Errorf("client got %q, trailer %v", b, resp.Trailer)
			}
			got.Lock()
			defer got.Unlock()
			if got.body != "request" || got.trailer != "7" {
				t.Errorf("upstream got %q, trailer %q", got.body, got.trailer)
			}
			if got.te != "trailers" {
				t.Errorf("upstream got TE %q, want trailers", got.te)
			}
		})
	}
}

// TestForwardStreaming: the request body reaches the upstream while the client
// is still sending it, and the response reaches the client while the
// upstream is still writing it: nothing is collected on the way.
func TestForwardStreaming(t *testing.T) {
	for _, p := range pairs {
		t.Run(p[0]+"→"+p[1], func(t *testing.T) {
			firstIn := make(chan string, 1)
			release := make(chan struct{})
			o := httpUpstream(t, p[1], func(w http.ResponseWriter, r *http.Request) {
				buf := make([]byte, 5)
				_, err := io.ReadFull(r.Body, buf)
				firstIn <- string(buf)
				if err != nil {
					return
				}
				rest, _ := io.ReadAll(r.Body)
				io.WriteString(w, "head:"+string(rest))
				http.NewResponseController(w).Flush()
				<-release
				io.WriteString(w, ":tail")
			})
			fw := forward.New(o)
			defer fw.Transport().CloseIdleConnections()
			base, client := ingress(t, fw, p[0])

			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte("part1"))
				select {
				case <-firstIn: // the upstream has the first part: nothing buffered it
				case <-time.After(10 * time.Second):
					pw.CloseWithError(errors.New("the upstream never saw the first part"))
					return
				}
				pw.Write([]byte("part2"))
				pw.Close()
			}()
			req, _ := http.NewRequest("PUT", base+"/s", pr)
			resp, err := client.Do(req)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			buf := make([]byte, len("head:part2"))
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "head:part2" {
				t.Fatalf("first response part %q, %v", buf, err)
			}
			close(release) // the upstream has not finished: the response streams
			rest, _ := io.ReadAll(resp.Body)
			if string(rest) != ":tail" {
				t.Errorf("rest %q", rest)
			}
		})
	}
}

// TestForwardClientDisconnectCancelsUpstream: a client that goes away cancels
// the upstream attempt.
func TestForwardClientDisconnectCancelsUpstream(t *testing.T) {
	for _, p := range pairs {
		t.Run(p[0]+"→"+p[1], func(t *testing.T) {
			arrived, canceled := make(chan struct{}), make(chan struct{})
			o := httpUpstream(t, p[1], func(w http.ResponseWriter, r *http.Request) {
				close(arrived)
				select {
				case <-r.Context().Done():
					close(canceled)
				case <-time.After(10 * time.Second):
				}
			})
			fw := forward.New(o)
			defer fw.Transport().CloseIdleConnections()
			base, client := ingress(t, fw, p[0])
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/slow", nil)
			errc := make(chan error, 1)
			go func() {
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-arrived
			cancel()
			select {
			case <-canceled:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream request was not canceled")
			}
			if err := <-errc; err == nil {
				t.Error("the canceled client call succeeded")
			}
		})
	}
}

// TestForwardErrors: the status, rule header and body the forwarder answers when
// the upstream call fails or the plan refuses it.
func TestForwardErrors(t *testing.T) {
	t.Run("acquisition deadline is 504", func(t *testing.T) {
		u, _ := url.Parse("http://upstream.invalid:80")
		fw := forward.New(forward.Options{Upstream: u, TransportOptions: replaysafe.Options{
			AcquireTimeout: 50 * time.Millisecond,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				<-ctx.Done() // a dial that never completes
				return nil, ctx.Err()
			},
		}})
		resp := do(t, fw, "GET", "/", nil)
		if resp.Code != http.StatusGatewayTimeout || resp.Header().Get(forward.RuleHeader) == "" {
			t.Errorf("got %d %s=%q, want 504 with the rule", resp.Code, forward.RuleHeader, resp.Header().Get(forward.RuleHeader))
		}
		if !strings.Contains(resp.Body.String(), resp.Header().Get(forward.RuleHeader)) {
			t.Errorf("body %q does not name the rule", resp.Body.String())
		}
	})
	t.Run("refused dial is 502 naming RS04", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		u, _ := url.Parse("http://" + addr)
		fw := forward.New(forward.Options{Upstream: u})
		resp := do(t, fw, "GET", "/", nil)
		if resp.Code != http.StatusBadGateway || resp.Header().Get(forward.RuleHeader) != "RS04" ||
			!strings.Contains(resp.Body.String(), "RS04") {
			t.Errorf("got %d %s=%q body %q, want 502 RS04", resp.Code, forward.RuleHeader, resp.Header().Get(forward.RuleHeader), resp.Body)
		}
	})
	t.Run("OnRequest refusal", func(t *testing.T) {
		s, err := replaysafetest.Start(replaysafetest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		u, _ := url.Parse(s.URL())
		fw := forward.New(forward.Options{Upstream: u, OnRequest: func(r *http.Request) error {
			if r.URL.Path == "/teapot" {
				return &forward.StatusError{Status: http.StatusTeapot, Reason: "no"}
			}
			if r.Header.Get("X-Deny") != "" {
				return errors.New("denied")
			}
			r.Header.Set("X-Added", "1")
			return nil
		}})
		defer fw.Transport().CloseIdleConnections()
		if c := do(t, fw, "GET", "/teapot", nil).Code; c != http.StatusTeapot {
			t.Errorf("StatusError answered %d", c)
		}
		if c := do(t, fw, "GET", "/", http.Header{"X-Deny": {"1"}}).Code; c != http.StatusForbidden {
			t.Errorf("error answered %d", c)
		}
		if c := do(t, fw, "GET", "/ok", nil).Code; c != 200 {
			t.Errorf("allowed request answered %d", c)
		}
		rs := s.Requests()
		if len(rs) != 1 || rs[0].Header.Get("X-Added") != "1" {
			t.Errorf("upstream received %d requests (want 1, with X-Added)", len(rs))
		}
	})
	t.Run("a non-WebSocket upgrade to HTTP/2 egress is 501 and sends nothing", func(t *testing.T) {
		s, err := replaysafetest.Start(replaysafetest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		u, _ := url.Parse(s.URL())
		fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressHTTP2})
		resp := do(t, fw, "GET", "/ws", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"foo/1"}})
		if resp.Code != http.StatusNotImplemented || s.Count() != 0 {
			t.Errorf("got %d, upstream received %d", resp.Code, s.Count())
		}
	})
}

// do serves one request through h in process.
func do(t *testing.T, h http.Handler, method, target string, hdr http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestForwardHeadersOnTheWire: what the upstream receives — no field the client's
// Connection named, no hop-by-hop field, Via, and the Forwarded and
// X-Forwarded-For fields with the untrusted inbound ones removed — and
// what the client receives back.
func TestForwardHeadersOnTheWire(t *testing.T) {
	s, err := replaysafetest.Start(replaysafetest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, _ := url.Parse(s.URL())
	logs := &lineWriter{lines: make(chan string, 4)}
	fw := forward.New(forward.Options{Upstream: u, Forwarded: true, XForwardedFor: true,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer fw.Transport().CloseIdleConnections()
	base, client := ingress(t, fw, "h1")
	req, _ := http.NewRequest("GET", base+"/h?q=1", nil)
	req.Header.Set("Connection", "X-Hop, keep-alive")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Forwarded", "for=6.6.6.6")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("X-End", "kept")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Via") != "1.1 replaysafe" {
		t.Errorf("response Via %q", resp.Header.Get("Via"))
	}
	rs := s.Requests()
	if len(rs) != 1 {
		t.Fatalf("upstream received %d requests", len(rs))
	}
	h := rs[0].Header
	if rs[0].Target != "/h?q=1" {
		t.Errorf("target %q", rs[0].Target)
	}
	for _, f := range []string{"X-Hop", "Keep-Alive"} {
		if v := h.Values(f); len(v) > 0 {
			t.Errorf("upstream received %s %q", f, v)
		}
	}
	if h.Get("X-End") != "kept" || h.Get("Via") != "1.1 replaysafe" {
		t.Errorf("X-End %q Via %q", h.Get("X-End"), h.Get("Via"))
	}
	if h.Get("X-Forwarded-For") != "127.0.0.1" || !strings.HasPrefix(h.Get("Forwarded"), "for=127.0.0.1;host=") ||
		len(h.Values("Forwarded")) != 1 {
		t.Errorf("X-Forwarded-For %q Forwarded %q", h.Values("X-Forwarded-For"), h.Values("Forwarded"))
	}
	if h.Get("X-Forwarded-Proto") != "http" || h.Get("Host") == "" && rs[0].Header.Get("Host") == "" {
		t.Errorf("X-Forwarded-Proto %q", h.Get("X-Forwarded-Proto"))
	}
	var line string
	select {
	case line = <-logs.lines: // the handler logs once it returns
	case <-time.After(10 * time.Second):
		t.Fatal("no access log line")
	}
	for _, want := range []string{"method=GET", "target=\"/h?q=1\"", "upstream=HTTP/1.1", "attempts=1", "status=200", "duration="} {
		if !strings.Contains(line, want) {
			t.Errorf("access log %q lacks %s", line, want)
		}
	}
}

// lineWriter hands each written log line to a channel.
type lineWriter struct{ lines chan string }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.lines <- string(bytes.TrimSpace(p))
	return len(p), nil
}

// TestForwardEarlyHintsRelayed: a 103 from the upstream reaches the client before
// the final response, on every pair.
func TestForwardEarlyHintsRelayed(t *testing.T) {
	for _, p := range pairs {
		t.Run(p[0]+"→"+p[1], func(t *testing.T) {
			o := httpUpstream(t, p[1], func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
				io.WriteString(w, "final")
			})
			fw := forward.New(o)
			defer fw.Transport().CloseIdleConnections()
			base, client := ingress(t, fw, p[0])
			var mu sync.Mutex
			var hints []string
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					mu.Lock()
					hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
					mu.Unlock()
					return nil
				},
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/page", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if string(b) != "final" || len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
				t.Errorf("client got %q after 1xx %q", b, hints)
			}
			if resp.Header.Get("Link") != "" {
				t.Errorf("the final response carries the 103's Link %q", resp.Header.Get("Link"))
			}
		})
	}
}

// TestForwardEndlessEarlyHints: an upstream that sends 103 forever meets
// the Transport's bound although the Forwarder's relay accepts every
// 1xx: the client gets the 32 hints the bound allows, then a 502 (the
// upstream would send 100,000), and the upstream saw the request once.
func TestForwardEndlessEarlyHints(t *testing.T) {
	for _, p := range [][2]string{{"h1", "h1"}, {"h1", "h2"}, {"h2", "h1"}, {"h2", "h2"}} {
		t.Run(p[0]+"→"+p[1], func(t *testing.T) {
			var copies atomic.Int64
			o := httpUpstream(t, p[1], func(w http.ResponseWriter, r *http.Request) {
				copies.Add(1)
				for range 100_000 {
					if r.Context().Err() != nil {
						return
					}
					w.Header().Set("Link", "</style.css>; rel=preload")
					w.WriteHeader(http.StatusEarlyHints)
				}
			})
			fw := forward.New(o)
			defer fw.Transport().CloseIdleConnections()
			base, client := ingress(t, fw, p[0])
			var hints atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				Got1xxResponse: func(int, textproto.MIMEHeader) error { hints.Add(1); return nil },
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/page", nil)
			began := time.Now()
			resp, err := client.Do(req)
			took := time.Since(began)
			if err != nil {
				t.Fatalf("after %d hints, %v: %v", hints.Load(), took, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || hints.Load() > 32 {
				t.Errorf("client got %d after %d hints in %v, want 502 after at most 32", resp.StatusCode, hints.Load(), took)
			}
			if n := copies.Load(); n != 1 {
				t.Errorf("upstream saw %d copies", n)
			}
		})
	}
}

// TestForwardHugeConnectionList: an upstream response whose Connection
// field lists 9 MiB of options, the last naming a field it carries, is
// forwarded without that field and with the others. What the Forwarder
// allocates for the list is bounded by TestRemoveConnectionFieldsInPlace;
// the time and the process's allocations are logged (net/http reading
// the 9 MiB line takes about 59 MiB of them).
func TestForwardHugeConnectionList(t *testing.T) {
	var list strings.Builder
	for i := 0; list.Len() < 9<<20; i++ {
		fmt.Fprintf(&list, "o%d, ", i)
	}
	list.WriteString("x-named")
	o := httpUpstream(t, "h1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", list.String())
		w.Header().Set("X-Named", "hop-by-hop")
		w.Header().Set("X-Kept", "end-to-end")
		io.WriteString(w, "ok")
	})
	fw := forward.New(o)
	defer fw.Transport().CloseIdleConnections()
	base, client := ingress(t, fw, "h1")
	var resp *http.Response
	var body []byte
	var err error
	var took time.Duration
	var before, after runtime.MemStats // the process's, the upstream's included
	runtime.GC()
	runtime.ReadMemStats(&before)
	began := time.Now()
	resp, err = client.Get(base + "/page")
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took = time.Since(began)
	runtime.ReadMemStats(&after)
	n := after.TotalAlloc - before.TotalAlloc
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("X-Named") != "" || resp.Header.Get("X-Kept") != "end-to-end" {
		t.Errorf("client got %d %q, X-Named %q, X-Kept %q", resp.StatusCode, body, resp.Header.Get("X-Named"), resp.Header.Get("X-Kept"))
	}
	t.Logf("%v, %.1f MiB for a %.1f MiB Connection field", took, float64(n)/(1<<20), float64(list.Len())/(1<<20))
}

// TestForwardNegotiateEgress: EgressNegotiate speaks what ALPN selects over TLS
// (HTTP/2 here) and HTTP/1.1 over cleartext.
func TestForwardNegotiateEgress(t *testing.T) {
	protos := make(chan string, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { protos <- r.Proto })
	tlsUp := httptest.NewUnstartedServer(h)
	tlsUp.EnableHTTP2 = true
	tlsUp.StartTLS()
	defer tlsUp.Close()
	plainUp := httptest.NewServer(h)
	defer plainUp.Close()
	roots := x509.NewCertPool()
	roots.AddCert(tlsUp.Certificate())
	for _, tc := range []struct{ url, want string }{{tlsUp.URL, "HTTP/2.0"}, {plainUp.URL, "HTTP/1.1"}} {
		u, _ := url.Parse(tc.url)
		fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressNegotiate,
			TransportOptions: replaysafe.Options{TLSClientConfig: &tls.Config{RootCAs: roots}}})
		if c := do(t, fw, "GET", "/", nil).Code; c != 200 {
			t.Errorf("%s: status %d", tc.url, c)
		}
		fw.Transport().CloseIdleConnections()
		if got := <-protos; got != tc.want {
			t.Errorf("%s: upstream spoke %s, want %s", tc.url, got, tc.want)
		}
	}
}
