package replaysafe_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// ---- HTTP/3 harness -----------------------------------------------------

func startH3(t *testing.T, cfg h3server.Config) *h3server.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := h3server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// h3Client returns a Transport speaking HTTP/3 only to s.
func h3Client(t *testing.T, s *h3server.Server, o replaysafe.Options) (*replaysafe.Transport, *observed) {
	t.Helper()
	obs := &observed{}
	if o.Protocol == replaysafe.ProtocolNegotiate {
		o.Protocol = replaysafe.ProtocolHTTP3
	}
	o.TLSClientConfig = s.ClientTLSConfig()
	o.Observer = obs.observer()
	tr := replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, obs
}

func h3Script(conns ...[]h3server.Action) h3server.Config {
	cfg := h3server.Config{}
	for _, c := range conns {
		cfg.Conns = append(cfg.Conns, h3server.ConnScript{Streams: c})
	}
	return cfg
}

// wantH3Copies checks the server received path once on each of the
// connections listed (in order), byte-identical headers and bodies.
func wantH3Copies(t *testing.T, s *h3server.Server, path string, conns ...int) []h3server.Received {
	t.Helper()
	var cs []h3server.Received
	for _, r := range s.Requests() {
		if r.Path == path {
			cs = append(cs, r)
		}
	}
	if len(cs) != len(conns) {
		t.Fatalf("server received %d copies of %s, want %d: %+v", len(cs), path, len(conns), cs)
	}
	for i, c := range cs {
		if c.Conn != conns[i] {
			t.Errorf("copy %d of %s on connection %d, want %d", i+1, path, c.Conn, conns[i])
		}
		// Bodies compare where both copies were read to their end: a
		// stream rejected on its HEADERS has no body recorded.
		sameBody := !c.FIN || !cs[0].FIN || bytes.Equal(c.Body, cs[0].Body)
		if i > 0 && (!sameBody || c.Method != cs[0].Method || !sameFields(c, cs[0])) {
			t.Errorf("copy %d differs from copy 1:\n%+v\n%+v", i+1, c, cs[0])
		}
	}
	return cs
}

func sameFields(a, b h3server.Received) bool {
	if len(a.Fields) != len(b.Fields) {
		return false
	}
	for i := range a.Fields {
		if a.Fields[i] != b.Fields[i] {
			return false
		}
	}
	return true
}

// ---- exchanges ----------------------------------------------------------

func TestH3ExchangeReusesTheConnection(t *testing.T) {
	s := startH3(t, h3server.Config{Default: h3server.Every(h3server.OK("hello"))})
	tr, obs := h3Client(t, s, replaysafe.Options{})
	for i := range 3 {
		resp, err := tr.RoundTrip(newRequest(t, t.Context(), "POST", s.URL()+"/x", "up"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "hello" || resp.ProtoMajor != 3 || resp.TLS == nil {
			t.Fatalf("request %d: %q %v proto %s", i, b, err, resp.Proto)
		}
	}
	cs := wantH3Copies(t, s, "/x", 0, 0, 0)
	if string(cs[2].Body) != "up" || !cs[2].FIN {
		t.Errorf("recorded %q fin %v", cs[2].Body, cs[2].FIN)
	}
	for i, a := range obs.attemptsFor("/x") {
		if a.Decision.Action != fsm.ActionDeliver || a.Reused != (i > 0) || a.Events[0].Proto != fsm.ProtoH3 {
			t.Errorf("attempt %d: %v reused %v\n%s", i, a.Decision, a.Reused, a.Trace)
		}
	}
	if n := tr.IdleConns(); n != 1 {
		t.Errorf("%d idle connections, want 1", n)
	}
}

func TestH3Trailers(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{
		h3server.OK("with trailer").WithTrailer(http.Header{"X-Checksum": {"abc"}}),
	}))
	tr, _ := h3Client(t, s, replaysafe.Options{})
	req := newRequest(t, t.Context(), "PUT", s.URL()+"/t", "oneshot:payload")
	req.Trailer = http.Header{"X-Req-Sum": nil}
	body := req.Body
	req.Body = readCloserFunc(func(p []byte) (int, error) {
		n, err := body.Read(p)
		if err == io.EOF {
			req.Trailer.Set("X-Req-Sum", "7") // set at EOF, as net/http allows
		}
		return n, err
	})
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "with trailer" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("%q %v trailer %v", b, err, resp.Trailer)
	}
	cs := wantH3Copies(t, s, "/t", 0)
	if string(cs[0].Body) != "payload" || cs[0].Trailer.Get("X-Req-Sum") != "7" {
		t.Errorf("server recorded body %q trailer %v", cs[0].Body, cs[0].Trailer)
	}
}

