package replaysafe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// ---- HTTP/2 harness -----------------------------------------------------

func startH2(t *testing.T, cfg h2server.Config) *h2server.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := h2server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// h2Client returns a Transport speaking HTTP/2 only to s.
func h2Client(t *testing.T, s *h2server.Server, o replaysafe.Options) (*replaysafe.Transport, *observed) {
	t.Helper()
	obs := &observed{}
	o.Protocol = replaysafe.ProtocolHTTP2
	o.TLSClientConfig = s.ClientTLSConfig()
	o.Observer = obs.observer()
	tr := replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, obs
}

// h2Copies returns the streams for path the server received.
func h2Copies(s *h2server.Server, path string) []h2server.Received {
	var out []h2server.Received
	for _, r := range s.Requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// wantH2Copies checks the server received path n times, once on each of
// the connections listed (in order).
func wantH2Copies(t *testing.T, s *h2server.Server, path string, conns ...int) {
	t.Helper()
	cs := h2Copies(s, path)
	if len(cs) != len(conns) {
		t.Fatalf("server received %d copies of %s, want %d: %+v", len(cs), path, len(conns), cs)
	}
	for i, c := range cs {
		if c.Conn != conns[i] {
			t.Errorf("copy %d of %s on connection %d, want %d", i+1, path, c.Conn, conns[i])
		}
	}
}

func h2Script(conns ...[]h2server.Action) h2server.Config {
	cfg := h2server.Config{}
	for _, c := range conns {
		cfg.Conns = append(cfg.Conns, h2server.ConnScript{Streams: c})
	}
	return cfg
}

func forTLSAndH2C(t *testing.T, f func(t *testing.T, tls bool)) {
	t.Run("tls", func(t *testing.T) { f(t, true) })
	t.Run("h2c", func(t *testing.T) { f(t, false) })
}

// ---- HTTP/2 tests ---------------------------------------------------------

func TestH2Exchange(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		s := startH2(t, h2server.Config{TLS: useTLS, Default: h2server.Every(h2server.OK("hello"))})
		tr, obs := h2Client(t, s, replaysafe.Options{})
		for i := range 3 {
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "POST", s.URL()+"/x", "up"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "hello" || resp.ProtoMajor != 2 || (resp.TLS != nil) != useTLS {
				t.Fatalf("request %d: %q %v proto %s tls %v", i, b, err, resp.Proto, resp.TLS != nil)
			}
		}
		wantH2Copies(t, s, "/x", 0, 0, 0)
		if got := h2Copies(s, "/x")[2].Body; string(got) != "up" {
			t.Errorf("body %q", got)
		}
		as := obs.attemptsFor("/x")
		for i, a := range as {
			if a.Decision.Action != fsm.ActionDeliver || a.Reused != (i > 0) || a.Events[0].Proto != fsm.ProtoH2 {
				t.Errorf("attempt %d: %v reused %v events %v", i, a.Decision, a.Reused, a.Events)
			}
		}
		if tr.IdleConns() != 1 {
			t.Errorf("%d idle connections", tr.IdleConns())
		}
	})
}

// TestH2RefusedResentOnSameConnection: REFUSED_STREAM refuses the stream
// alone, so the resend runs on the same, healthy connection (no new dial;
// spec/choices.md).
func TestH2RefusedResentOnSameConnection(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		cfg := h2Script([]h2server.Action{h2server.Refuse()})
		cfg.TLS = useTLS
		s := startH2(t, cfg)
		tr, obs := h2Client(t, s, replaysafe.Options{})
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/p", "payload"))
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("%d %q %v", code, body, err)
		}
		wantH2Copies(t, s, "/p", 0, 0)
		wantDecisions(t, obs, "/p", fsm.RuleEvidenceRefusedStream, fsm.RuleDeliverFinalResponse)
		if n := len(s.Conns()); n != 1 {
			t.Errorf("%d connections, want 1", n)
		}
	})
}