type readCloserFunc func([]byte) (int, error)

func (f readCloserFunc) Read(p []byte) (int, error) { return f(p) }
func (f readCloserFunc) Close() error               { return nil }

// ---- evidence -------------------------------------------------------------

// TestH3RejectedResentOnNewConnection: after H3_REQUEST_REJECTED the
// resend runs on a new connection (a draining server's GOAWAY may come
// after the rejection, on another stream).
func TestH3RejectedResentOnNewConnection(t *testing.T) {
	for _, a := range []h3server.Action{h3server.Reject(), h3server.RejectAfterBody()} {
		t.Run(a.String(), func(t *testing.T) {
			s := startH3(t, h3Script([]h3server.Action{a}))
			tr, obs := h3Client(t, s, replaysafe.Options{})
			code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/p", "payload"))
			if err != nil || code != 200 || body != "ok" {
				t.Fatalf("%d %q %v", code, body, err)
			}
			cs := wantH3Copies(t, s, "/p", 0, 1)
			if string(cs[1].Body) != "payload" {
				t.Errorf("resent body %q", cs[1].Body)
			}
			wantDecisions(t, obs, "/p", fsm.RuleEvidenceRequestRejected, fsm.RuleDeliverFinalResponse)
		})
	}
}

// TestH3RejectedConnectionStaysForOthers: H3_REQUEST_REJECTED rejects a
// request, not its connection. The resend goes on a new connection (the
// server may be draining, its GOAWAY behind the rejection), but with no
// GOAWAY the rejecting connection stays pooled, and the next request
// takes it: no dial per rejection.
func TestH3RejectedConnectionStaysForOthers(t *testing.T) {
	s := startH3(t, h3Script(
		[]h3server.Action{h3server.OK("warm"), h3server.Reject(), h3server.OK("next")},
		[]h3server.Action{h3server.OK("ok")},
	))
	tr, obs := h3Client(t, s, replaysafe.Options{})
	for _, c := range []struct{ path, body string }{{"/warm", "warm"}, {"/p", "ok"}, {"/next", "next"}} {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+c.path, ""))
		if err != nil || code != 200 || body != c.body {
			t.Fatalf("%s: %d %q %v", c.path, code, body, err)
		}
	}
	wantH3Copies(t, s, "/p", 0, 1)
	wantH3Copies(t, s, "/next", 0)
	wantDecisions(t, obs, "/p", fsm.RuleEvidenceRequestRejected, fsm.RuleDeliverFinalResponse)
	if n := len(s.Conns()); n != 2 {
		t.Errorf("the server accepted %d connections, want 2: the first and the resend's", n)
	}
}

// TestH3RejectedResentOnAnotherPooledConnection: H3_REQUEST_REJECTED on
// a connection that stays open, with no GOAWAY, judges that one request
// on that one connection (RS15, RFC 9114 §4.1.1), so its resend takes
// another pooled connection that got no GOAWAY, even one dialed before
// the rejection, instead of dialing (spec/choices.md, choice 22).
// Connection 1 joins the pool for the one-shot POST (a one-shot body
// starts on a new connection), so both are pooled, and the GET after it
// takes connection 0, which rejects it.
func TestH3RejectedResentOnAnotherPooledConnection(t *testing.T) {
	s := startH3(t, h3Script(
		[]h3server.Action{h3server.OK("warm"), h3server.Reject(), h3server.OK("on the rejecter")},
		[]h3server.Action{h3server.OK("one"), h3server.OK("ok")},
	))
	tr, obs := h3Client(t, s, replaysafe.Options{})
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/warm", "", "warm"},
		{"POST", "/one", "oneshot:stream", "one"},
		{"GET", "/p", "", "ok"},
	} {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), c.method, s.URL()+c.path, c.body))
		if err != nil || code != 200 || body != c.want {
			t.Fatalf("%s: %d %q %v", c.path, code, body, err)
		}
	}
	wantH3Copies(t, s, "/one", 1)
	wantH3Copies(t, s, "/p", 0, 1)
	wantDecisions(t, obs, "/p", fsm.RuleEvidenceRequestRejected, fsm.RuleDeliverFinalResponse)
	if as := obs.attemptsFor("/p"); !as[1].Reused {
		t.Errorf("the resend's connection was not reused: %+v", as[1])
	}
	if n := s.Accepted(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2: the resend dialed", n)
	}
}