func TestH2OneShotRefusedAfterBodyNotResent(t *testing.T) {
	s := startH2(t, h2Script([]h2server.Action{h2server.RefuseAfterBody()}))
	tr, obs := h2Client(t, s, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/p", "oneshot:payload"))
	wantRule(t, err, fsm.RuleEvidenceBodyConsumed, 1)
	wantH2Copies(t, s, "/p", 0)
	if got := h2Copies(s, "/p")[0].Body; string(got) != "payload" {
		t.Errorf("body %q", got)
	}
	wantDecisions(t, obs, "/p", fsm.RuleEvidenceBodyConsumed)
}

// closeCounter counts Close calls on a one-shot body.
type closeCounter struct {
	io.Reader
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

// TestH2OneShotBodyClosedOnce: x/net closes the request body of a failed
// stream, the wrapper keeps that from the caller's reader, and the
// caller's reader is closed exactly once, whether the GOAWAY below the
// stream led to a resend (the body was untouched) or not (x/net had read
// it).
func TestH2OneShotBodyClosedOnce(t *testing.T) {
	s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.GoAwayBelow()}))
	tr, obs := h2Client(t, s, replaysafe.Options{})
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	body := &closeCounter{Reader: strings.NewReader("x")}
	req := newRequest(t, t.Context(), "POST", s.URL()+"/p", "")
	req.Body, req.ContentLength = body, 1
	code, _, err := roundTrip(tr, req)
	as := obs.attemptsFor("/p")
	switch {
	case err == nil && code == 200:
		wantH2Copies(t, s, "/p", 0, 1)
		wantDecisions(t, obs, "/p", fsm.RuleEvidenceGoAwayBoundary, fsm.RuleDeliverFinalResponse)
	case err != nil:
		wantRule(t, err, fsm.RuleEvidenceBodyConsumed, 1)
		wantH2Copies(t, s, "/p", 0)
	default:
		t.Fatalf("%d %v %+v", code, err, as)
	}
	if body.closes != 1 {
		t.Errorf("caller's body closed %d times", body.closes)
	}
}

func TestH2GoAwayBelowResent(t *testing.T) {
	for _, method := range []string{"POST", "GET"} {
		t.Run(method, func(t *testing.T) {
			s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.GoAwayBelow()}))
			tr, obs := h2Client(t, s, replaysafe.Options{})
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", ""))
			if err != nil || code != 200 {
				t.Fatal(code, err)
			}
			code, _, err = roundTrip(tr, newRequest(t, t.Context(), method, s.URL()+"/t", "b"))
			if err != nil || code != 200 {
				t.Fatal(code, err)
			}
			wantH2Copies(t, s, "/t", 0, 1)
			wantDecisions(t, obs, "/t", fsm.RuleEvidenceGoAwayBoundary, fsm.RuleDeliverFinalResponse)
		})
	}
}

func TestH2GoAwayAtThenClose(t *testing.T) {
	for _, tc := range []struct {
		method string
		conns  []int
		rules  []fsm.Rule
	}{
		{"POST", []int{0}, []fsm.Rule{fsm.RuleAmbiguousNotIdempotent}},
		{"GET", []int{0, 1}, []fsm.Rule{fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse}},
	} {
		t.Run(tc.method, func(t *testing.T) {
			s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.GoAwayAt().WithClose(h2server.CloseFIN)}))
			tr, obs := h2Client(t, s, replaysafe.Options{})
			if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
				t.Fatal(code, err)
			}
			body := ""
			if tc.method == "POST" {
				body = "b"
			}
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), tc.method, s.URL()+"/t", body))
			if len(tc.conns) == 1 {
				wantRule(t, err, tc.rules[0], 1)
			} else if err != nil || code != 200 {
				t.Fatal(code, err)
			}
			wantH2Copies(t, s, "/t", tc.conns...)
			wantDecisions(t, obs, "/t", tc.rules...)
		})
	}
}

func TestH2ResetIsAmbiguous(t *testing.T) {
	s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.Reset(http2.ErrCodeInternal)}))
	tr, obs := h2Client(t, s, replaysafe.Options{})
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/t", "b"))
	wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
	wantH2Copies(t, s, "/t", 0)
	wantDecisions(t, obs, "/t", fsm.RuleAmbiguousNotIdempotent)
	// A stream reset leaves the connection usable.
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/after", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	wantH2Copies(t, s, "/after", 0)
}