// TestH3RejectedAloneRedialsWithoutAnother: with only the rejecting
// connection pooled, the resend of a request it rejected (RS15) waits
// for a connection dialed after the rejection, never taking the
// rejecting one, though it stays open with no GOAWAY: a draining
// server's GOAWAY may trail the rejection (choice 22).
func TestH3RejectedAloneRedialsWithoutAnother(t *testing.T) {
	s := startH3(t, h3Script(
		[]h3server.Action{h3server.OK("warm"), h3server.Reject(), h3server.OK("on the rejecter")},
		[]h3server.Action{h3server.OK("ok")},
	))
	tr, obs := h3Client(t, s, replaysafe.Options{})
	for _, c := range []struct{ path, want string }{{"/warm", "warm"}, {"/p", "ok"}} {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+c.path, ""))
		if err != nil || code != 200 || body != c.want {
			t.Fatalf("%s: %d %q %v", c.path, code, body, err)
		}
	}
	wantH3Copies(t, s, "/p", 0, 1)
	wantDecisions(t, obs, "/p", fsm.RuleEvidenceRequestRejected, fsm.RuleDeliverFinalResponse)
	if n := s.Accepted(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2: the first and the resend's", n)
	}
}

func TestH3RejectEverythingTwoCopies(t *testing.T) {
	s := startH3(t, h3server.Config{Default: h3server.Every(h3server.Reject())})
	tr, _ := h3Client(t, s, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "DELETE", s.URL()+"/d", ""))
	e := wantRule(t, err, fsm.RuleNoSecondResend, 2)
	var h3e *http3.Error
	if !errors.As(e, &h3e) || h3e.ErrorCode != http3.ErrCodeRequestRejected {
		t.Errorf("cause %v, want H3_REQUEST_REJECTED", e.Err)
	}
	wantH3Copies(t, s, "/d", 0, 1)
}

func TestH3OneShotRejectedAfterBodyNotResent(t *testing.T) {
	// The one-shot reader was consumed: the evidence cannot be used.
	s := startH3(t, h3Script([]h3server.Action{h3server.RejectAfterBody()}))
	tr, _ := h3Client(t, s, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/o", "oneshot:once"))
	wantRule(t, err, fsm.RuleEvidenceBodyConsumed, 1)
	wantH3Copies(t, s, "/o", 0)
}

func TestH3GoAwayBoundary(t *testing.T) {
	t.Run("our stream not processed", func(t *testing.T) {
		// GOAWAY carrying our own stream ID, then the connection closes
		// without resetting the stream: only the boundary says the POST
		// was not processed (RFC 9114 §5.2).
		s := startH3(t, h3Script([]h3server.Action{h3server.OK("first"), h3server.GoAwayRejecting().WithClose()}))
		tr, obs := h3Client(t, s, replaysafe.Options{})
		if code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil || body != "first" {
			t.Fatalf("%d %q %v", code, body, err)
		}
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/g", "pay"))
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("%d %q %v", code, body, err)
		}
		wantH3Copies(t, s, "/g", 0, 1)
		wantDecisions(t, obs, "/g", fsm.RuleEvidenceGoAwayBoundary, fsm.RuleDeliverFinalResponse)
		a := obs.attemptsFor("/g")[0]
		if !strings.Contains(a.Trace, "h3-goaway boundary=4 stream=4") {
			t.Errorf("trace lacks the boundary:\n%s", a.Trace)
		}
	})
	t.Run("our stream may be processed", func(t *testing.T) {
		s := startH3(t, h3Script([]h3server.Action{h3server.OK("first"), h3server.GoAway(8).WithClose()}))
		tr, obs := h3Client(t, s, replaysafe.Options{})
		if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil {
			t.Fatal(err)
		}
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/g", "pay"))
		wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
		wantH3Copies(t, s, "/g", 0)
		wantDecisions(t, obs, "/g", fsm.RuleAmbiguousNotIdempotent)
	})
}

func TestH3NoNewRequestAfterGoAway(t *testing.T) {
	// The first request is answered under a GOAWAY that leaves the
	// connection open. The next request goes to a new connection; if it
	// was sent before quic-go read the GOAWAY from the control stream, the
	// server rejects it unprocessed and it is resent there. Either way the
	// server processes it exactly once, on connection 1.
	s := startH3(t, h3Script([]h3server.Action{h3server.GoAwayAfter()}))
	tr, obs := h3Client(t, s, replaysafe.Options{})
	for _, p := range []string{"/a", "/b"} {
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+p, "x")); err != nil || code != 200 {
			t.Fatalf("%s: %d %v", p, code, err)
		}
	}
	wantH3Copies(t, s, "/a", 0)
	var processed []h3server.Received
	for _, r := range s.Requests() {
		if r.Path == "/b" && !r.Ignored {
			processed = append(processed, r)
		}
	}
	if len(processed) != 1 || processed[0].Conn != 1 {
		t.Fatalf("/b processed %d times: %+v", len(processed), processed)
	}
	if as := obs.attemptsFor("/b"); len(as) == 2 {
		wantH3Copies(t, s, "/b", 0, 1)
		wantDecisions(t, obs, "/b", fsm.RuleEvidenceRequestRejected, fsm.RuleDeliverFinalResponse)
	} else {
		wantH3Copies(t, s, "/b", 1)
		wantDecisions(t, obs, "/b", fsm.RuleDeliverFinalResponse)
	}
}

// ---- ambiguous failures ---------------------------------------------------

func TestH3ResetIsAmbiguous(t *testing.T) {
	script := func() h3server.Config {
		return h3Script([]h3server.Action{h3server.OK("first"), h3server.Reset(http3.ErrCodeInternalError)})
	}
	t.Run("POST fails once", func(t *testing.T) {
		s := startH3(t, script())
		tr, _ := h3Client(t, s, replaysafe.Options{})
		if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil {
			t.Fatal(err)
		}
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay"))
		wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
		wantH3Copies(t, s, "/r", 0)
	})
	// The server reset the stream alone: its QUIC connection stays usable
	// (RFC 9114 §8), and the resend takes it again (choice 23).
	t.Run("PUT on a reused connection is resent on it", func(t *testing.T) {
		s := startH3(t, script())
		tr, obs := h3Client(t, s, replaysafe.Options{})
		if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil {
			t.Fatal(err)
		}
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/r", "pay"))
		if err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
		wantH3Copies(t, s, "/r", 0, 0)
		wantDecisions(t, obs, "/r", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
		if n := s.Accepted(); n != 1 {
			t.Errorf("server accepted %d connections, want 1", n)
		}
	})
}

func TestH3CloseCrossingTheRequest(t *testing.T) {
	for _, c := range []struct {
		method string
		conns  []int
		rules  []fsm.Rule
	}{
		{"GET", []int{0, 1}, []fsm.Rule{fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse}},
		{"POST", []int{0}, []fsm.Rule{fsm.RuleAmbiguousNotIdempotent}},
	} {
		t.Run(c.method, func(t *testing.T) {
			s := startH3(t, h3Script([]h3server.Action{h3server.OK("first"), h3server.CloseConnAfterBody()}))
			tr, obs := h3Client(t, s, replaysafe.Options{})
			if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil {
				t.Fatal(err)
			}
			body := ""
			if c.method == "POST" {
				body = "pay"
			}
			_, _, err := roundTrip(tr, newRequest(t, t.Context(), c.method, s.URL()+"/c", body))
			if c.method == "POST" {
				wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
			} else if err != nil {
				t.Fatal(err)
			}
			wantH3Copies(t, s, "/c", c.conns...)
			wantDecisions(t, obs, "/c", c.rules...)
		})
	}
}

func TestH3FreshConnectionFailureNotResent(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.CloseConnAfterBody()}))
	tr, _ := h3Client(t, s, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/f", ""))
	wantRule(t, err, fsm.RuleAmbiguousFreshConn, 1)
	wantH3Copies(t, s, "/f", 0)
}

func TestH3OneShotStartsOnFreshConnection(t *testing.T) {
	s := startH3(t, h3server.Config{})
	tr, obs := h3Client(t, s, replaysafe.Options{})
	if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/warm", "")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/one", "oneshot:stream")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/buf", "buffered")); err != nil {
		t.Fatal(err)
	}
	wantH3Copies(t, s, "/one", 1)
	wantH3Copies(t, s, "/buf", 0)
	if a := obs.attemptsFor("/one"); len(a) != 1 || a[0].Reused {
		t.Errorf("one-shot attempt %+v", a)
	}
}