// TestH2ResetResendKeepsConnection: a PUT whose stream the server resets
// with INTERNAL_ERROR (RS20) is resent on the same connection, which a
// stream error leaves usable (RFC 9113 §5.4.2): the server receives two
// byte-identical copies on its one connection, and the request after it
// rides that connection too; nothing dials.
func TestH2ResetResendKeepsConnection(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		cfg := h2Script([]h2server.Action{h2server.OK("ok"), h2server.Reset(http2.ErrCodeInternal), h2server.OK("again"), h2server.OK("after")})
		cfg.TLS = useTLS
		s := startH2(t, cfg)
		tr, obs := h2Client(t, s, replaysafe.Options{})
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
			t.Fatal(code, err)
		}
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/t", "the same bytes"))
		if err != nil || code != 200 || body != "again" {
			t.Fatal(code, body, err)
		}
		wantH2Copies(t, s, "/t", 0, 0)
		cs := h2Copies(s, "/t")
		if a, b := cs[0], cs[1]; string(a.Body) != "the same bytes" || string(b.Body) != string(a.Body) ||
			!reflect.DeepEqual(a.Fields, b.Fields) {
			t.Errorf("copies differ:\n%+v\n%+v", a, b)
		}
		wantDecisions(t, obs, "/t", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/after", "")); err != nil || code != 200 {
			t.Fatal(code, err)
		}
		wantH2Copies(t, s, "/after", 0)
		if n := len(s.Conns()); n != 1 {
			t.Errorf("server accepted %d connections, want 1", n)
		}
	})
}

func TestH2RefuseEverythingTwoCopies(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		s := startH2(t, h2server.Config{TLS: useTLS, Default: h2server.Every(h2server.Refuse())})
		tr, obs := h2Client(t, s, replaysafe.Options{})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/p", "b"))
		wantRule(t, err, fsm.RuleNoSecondResend, 2)
		wantH2Copies(t, s, "/p", 0, 0)
		wantDecisions(t, obs, "/p", fsm.RuleEvidenceRefusedStream, fsm.RuleNoSecondResend)
		if n := len(obs.errs); n != 1 || obs.requests != 1 {
			t.Errorf("observer: %d requests, %d errors", obs.requests, n)
		}
	})
}

// TestH2ConcurrencyLimitOpensConnection: with the server allowing one
// stream at a time, a request while a stream is open goes to another
// connection instead of waiting for the stream to end.
func TestH2ConcurrencyLimitOpensConnection(t *testing.T) {
	s := startH2(t, h2server.Config{MaxConcurrentStreams: 1, Default: h2server.Every(h2server.OK("ok"))})
	tr, obs := h2Client(t, s, replaysafe.Options{})
	// The warm-up's response follows the server's SETTINGS: the client
	// knows the limit afterwards.
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	// A POST whose body is still being written keeps its stream open.
	pr, pw := io.Pipe()
	open := newRequest(t, t.Context(), "POST", s.URL()+"/open", "")
	open.Body = pr
	done := make(chan error, 1)
	go func() {
		code, _, err := roundTrip(tr, open)
		if err == nil && code != 200 {
			err = errors.New(http.StatusText(code))
		}
		done <- err
	}()
	pw.Write([]byte("part"))
	for len(h2Copies(s, "/open")) == 0 {
		time.Sleep(time.Millisecond)
	}
	openConn := h2Copies(s, "/open")[0].Conn
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/t", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	cs := h2Copies(s, "/t")
	if len(cs) != 1 || cs[0].Conn == openConn {
		t.Errorf("target on %+v, the open stream on connection %d", cs, openConn)
	}
	wantDecisions(t, obs, "/t", fsm.RuleDeliverFinalResponse)
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantH2Copies(t, s, "/open", openConn)
	if n := len(s.Conns()); n < 2 {
		t.Errorf("%d connections", n)
	}
}