// ---- the request lifecycle ------------------------------------------------

func TestH3EarlyResponseWhileUploading(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.EarlyResponse(200, nil, []byte("early"))}))
	tr, obs := h3Client(t, s, replaysafe.Options{})
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL()+"/up", pr)
	if err != nil {
		t.Fatal(err)
	}
	go pw.Write([]byte("part one, "))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "early" {
		t.Fatalf("%q %v", b, err)
	}
	// The response is complete; the upload goes on.
	if _, err := pw.Write([]byte("part two")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ctx := t.Context()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs := wantH3Copies(t, s, "/up", 0)
		if cs[0].FIN {
			if string(cs[0].Body) != "part one, part two" {
				t.Fatalf("server recorded %q", cs[0].Body)
			}
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("upload never finished: %+v", cs[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantDecisions(t, obs, "/up", fsm.RuleDeliverFinalResponse)
}

func TestH3StopSendingAfterResponse(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.StopSending(0)}))
	tr, _ := h3Client(t, s, replaysafe.Options{})
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL()+"/stop", pr)
	if err != nil {
		t.Fatal(err)
	}
	go pw.Write([]byte("some"))
	code, _, err := roundTrip(tr, req)
	if err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	wantH3Copies(t, s, "/stop", 0)
}

func TestH3UploadStallTimeout(t *testing.T) {
	// The server reads nothing of the body for a long while and its stream
	// window is small: the upload blocks in QUIC flow control.
	cfg := h3Script([]h3server.Action{h3server.StallRead(10 * time.Second)})
	cfg.StreamReceiveWindow = 4 << 10
	s := startH3(t, cfg)
	tr, obs := h3Client(t, s, replaysafe.Options{UploadStallTimeout: 150 * time.Millisecond})
	big := strings.Repeat("x", 256<<10)
	// The call ends by the stall bound, not by the server's 10 s: the
	// cause says which bound ended it.
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/stall", big))
	e := wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(e, &te) || te.Stall != replaysafe.StallTransport || te.Phase != fsm.PhaseWrite {
		t.Fatalf("cause %#v", e.Err)
	}
	wantH3Copies(t, s, "/stall", 0)
	wantDecisions(t, obs, "/stall", fsm.RuleTimeout)
}

func TestH3BodyReadTimeout(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.OK("never")}))
	tr, _ := h3Client(t, s, replaysafe.Options{BodyReadTimeout: 100 * time.Millisecond})
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
	if !errors.As(e, &te) || te.Stall != replaysafe.StallProducer {
		t.Fatalf("cause %#v", e.Err)
	}
	if !e.Timeout() {
		t.Error("Timeout() false")
	}
	wantH3Copies(t, s, "/slow", 0)
}

func TestH3CanceledDuringUpload(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.OK("never")}))
	tr, _ := h3Client(t, s, replaysafe.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(ctx, "PUT", s.URL()+"/cancel", pr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pw.Write([]byte("start"))
		// Cancel once the server has the request's HEADERS.
		for i := 0; i < 500 && s.Count() == 0; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, _, err = roundTrip(tr, req)
	wantRule(t, err, fsm.RuleCanceled, 1)
	wantH3Copies(t, s, "/cancel", 0)
}

// ---- policies ---------------------------------------------------------------

func TestH3RequiresHTTPS(t *testing.T) {
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3})
	_, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", "http://127.0.0.1:1/", ""))
	if err == nil || !strings.Contains(err.Error(), "HTTP/3 needs an https URL") {
		t.Fatalf("err %v", err)
	}
}

func TestH3ThroughProxyRefused(t *testing.T) {
	proxyURL, _ := url.Parse("http://127.0.0.1:1")
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, Proxy: http.ProxyURL(proxyURL)})
	_, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", "https://127.0.0.1:2/", ""))
	var pe *replaysafe.ProxyError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "HTTP/3") {
		t.Fatalf("err %v, want a ProxyError naming HTTP/3", err)
	}
}

func TestPreferHTTP3(t *testing.T) {
	t.Run("uses HTTP/3 when it answers", func(t *testing.T) {
		s := startH3(t, h3server.Config{})
		tr, _ := h3Client(t, s, replaysafe.Options{Protocol: replaysafe.ProtocolPreferHTTP3})
		resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/p", ""))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 3 {
			t.Fatalf("proto %s", resp.Proto)
		}
		wantH3Copies(t, s, "/p", 0)
	})
	t.Run("falls back to TCP without sending", func(t *testing.T) {
		// A TLS HTTP/1.1 origin; nothing listens on its port over UDP.
		s := start(t, replaysafetest.Config{TLS: true})
		obs := &observed{}
		tr := replaysafe.New(replaysafe.Options{
			Protocol:        replaysafe.ProtocolPreferHTTP3,
			TLSClientConfig: s.ClientTLSConfig(),
			QUICConfig:      &quic.Config{HandshakeIdleTimeout: 100 * time.Millisecond},
			Observer:        obs.observer(),
		})
		t.Cleanup(tr.CloseIdleConnections)
		for range 2 {
			code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/fb", "pay"))
			if err != nil || code != 200 || body != "ok" {
				t.Fatalf("%d %q %v", code, body, err)
			}
		}
		wantCopies(t, s, "/fb", 2)
		as := obs.attemptsFor("/fb")
		if len(as) != 2 || as[0].Events[0].Proto != fsm.ProtoH1 || !as[1].Reused {
			t.Fatalf("attempts %+v", as)
		}
	})
}

func TestH3TransportStallAfterResponseRetiresConnection(t *testing.T) {
	// The server answers at once and then reads nothing for a long while:
	// the response is complete while the upload sits in flow control.
	cfg := h3Script([]h3server.Action{h3server.EarlyResponse(200, nil, []byte("early")).WithStall(10 * time.Second)})
	cfg.StreamReceiveWindow = 4 << 10
	s := startH3(t, cfg)
	tr, obs := h3Client(t, s, replaysafe.Options{UploadStallTimeout: 150 * time.Millisecond})
	big := strings.Repeat("y", 256<<10)
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/late", big))
	if err != nil || code != 200 || body != "early" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	// The stall retires the connection; idle, it closes at once.
	if err := s.WaitConnClosed(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if c := s.Conns()[0]; !c.ClosedByClient {
		t.Errorf("connection 0 closed by the server: %+v", c)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after the stall, want 0", n)
	}
	wantH3Copies(t, s, "/late", 0)
	wantDecisions(t, obs, "/late", fsm.RuleDeliverFinalResponse)
}

func TestH3ProducerStallAfterResponseEndsTheUpload(t *testing.T) {
	s := startH3(t, h3Script([]h3server.Action{h3server.EarlyResponse(200, nil, []byte("early"))}))
	tr, _ := h3Client(t, s, replaysafe.Options{BodyReadTimeout: 50 * time.Millisecond})
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(t.Context(), "PUT", s.URL()+"/producer", pr)
	if err != nil {
		t.Fatal(err)
	}
	go pw.Write([]byte("first part"))
	code, body, err := roundTrip(tr, req)
	if err != nil || code != 200 || body != "early" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	// The producer gives nothing more; its next piece comes too late and
	// ends the upload with a reset instead of a FIN.
	time.Sleep(500 * time.Millisecond)
	pw.Write([]byte("too late"))
	rs, err := s.WaitRequests(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.FIN || !r.ClientReset {
		t.Errorf("upload ended with FIN %v, reset %v (%v): %q", r.FIN, r.ClientReset, r.ClientResetCode, r.Body)
	}
	wantH3Copies(t, s, "/producer", 0)
	// The connection itself is fine and serves the next request.
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/next", "")); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	wantH3Copies(t, s, "/next", 0)
}

func TestDiscoverHTTP3ByAltSvc(t *testing.T) {
	h3s := startH3(t, h3server.Config{})
	_, h3port, _ := strings.Cut(h3s.Addr(), ":")
	advertise := replaysafetest.Respond(200, "ok")
	advertise.Header = http.Header{"Alt-Svc": {`h3=":` + h3port + `"; ma=60`}}
	tcp := start(t, replaysafetest.Config{TLS: true, Conns: []replaysafetest.ConnScript{replaysafetest.Script(advertise)}})
	tlsConf := tcp.ClientTLSConfig()
	tlsConf.RootCAs.AddCert(h3s.Certificate()) // both origins' certificates
	obs := &observed{}
	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolDiscoverHTTP3,
		TLSClientConfig: tlsConf,
		QUICConfig:      &quic.Config{HandshakeIdleTimeout: 100 * time.Millisecond},
		Observer:        obs.observer(),
	})
	t.Cleanup(tr.CloseIdleConnections)
	protoOf := func(path string) int {
		t.Helper()
		resp, err := tr.RoundTrip(newRequest(t, t.Context(), "POST", tcp.URL()+path, "pay"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.ProtoMajor
	}

	// The first call goes over TCP and learns the advertisement; the next
	// goes to the advertised HTTP/3 port.
	if p := protoOf("/first"); p != 1 {
		t.Fatalf("first call over HTTP/%d", p)
	}
	if p := protoOf("/second"); p != 3 {
		t.Fatalf("second call over HTTP/%d", p)
	}
	wantCopies(t, tcp, "/first", 1)
	if n := len(copies(tcp, "/second")); n != 0 {
		t.Fatalf("the TCP origin received %d copies of /second", n)
	}
	wantH3Copies(t, h3s, "/second", 0)

	// The HTTP/3 origin goes away: the next call cannot connect over QUIC
	// and falls back to TCP without sending anything, as one attempt.
	h3s.Close()
	tr.CloseIdleConnections()
	if p := protoOf("/third"); p != 1 {
		t.Fatalf("third call over HTTP/%d", p)
	}
	wantCopies(t, tcp, "/third", 1)
	if as := obs.attemptsFor("/third"); len(as) != 1 || as[0].Events[0].Proto != fsm.ProtoH1 {
		t.Fatalf("third call's attempts: %+v", as)
	}
}

func TestH3IdleConnTimeout(t *testing.T) {
	s := startH3(t, h3server.Config{})
	tr, _ := h3Client(t, s, replaysafe.Options{IdleConnTimeout: 100 * time.Millisecond})
	for _, p := range []string{"/a", "/b"} {
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+p, "")); err != nil || code != 200 {
			t.Fatalf("%s: %d %v", p, code, err)
		}
	}
	// Both went over one connection, which then closes after the limit.
	wantH3Copies(t, s, "/a", 0)
	wantH3Copies(t, s, "/b", 0)
	if err := s.WaitConnClosed(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if c := s.Conns()[0]; !c.ClosedByClient {
		t.Errorf("connection closed by the server: %+v", c)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after the idle limit", n)
	}
}

func TestH3ConnectionsShareOneSocket(t *testing.T) {
	// Two origins, one Transport: both QUIC connections come from the same
	// local UDP address.
	s1, s2 := startH3(t, h3server.Config{}), startH3(t, h3server.Config{})
	tlsConf := s1.ClientTLSConfig()
	tlsConf.RootCAs.AddCert(s2.Certificate())
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, TLSClientConfig: tlsConf})
	t.Cleanup(tr.CloseIdleConnections)
	for _, s := range []*h3server.Server{s1, s2} {
		if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/x", "")); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
	}
	if a, b := s1.Conns()[0].Remote, s2.Conns()[0].Remote; a != b {
		t.Errorf("connections from %s and %s, want one socket", a, b)
	}
}