func TestH2OnlyRejectsHTTP1Server(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig()})
	t.Cleanup(tr.CloseIdleConnections)
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", ""))
	// The server refuses the handshake (no application protocol), or a
	// server that ignores ALPN completes it and is then refused here.
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	if n := len(copies(s, "/x")); n != 0 {
		t.Errorf("%d copies", n)
	}
}

func TestNegotiate(t *testing.T) {
	t.Run("h2", func(t *testing.T) {
		s := startH2(t, h2server.Config{TLS: true})
		tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolNegotiate, TLSClientConfig: s.ClientTLSConfig()})
		t.Cleanup(tr.CloseIdleConnections)
		resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/x", ""))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("proto %s", resp.Proto)
		}
		wantH2Copies(t, s, "/x", 0)
	})
	t.Run("http1", func(t *testing.T) {
		s := start(t, replaysafetest.Config{TLS: true})
		obs := &observed{}
		tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolNegotiate, TLSClientConfig: s.ClientTLSConfig(), Observer: obs.observer()})
		t.Cleanup(tr.CloseIdleConnections)
		for range 2 {
			get(t, tr, s, "/x")
		}
		wantCopies(t, s, "/x", 2)
		if as := obs.attemptsFor("/x"); len(as) != 2 || as[0].Events[0].Proto != fsm.ProtoH1 || !as[1].Reused ||
			as[1].Decision.Rule != fsm.RuleDeliverFinalResponse {
			t.Errorf("attempts %+v", as)
		}
	})
}

func TestH2ResponseHeaderTimeout(t *testing.T) {
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.Hang(0))})
	tr, _ := h2Client(t, s, replaysafe.Options{ResponseHeaderTimeout: 50 * time.Millisecond})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", ""))
	wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(err, &te) || te.Phase != fsm.PhaseHeader {
		t.Errorf("cause %v", err)
	}
	wantH2Copies(t, s, "/x", 0)
}

func TestH2GotConn(t *testing.T) {
	s := startH2(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("ok"))})
	tr, _ := h2Client(t, s, replaysafe.Options{})
	var reused []bool
	for range 2 {
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if i.Conn == nil {
				t.Error("GotConn without a connection")
			}
			reused = append(reused, i.Reused)
		}})
		if code, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/x", "")); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	if len(reused) != 2 || reused[0] || !reused[1] {
		t.Errorf("GotConn reused %v", reused)
	}
}

func TestH2ConnectionSpecificHeaderRejected(t *testing.T) {
	s := startH2(t, h2server.Config{})
	tr, obs := h2Client(t, s, replaysafe.Options{})
	for _, h := range [][2]string{{"Upgrade", "websocket"}, {"Connection", "upgrade"}, {"Transfer-Encoding", "gzip"}} {
		body := &closeCounter{Reader: strings.NewReader("x")}
		req := newRequest(t, t.Context(), "POST", s.URL()+"/x", "", h[0], h[1])
		req.Body, req.ContentLength = body, 1
		if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), h[0]) {
			t.Errorf("%s: %v", h[0], err)
		}
		if body.closes != 1 {
			t.Errorf("%s: body closed %d times", h[0], body.closes)
		}
	}
	if s.Count() != 0 || len(obs.attempts) != 0 {
		t.Errorf("%d streams, %d attempts", s.Count(), len(obs.attempts))
	}
	// Connection: close is allowed, and dropped by x/net.
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/ok", "", "Connection", "close")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
}

// h2Proxied returns a Transport under policy proto for the TLS origin s
// through proxy p, and what its Observer saw.
func h2Proxied(t *testing.T, s *h2server.Server, p *connectproxy.Server, proto replaysafe.Protocol) (*replaysafe.Transport, *observed) {
	t.Helper()
	obs := &observed{}
	tr := replaysafe.New(replaysafe.Options{
		Protocol:             proto,
		TLSClientConfig:      s.ClientTLSConfig(),
		Proxy:                http.ProxyURL(mustURL(t, p.URL())),
		ProxyTLSClientConfig: p.ClientTLSConfig(), // nil for a plain proxy
		Observer:             obs.observer(),
	})
	t.Cleanup(tr.CloseIdleConnections)
	return tr, obs
}