// Over HTTP/3 a request without a body goes on a stream its attempt
// opens itself, where the informational responses are held to
// MaxResponseHeaderBytes in total as on every protocol; a request with
// a body goes through quic-go's ClientConn.RoundTrip, which ignores the
// hook's verdict and holds them to its own cap of five. Three 103s of
// 2 KiB against a bound of 4 KiB: the GET fails at the second (RS07,
// after one attempt), the POST is answered; the server received each
// once.
func TestH3InformationalBytesBound(t *testing.T) {
	a := h3server.OK("done")
	for range 3 {
		a = a.WithInformational(http.StatusEarlyHints, http.Header{"Link": {strings.Repeat("x", 2048)}})
	}
	s := startH3(t, h3server.Config{Default: h3server.Every(a)})
	tr, _ := h3Client(t, s, replaysafe.Options{MaxResponseHeaderBytes: 4096})

	_, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/get", ""))
	var e *replaysafe.Error
	var le *informational.LimitError
	if !errors.As(err, &e) || e.Attempts != 1 || e.Rule != fsm.RuleResponseStarted || !errors.As(err, &le) || le.Count != 2 {
		t.Fatalf("GET: %v, want RS07 after 1 attempt at the second 103", err)
	}
	wantH3Copies(t, s, "/get", 0)

	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "POST", s.URL()+"/post", "up"))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(b) != "done" {
		t.Fatalf("POST: %d %q %v", resp.StatusCode, b, err)
	}
	wantH3Copies(t, s, "/post", 0)
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// TestCanceledUploadClosesTheBody: a PUT whose body, an io.Pipe, gave 5
// bytes and then nothing is canceled once the server has its headers.
// Within a second of RoundTrip's return the caller's body is closed, so
// that the stack's goroutine reading it, and the caller's producer, are
// let go, over HTTP/2 (x/net closes it) and HTTP/3 (before, quic-go closed
// it only after a Read returned, which the idle producer never let
// happen). The server saw one copy.
func TestCanceledUploadClosesTheBody(t *testing.T) {
	for _, proto := range []string{"h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			var tr *replaysafe.Transport
			var url string
			var count func() int
			if proto == "h2" {
				s := startH2(t, h2Script([]h2server.Action{h2server.OK("never")}))
				tr, _ = h2Client(t, s, replaysafe.Options{})
				url, count = s.URL(), s.Count
			} else {
				s := startH3(t, h3Script([]h3server.Action{h3server.OK("never")}))
				tr, _ = h3Client(t, s, replaysafe.Options{})
				url, count = s.URL(), s.Count
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			pr, pw := io.Pipe()
			defer pw.Close()
			body := &closeRecorder{Reader: pr}
			go func() {
				pw.Write([]byte("start"))
				for i := 0; i < 500 && count() == 0; i++ {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			req, _ := http.NewRequestWithContext(ctx, "PUT", url+"/cancel", body)
			if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want the cancellation", err)
			}
			for i := 0; i < 50 && !body.closed.Load(); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if !body.closed.Load() {
				t.Error("the request body is still open 1 s after the canceled RoundTrip returned")
			}
			if n := count(); n != 1 {
				t.Errorf("server saw %d copies", n)
			}
		})
	}
}

// heldUDP relays datagrams between one client and target, dropping every
// one until release is called: a QUIC handshake through it waits, and
// completes at the client's next retransmission after release. It stops
// with the test.
func heldUDP(t *testing.T, target string) (port string, release func()) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	var client atomic.Pointer[net.Addr]
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); up.Close(); wg.Wait() })
	wg.Go(func() { // client → server
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			client.Store(&from)
			if open.Load() {
				up.Write(buf[:n])
			}
		}
	})
	wg.Go(func() { // server → client
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if to := client.Load(); to != nil {
				pc.WriteTo(buf[:n], *to)
			}
		}
	})
	_, port, _ = strings.Cut(pc.LocalAddr().String(), ":")
	return port, func() { open.Store(true) }
}

// TestBackgroundQUICDialAfterCloseIdle: a call that gave up waiting for a
// new QUIC connection (its head start of 50 ms passed) went over TCP; the
// QUIC handshake goes on in the background and completes after the
// caller's CloseIdleConnections. That connection is closed, not kept
// idle: as net/http closes connections that become idle after the call,
// nothing the Transport had started stays open past it.
func TestBackgroundQUICDialAfterCloseIdle(t *testing.T) {
	h3s := startH3(t, h3server.Config{})
	port, release := heldUDP(t, h3s.Addr())
	advertise := replaysafetest.Respond(200, "ok")
	advertise.Header = http.Header{"Alt-Svc": {`h3=":` + port + `"; ma=60`}}
	tcp := start(t, replaysafetest.Config{TLS: true, Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(advertise, replaysafetest.OK())}})
	tlsConf := tcp.ClientTLSConfig()
	tlsConf.RootCAs.AddCert(h3s.Certificate())
	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolDiscoverHTTP3,
		TLSClientConfig: tlsConf,
		HTTP3HeadStart:  50 * time.Millisecond,
	})
	t.Cleanup(tr.CloseIdleConnections)
	for _, path := range []string{"/first", "/second"} {
		if code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", tcp.URL()+path, "")); err != nil || code != 200 || body != "ok" {
			t.Fatalf("%s: %d %q %v", path, code, body, err)
		}
	}
	wantCopies(t, tcp, "/second", 1) // over TCP: the QUIC handshake is held
	tr.CloseIdleConnections()
	release()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h3s.WaitConns(ctx, 1); err != nil {
		t.Fatalf("the background QUIC handshake did not complete: %v", err)
	}
	if err := h3s.WaitConnClosed(ctx, 0); err != nil {
		t.Errorf("the connection the background dial made after CloseIdleConnections is still open: %v (%d idle)", err, tr.IdleConns())
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after CloseIdleConnections", n)
	}
	if n := h3s.Count(); n != 0 {
		t.Errorf("the QUIC server received %d requests", n)
	}
}