// HTTP/2 through a CONNECT proxy: TLS with the origin inside the tunnel
// selects h2 (an https proxy offering only http/1.1 gets an HTTP/1.1
// CONNECT; proxy_h2connect_test.go covers one that picks h2);
// a GET and a POST share the one tunnel, each reaching the origin once.
func TestH2ThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		proto    replaysafe.Protocol
		proxyTLS bool
	}{
		{"http2", replaysafe.ProtocolHTTP2, false},
		{"negotiate", replaysafe.ProtocolNegotiate, false},
		{"http2-https-proxy", replaysafe.ProtocolHTTP2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startH2(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("hello"))})
			p := startProxy(t, connectproxy.Config{TLS: tc.proxyTLS})
			tr, obs := h2Proxied(t, s, p, tc.proto)
			for _, r := range []struct{ method, path, body string }{{"GET", "/g", ""}, {"POST", "/p", "up"}} {
				resp, err := tr.RoundTrip(newRequest(t, t.Context(), r.method, s.URL()+r.path, r.body))
				if err != nil {
					t.Fatalf("%s: %v", r.method, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "hello" || resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != http2.NextProtoTLS {
					t.Fatalf("%s: %q %v proto %s tls %+v", r.method, b, err, resp.Proto, resp.TLS)
				}
			}
			wantH2Copies(t, s, "/g", 0)
			wantH2Copies(t, s, "/p", 0)
			if got := h2Copies(s, "/p")[0].Body; string(got) != "up" {
				t.Errorf("body %q", got)
			}
			if n := p.Tunnels(); n != 1 {
				t.Errorf("%d tunnels, want 1", n)
			}
			reqs := p.Requests()
			if len(reqs) != 1 || reqs[0].Target != s.Addr() {
				t.Errorf("CONNECT requests %+v", reqs)
			} else if tc.proxyTLS && !slices.Equal(reqs[0].ALPN, []string{"h2", "http/1.1"}) {
				// The proxy (http/1.1 only) picks HTTP/1.1 CONNECT.
				t.Errorf("ALPN with the proxy %q, want h2, http/1.1", reqs[0].ALPN)
			}
			as := append(obs.attemptsFor("/g"), obs.attemptsFor("/p")...)
			if len(as) != 2 {
				t.Fatalf("%d attempts, want 2", len(as))
			}
			for i, a := range as {
				if a.Decision.Action != fsm.ActionDeliver || a.Reused != (i > 0) || a.Events[0].Proto != fsm.ProtoH2 {
					t.Errorf("attempt %d: %v reused %v events %v", i, a.Decision, a.Reused, a.Events)
				}
			}
		})
	}
}

// A stream refused through the proxy is resent at once on a new
// connection, through a new tunnel: two copies, two tunnels.
func TestH2ThroughProxyRefusedResentInSameTunnel(t *testing.T) {
	cfg := h2Script([]h2server.Action{h2server.Refuse()})
	cfg.TLS = true
	s := startH2(t, cfg)
	p := startProxy(t, connectproxy.Config{})
	tr, obs := h2Proxied(t, s, p, replaysafe.ProtocolHTTP2)
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/p", "payload"))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	wantH2Copies(t, s, "/p", 0, 0)
	wantDecisions(t, obs, "/p", fsm.RuleEvidenceRefusedStream, fsm.RuleDeliverFinalResponse)
	if n := p.Tunnels(); n != 1 {
		t.Errorf("%d tunnels, want 1", n)
	}
}

// Under ProtocolNegotiate an origin behind the proxy that selects
// http/1.1 gets the request over HTTP/1.1 in the same tunnel: the
// connection ALPN answered on carries it, as a fresh one, and the origin
// accepted one connection.
func TestNegotiateThroughProxyHTTP1Origin(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{})
	tr, obs, _ := proxied(t, s, p, replaysafe.Options{Protocol: replaysafe.ProtocolNegotiate})
	get(t, tr, s, "/x")
	wantCopies(t, s, "/x", 1)
	if as := obs.attemptsFor("/x"); len(as) != 1 || as[0].Events[0].Proto != fsm.ProtoH1 {
		t.Errorf("attempts %+v", as)
	}
	if as := obs.attemptsFor("/x"); len(as) == 1 && as[0].Reused {
		t.Error("the connection ALPN answered on counts as reused")
	}
	if n, c := p.Tunnels(), s.Conns(); n != 1 || c != 1 {
		t.Errorf("%d tunnels and %d origin connections, want 1 and 1: the one ALPN answered on", n, c)
	}
}

// The one acquisition deadline holds on the HTTP/2 path too: a proxy
// that stalls the CONNECT fails the call as an acquire-phase timeout
// (RS06) naming the step and hop.
func TestH2ThroughProxyDeadlineNamesStep(t *testing.T) {
	const limit = 150 * time.Millisecond
	s := startH2(t, h2server.Config{TLS: true})
	p := startProxy(t, connectproxy.Config{Default: &connectproxy.Script{Stall: connectproxy.StallAfterRequest, StallFor: 10 * time.Second}})
	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolHTTP2,
		TLSClientConfig: s.ClientTLSConfig(),
		Proxy:           http.ProxyURL(mustURL(t, p.URL())),
		AcquireTimeout:  limit,
	})
	t.Cleanup(tr.CloseIdleConnections)
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", ""))
	wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	var de *route.DeadlineError
	if !errors.As(err, &te) || te.Phase != fsm.PhaseAcquire || !errors.As(err, &de) {
		t.Fatalf("error %v, want an acquire TimeoutError and a DeadlineError", err)
	}
	if de.Step != route.StepConnect || de.Hop != 1 {
		t.Errorf("deadline error %v: step %v hop %d", de, de.Step, de.Hop)
	}
	if s.Count() != 0 {
		t.Errorf("origin received %d streams", s.Count())
	}
}

// h2c through a proxy is refused before dialing.
func TestH2CThroughProxyRefused(t *testing.T) {
	s := startH2(t, h2server.Config{})
	proxied := func(*http.Request) (*url.URL, error) { return url.Parse("http://127.0.0.1:1") }
	tr, _ := h2Client(t, s, replaysafe.Options{Proxy: proxied})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", ""))
	// The plan refuses it before any connection (fsm/plan).
	var pe *replaysafe.ProxyError
	if !errors.As(err, &pe) || !errors.Is(err, plan.ErrH2CProxied) || s.Count() != 0 {
		t.Errorf("%v, %d streams", err, s.Count())
	}
}

func TestH2HTTPClient(t *testing.T) {
	s := startH2(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("ok"))})
	tr, _ := h2Client(t, s, replaysafe.Options{})
	c := &http.Client{Transport: tr}
	resp, err := c.Get(s.URL() + "/c")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("%q", b)
	}
}

// TestH2ConcurrentRequestsRespectTheLimit runs more concurrent requests
// than one connection may carry: every one is answered, each exactly once.
func TestH2ConcurrentRequestsRespectTheLimit(t *testing.T) {
	const n = 24
	s := startH2(t, h2server.Config{TLS: true, MaxConcurrentStreams: 4, Default: h2server.Every(h2server.OK("ok"))})
	tr, _ := h2Client(t, s, replaysafe.Options{})
	get := func(path string) error {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+path, ""))
		if err == nil && (code != 200 || body != "ok") {
			err = errors.New(http.StatusText(code) + " " + body)
		}
		return err
	}
	if err := get("/warm"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- get("/c" + strings.Repeat("x", i)) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range n {
		if cs := h2Copies(s, "/c"+strings.Repeat("x", i)); len(cs) != 1 {
			t.Errorf("request %d: %d copies", i, len(cs))
		}
	}
	perConn := map[int]int{}
	for _, r := range s.Requests() {
		perConn[r.Conn]++
	}
	t.Logf("streams per connection: %v", perConn)
}

func TestH2BodyClosedEarlyKeepsConnection(t *testing.T) {
	big := strings.Repeat("z", 1<<16)
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK(big))})
	tr, obs := h2Client(t, s, replaysafe.Options{})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/big", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	// fsm discards the exchange; on HTTP/2 that is the stream alone (x/net
	// resets it), and the connection carries on.
	wantDecisions(t, obs, "/big", fsm.RuleDeliverFinalResponse)
	if d := obs.attemptsFor("/big")[0].Decision; d.Conn != fsm.ConnDiscard {
		t.Errorf("decision %v", d)
	}
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/next", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	wantH2Copies(t, s, "/next", 0)
	// Same connection, but not reused in fsm's sense: it has not served a
	// complete exchange yet.
	if as := obs.attemptsFor("/next"); len(as) != 1 || as[0].Reused {
		t.Errorf("attempts %+v", as)
	}
}

func TestH2NoPoolClosesAfterUse(t *testing.T) {
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
	tr, _ := h2Client(t, s, replaysafe.Options{MaxIdleConnsPerHost: -1})
	for range 2 {
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", "")); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	wantH2Copies(t, s, "/x", 0, 1)
	if err := s.WaitConnClosed(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle", n)
	}
}

func TestH2BodyReadTimeout(t *testing.T) {
	s := startH2(t, h2Script([]h2server.Action{h2server.OK("never")}))
	tr, obs := h2Client(t, s, replaysafe.Options{BodyReadTimeout: 100 * time.Millisecond})
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(t.Context(), "PUT", s.URL()+"/slow", pr)
	if err != nil {
		t.Fatal(err)
	}
	go pw.Write([]byte("a little, then nothing"))
	_, _, err = roundTrip(tr, req)
	e := wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(e, &te) || te.Stall != replaysafe.StallProducer || !strings.Contains(te.Error(), "produced nothing for 100ms") {
		t.Fatalf("cause %#v", e.Err)
	}
	wantH2Copies(t, s, "/slow", 0)
	wantDecisions(t, obs, "/slow", fsm.RuleTimeout)
}

// TestH2IdleConnTimeout: an HTTP/2 connection left without a stream for
// IdleConnTimeout closes (the pool's timer, not x/net's), and the next
// request dials a new one.
func TestH2IdleConnTimeout(t *testing.T) {
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK("hello"))})
	tr, _ := h2Client(t, s, replaysafe.Options{IdleConnTimeout: 20 * time.Millisecond})
	for i, path := range []string{"/a", "/b"} {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+path, ""))
		if err != nil || code != 200 || body != "hello" {
			t.Fatalf("request %d: %d %q %v", i, code, body, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err = s.WaitConnClosed(ctx, i)
		cancel()
		if err != nil {
			t.Fatalf("connection %d not closed by the idle timeout: %v", i, err)
		}
		if n := tr.IdleConns(); n != 0 {
			t.Errorf("request %d: %d idle connections after the timeout", i, n)
		}
	}
	if n := s.Accepted(); n != 2 {
		t.Errorf("%d connections accepted, want 2", n)
	}
	wantH2Copies(t, s, "/a", 0)
	wantH2Copies(t, s, "/b", 1)
}

// TestH2EarlyCloseWhileUploading: the caller closes a response body
// before its end while its own request body, an io.Pipe, has given 5
// bytes and then nothing. Close returns without waiting for the
// producer: the request's writer, blocked in the caller's Read, is not
// waited for (on x/net's ClientConn, Close once hung until the producer
// wrote again). The server saw one request.
func TestH2EarlyCloseWhileUploading(t *testing.T) {
	var got atomic.Int64
	base := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		b := make([]byte, 5)
		io.ReadFull(r.Body, b)
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2})
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("hello"))
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/up", pr)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// The producer never writes again until the test ends, so a Close
	// that waits for it never returns: one that returns has passed.
	done := make(chan error, 1)
	go func() { done <- resp.Body.Close() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		pw.Close() // lets Close return, so that the test ends
		<-done
		t.Fatal("Close still blocked after a minute with the request body's producer idle")
	}
	if n := got.Load(); n != 1 {
		t.Errorf("server saw %d requests", n)
	}
}

// h2cServer starts net/http's server speaking h2c with prior knowledge
// on 127.0.0.1 with handler h, closed when the test ends, and returns
// its URL.
func h2cServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
