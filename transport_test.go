package replaysafe_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/spec"
)

// ---- harness -----------------------------------------------------------

// start starts a scripted server closed at the end of the test.
func start(t *testing.T, cfg replaysafetest.Config) *replaysafetest.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := replaysafetest.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// observed collects what an Observer saw.
type observed struct {
	mu        sync.Mutex
	requests  int
	responses int
	errs      []error
	attempts  []replaysafe.AttemptReport
}

func (o *observed) observer() replaysafe.Observer {
	return replaysafe.Observer{
		OnRequest: func(*http.Request) { o.mu.Lock(); o.requests++; o.mu.Unlock() },
		OnAttempt: func(a replaysafe.AttemptReport) {
			o.mu.Lock()
			o.attempts = append(o.attempts, a)
			o.mu.Unlock()
		},
		OnResponse: func(*http.Request, *http.Response) { o.mu.Lock(); o.responses++; o.mu.Unlock() },
		OnError:    func(_ *http.Request, err error) { o.mu.Lock(); o.errs = append(o.errs, err); o.mu.Unlock() },
	}
}

// attemptsFor returns the attempt reports of requests to path.
func (o *observed) attemptsFor(path string) []replaysafe.AttemptReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []replaysafe.AttemptReport
	for _, a := range o.attempts {
		if a.Request.URL.Path == path {
			out = append(out, a)
		}
	}
	return out
}

// client returns a Transport for s, its idle connections closed at the end
// of the test, and what its Observer saw.
func client(t *testing.T, s *replaysafetest.Server, o replaysafe.Options) (*replaysafe.Transport, *observed) {
	t.Helper()
	obs := &observed{}
	o.TLSClientConfig = s.ClientTLSConfig()
	o.Observer = obs.observer()
	tr := replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, obs
}

// newRequest builds a request; body "" means none, a body starting with
// "oneshot:" is a one-shot reader (no GetBody) of the rest.
func newRequest(t *testing.T, ctx context.Context, method, url, body string, hdr ...string) *http.Request {
	t.Helper()
	var r io.Reader
	switch {
	case strings.HasPrefix(body, "oneshot:"):
		r = &oneShot{strings.NewReader(strings.TrimPrefix(body, "oneshot:"))}
	case body != "":
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := r.(*oneShot); ok {
		req.ContentLength = int64(o.r.(*strings.Reader).Len())
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

type oneShot struct{ r io.Reader }

func (o *oneShot) Read(p []byte) (int, error) { return o.r.Read(p) }

// roundTrip sends req and reads the whole body.
func roundTrip(tr http.RoundTripper, req *http.Request) (int, string, error) {
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// get sends GET path and expects 200 "ok".
func get(t *testing.T, tr http.RoundTripper, s *replaysafetest.Server, path string) {
	t.Helper()
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+path, ""))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("GET %s: %d %q %v", path, code, body, err)
	}
}

// copies returns the complete requests for path the server received.
func copies(s *replaysafetest.Server, path string) []replaysafetest.Received {
	var out []replaysafetest.Received
	for _, r := range s.Requests() {
		if r.Target == path {
			out = append(out, r)
		}
	}
	return out
}

// wantCopies checks that the server received n byte-identical copies of
// path.
func wantCopies(t *testing.T, s *replaysafetest.Server, path string, n int) []replaysafetest.Received {
	t.Helper()
	cs := copies(s, path)
	if len(cs) != n {
		t.Fatalf("server received %d copies of %s, want %d", len(cs), path, n)
	}
	for _, c := range cs[min(1, len(cs)):] {
		if !bytes.Equal(c.Raw, cs[0].Raw) {
			t.Fatalf("copies differ:\n%q\n%q", cs[0].Raw, c.Raw)
		}
	}
	return cs
}

// wantRule checks that err is an *replaysafe.Error decided by rule after
// attempts wire attempts.
func wantRule(t *testing.T, err error, rule fsm.Rule, attempts int) *replaysafe.Error {
	t.Helper()
	var e *replaysafe.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *replaysafe.Error", err, err)
	}
	if e.Rule != rule || e.Attempts != attempts {
		t.Fatalf("error decided by %s %v after %d attempts, want %s %v after %d: %v", e.Rule.ID(), e.Rule, e.Attempts, rule.ID(), rule, attempts, err)
	}
	if !strings.Contains(e.Error(), rule.ID()+" "+rule.String()) {
		t.Errorf("error text %q does not name %s %v", e.Error(), rule.ID(), rule)
	}
	return e
}

// wantDecisions checks the rules that ended the attempts for path, and
// that each attempt's trace replays to its decision.
func wantDecisions(t *testing.T, obs *observed, path string, rules ...fsm.Rule) {
	t.Helper()
	as := obs.attemptsFor(path)
	if len(as) != len(rules) {
		t.Fatalf("%d attempts for %s, want %d: %+v", len(as), path, len(rules), as)
	}
	for i, a := range as {
		if a.Decision.Rule != rules[i] || a.Number != i+1 {
			t.Errorf("attempt %d ended by %v (number %d), want %v\n%s", i+1, a.Decision, a.Number, rules[i], a.Trace)
		}
		tr, err := spec.ParseTrace(strings.NewReader(a.Trace))
		if err != nil {
			t.Errorf("attempt %d trace does not parse: %v\n%s", i+1, err, a.Trace)
			continue
		}
		if got := tr.Final(); got != a.Decision {
			t.Errorf("attempt %d trace replays to %v, reported %v\n%s", i+1, got, a.Decision, a.Trace)
		}
	}
}

// crossing scripts a close crossing the second request on connection 0.
func crossing(mode replaysafetest.CloseMode) replaysafetest.Config {
	return replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(mode)),
		replaysafetest.Script(replaysafetest.OK()),
	}}
}

// ---- resends -------------------------------------------------------------

func TestGetCloseCrossingResent(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		for _, mode := range []replaysafetest.CloseMode{replaysafetest.CloseFIN, replaysafetest.CloseFINNoNotify, replaysafetest.CloseRST} {
			t.Run(mode.String(), func(t *testing.T) {
				cfg := crossing(mode)
				cfg.TLS = tlsOn
				s := start(t, cfg)
				tr, obs := client(t, s, replaysafe.Options{})
				get(t, tr, s, "/warm")
				get(t, tr, s, "/target")
				cs := wantCopies(t, s, "/target", 2)
				if cs[0].Conn != 0 || cs[1].Conn != 1 {
					t.Errorf("copies on connections %d and %d, want 0 and 1", cs[0].Conn, cs[1].Conn)
				}
				wantDecisions(t, obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
				as := obs.attemptsFor("/target")
				if !as[0].Reused || as[1].Reused || as[1].Facts.Attempt != fsm.AttemptResend {
					t.Errorf("attempts: reused %v then %v, second facts %v", as[0].Reused, as[1].Reused, as[1].Facts)
				}
				if obs.requests != 2 || obs.responses != 2 || len(obs.errs) != 0 {
					t.Errorf("observer: %d requests, %d responses, errors %v; want 2, 2, none", obs.requests, obs.responses, obs.errs)
				}
			})
		}
	}
}

func TestIdempotencyKeyResentWithGetBody(t *testing.T) {
	for _, key := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		t.Run(key, func(t *testing.T) {
			s := start(t, crossing(replaysafetest.CloseFIN))
			tr, obs := client(t, s, replaysafe.Options{})
			get(t, tr, s, "/warm")
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/target", "hello", key, "k-1"))
			if err != nil || code != 200 {
				t.Fatalf("POST: %d %v", code, err)
			}
			for _, c := range wantCopies(t, s, "/target", 2) {
				if string(c.Body) != "hello" {
					t.Errorf("copy body %q", c.Body)
				}
			}
			wantDecisions(t, obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
		})
	}
}

// TestNoHiddenRetry proves net/http's single-connection client never
// retries by itself: a POST on a connection closed under it reaches the
// server exactly once, and so does a GET with resending switched off.
func TestNoHiddenRetry(t *testing.T) {
	t.Run("POST", func(t *testing.T) {
		s := start(t, crossing(replaysafetest.CloseFIN))
		tr, obs := client(t, s, replaysafe.Options{})
		get(t, tr, s, "/warm")
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/target", "hello"))
		e := wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
		if !errors.Is(err, io.EOF) {
			t.Errorf("error %v does not wrap io.EOF", e)
		}
		wantCopies(t, s, "/target", 1)
		if s.Conns() != 1 {
			t.Errorf("%d connections, want 1", s.Conns())
		}
		if obs.requests != 2 || obs.responses != 1 || len(obs.errs) != 1 {
			t.Errorf("observer: %d requests, %d responses, %d errors; want 2, 1, 1", obs.requests, obs.responses, len(obs.errs))
		}
	})
	t.Run("GET resend off", func(t *testing.T) {
		s := start(t, crossing(replaysafetest.CloseFIN))
		tr, _ := client(t, s, replaysafe.Options{DisableResend: true})
		get(t, tr, s, "/warm")
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
		wantRule(t, err, fsm.RuleResendOff, 1)
		wantCopies(t, s, "/target", 1)
	})
	t.Run("GET retry policy", func(t *testing.T) {
		s := start(t, crossing(replaysafetest.CloseFIN))
		tr, _ := client(t, s, replaysafe.Options{CallerRetries: true})
		get(t, tr, s, "/warm")
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
		wantRule(t, err, fsm.RuleRetryPolicy, 1)
		wantCopies(t, s, "/target", 1)
	})
}

func TestResendIsNotResent(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.Drop(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, obs := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleNoSecondResend, 2)
	wantCopies(t, s, "/target", 2)
	wantDecisions(t, obs, "/target", fsm.RuleAmbiguousIdempotentResend, fsm.RuleNoSecondResend)
	if len(obs.errs) != 1 || obs.responses != 1 {
		t.Errorf("observer: %d errors, %d responses; want 1 error (the final one) and the warm-up response", len(obs.errs), obs.responses)
	}
}

func TestFreshConnectionFailureNotResent(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Drop(replaysafetest.CloseRST)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, _ := client(t, s, replaysafe.Options{})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleAmbiguousFreshConn, 1)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("error %v does not wrap ECONNRESET", err)
	}
	wantCopies(t, s, "/target", 1)
}

func TestResponseStartedNotResent(t *testing.T) {
	for _, a := range []replaysafetest.Action{
		replaysafetest.PartialStatus(replaysafetest.CloseFIN),
		replaysafetest.Malformed(replaysafetest.CloseFIN),
		replaysafetest.Interim100(replaysafetest.CloseFIN),
		replaysafetest.EarlyHints(replaysafetest.CloseRST),
	} {
		t.Run(a.String(), func(t *testing.T) {
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.OK(), a),
				replaysafetest.Script(replaysafetest.OK()),
			}})
			tr, _ := client(t, s, replaysafe.Options{})
			get(t, tr, s, "/warm")
			_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
			wantRule(t, err, fsm.RuleResponseStarted, 1)
			wantCopies(t, s, "/target", 1)
		})
	}
}

func TestOneShotBodyNotResentWhenAmbiguous(t *testing.T) {
	s := start(t, crossing(replaysafetest.CloseFIN))
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/target", "oneshot:hello"))
	wantRule(t, err, fsm.RuleAmbiguousBodyNotReproducible, 1)
	wantCopies(t, s, "/target", 1)
}

// failingDialer dials TCP; once armed, the next Write on connection 0
// fails before writing anything, as a write to a connection the peer has
// reset does.
type failingDialer struct {
	mu    sync.Mutex
	n     int
	armed atomic.Bool
}

func (d *failingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.n == 1 {
		return &failingConn{Conn: c, d: d}, nil
	}
	return c, nil
}

type failingConn struct {
	net.Conn
	d *failingDialer
}

func (c *failingConn) Write(p []byte) (int, error) {
	if c.d.armed.Load() {
		c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	}
	return c.Conn.Write(p)
}

// TestNothingWrittenResendsAnyMethod: a write that puts no byte on the
// wire is evidence the server did not process the request (RS16), so even
// a POST with a one-shot body goes again, with the same untouched reader.
func TestNothingWrittenResendsAnyMethod(t *testing.T) {
	for _, body := range []string{"hello", "oneshot:hello"} {
		t.Run(body, func(t *testing.T) {
			s := start(t, replaysafetest.Config{})
			d := &failingDialer{}
			tr, obs := client(t, s, replaysafe.Options{DialContext: d.DialContext})
			get(t, tr, s, "/warm")
			d.armed.Store(true)
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/target", body))
			if err != nil || code != 200 {
				t.Fatalf("POST: %d %v", code, err)
			}
			cs := wantCopies(t, s, "/target", 1)
			if string(cs[0].Body) != "hello" {
				t.Errorf("body %q, want hello", cs[0].Body)
			}
			wantDecisions(t, obs, "/target", fsm.RuleEvidenceNothingWritten, fsm.RuleDeliverFinalResponse)
		})
	}
}

// ---- timeouts and cancellation -----------------------------------------

func TestResponseHeaderTimeout(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
	}})
	tr, obs := client(t, s, replaysafe.Options{ResponseHeaderTimeout: 50 * time.Millisecond})
	get(t, tr, s, "/warm")
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	e := wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(err, &te) || te.Phase != fsm.PhaseHeader || te.Limit != 50*time.Millisecond {
		t.Errorf("cause %v, want a header TimeoutError of 50ms", e.Err)
	}
	if !e.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Timeout() %v, Is(DeadlineExceeded) %v; want both", e.Timeout(), errors.Is(err, context.DeadlineExceeded))
	}
	wantCopies(t, s, "/target", 1)
	wantDecisions(t, obs, "/target", fsm.RuleTimeout)
}

// slowBody yields one byte every few milliseconds, at most limit bytes.
type slowBody struct{ left int }

func (b *slowBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(2 * time.Millisecond)
	b.left--
	p[0] = 'x'
	return 1, nil
}

func TestWriteTimeout(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{WriteTimeout: 40 * time.Millisecond})
	req, err := http.NewRequestWithContext(t.Context(), "PUT", s.URL()+"/upload", &slowBody{left: 2000})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 2000
	_, _, err = roundTrip(tr, req)
	wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(err, &te) || te.Phase != fsm.PhaseWrite {
		t.Errorf("cause %v, want a write TimeoutError", err)
	}
	if n := len(copies(s, "/upload")); n != 0 {
		t.Errorf("server completed %d uploads, want 0", n)
	}
}

func TestAcquireTimeout(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	block := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	tr, _ := client(t, s, replaysafe.Options{DialContext: block, AcquireTimeout: 30 * time.Millisecond})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleTimeout, 1)
	var te *replaysafe.TimeoutError
	if !errors.As(err, &te) || te.Phase != fsm.PhaseAcquire {
		t.Errorf("cause %v, want an acquire TimeoutError", err)
	}
	if s.Conns() != 0 {
		t.Errorf("%d connections, want 0", s.Conns())
	}
}

func TestAcquireFailedNotResent(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tr := replaysafe.New(replaysafe.Options{})
	defer tr.CloseIdleConnections()
	_, _, err = roundTrip(tr, newRequest(t, t.Context(), "GET", "http://"+addr+"/", ""))
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %v does not wrap ECONNREFUSED", err)
	}
}

func TestCanceledWhileWaiting(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
	}})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WaitRequests(t.Context(), 2)
		cancel()
	}()
	_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/target", ""))
	<-done
	wantRule(t, err, fsm.RuleCanceled, 1)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	wantCopies(t, s, "/target", 1)
}

func TestCanceledBeforeStart(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/target", ""))
	wantRule(t, err, fsm.RuleCanceled, 1)
	if n := s.Count(); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}
}

func TestContextDeadline(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
	}})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/target", ""))
	e := wantRule(t, err, fsm.RuleTimeout, 1)
	if !e.Timeout() {
		t.Errorf("Timeout() false for %v", err)
	}
	wantCopies(t, s, "/target", 1)
}

// errBody fails after its first bytes.
type errBody struct{ sent bool }

var errBodyBroke = errors.New("body broke")

func (b *errBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "hel"), nil
	}
	return 0, errBodyBroke
}

func TestRequestBodyErrorIsLocal(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	req, err := http.NewRequestWithContext(t.Context(), "PUT", s.URL()+"/target", &errBody{})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 5
	_, _, err = roundTrip(tr, req)
	// The caller's own body failed: a local failure (RS21), never resent.
	wantRule(t, err, fsm.RuleLocalFailure, 1)
	if !errors.Is(err, errBodyBroke) {
		t.Errorf("error %v does not wrap the body's error", err)
	}
	if n := len(copies(s, "/target")); n != 0 {
		t.Errorf("server completed %d copies, want 0", n)
	}
}

// ---- the pool ------------------------------------------------------------

func TestPoolReuse(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	var reused []bool
	tr, obs := client(t, s, replaysafe.Options{})
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	for _, p := range []string{"/a", "/b", "/c"} {
		req := newRequest(t, httptrace.WithClientTrace(t.Context(), trace), "GET", s.URL()+p, "")
		if code, _, err := roundTrip(tr, req); err != nil || code != 200 {
			t.Fatalf("%s: %d %v", p, code, err)
		}
	}
	if s.Conns() != 1 {
		t.Errorf("%d connections, want 1", s.Conns())
	}
	if want := []bool{false, true, true}; !equalBools(reused, want) {
		t.Errorf("GotConn reused %v, want %v", reused, want)
	}
	for _, a := range obs.attemptsFor("/c") {
		if a.Decision.Conn != fsm.ConnReuse {
			t.Errorf("/c connection verdict %v, want reuse", a.Decision.Conn)
		}
	}
	if tr.IdleConns() != 1 {
		t.Errorf("%d idle connections, want 1", tr.IdleConns())
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNoBodyResponsesReuse(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Respond(204, ""), replaysafetest.OK(), replaysafetest.OK()),
	}})
	tr, _ := client(t, s, replaysafe.Options{})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/nocontent", ""))
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("204: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = tr.RoundTrip(newRequest(t, t.Context(), "HEAD", s.URL()+"/head", ""))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	// The body is never read: a response without a body completes at once.
	get(t, tr, s, "/after")
	if s.Conns() != 1 {
		t.Errorf("%d connections, want 1", s.Conns())
	}
	resp.Body.Close()
}

func TestConnectionCloseNotPooled(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK().WithHeader("Connection", "close")),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/a")
	get(t, tr, s, "/b")
	if s.Conns() != 2 {
		t.Errorf("%d connections, want 2", s.Conns())
	}
	if n := len(copies(s, "/b")); n != 1 {
		t.Errorf("%d copies of /b, want 1", n)
	}
}

func TestRequestCloseNotPooled(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{})
	req := newRequest(t, t.Context(), "GET", s.URL()+"/a", "")
	req.Close = true
	if _, _, err := roundTrip(tr, req); err != nil {
		t.Fatal(err)
	}
	get(t, tr, s, "/b")
	if s.Conns() != 2 {
		t.Errorf("%d connections, want 2", s.Conns())
	}
}

func TestBodyClosedEarlyDiscards(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK().WithBody(strings.Repeat("x", 100000))),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, obs := client(t, s, replaysafe.Options{})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/big", ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get(t, tr, s, "/next")
	if s.Conns() != 2 {
		t.Errorf("%d connections, want 2", s.Conns())
	}
	as := obs.attemptsFor("/big")
	if len(as) != 1 || as[0].Decision.Action != fsm.ActionDeliver || as[0].Decision.Conn != fsm.ConnDiscard {
		t.Errorf("attempts for /big: %+v", as)
	}
}

func TestBodyReadErrorDiscards(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RawThenClose("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, obs := client(t, s, replaysafe.Options{})
	_, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/short", ""))
	if !errors.Is(err, io.ErrUnexpectedEOF) || body != "abc" {
		t.Fatalf("body %q, error %v; want abc and unexpected EOF", body, err)
	}
	as := obs.attemptsFor("/short")
	if len(as) != 1 || as[0].Decision.Conn != fsm.ConnDiscard {
		t.Errorf("attempts: %+v", as)
	}
	get(t, tr, s, "/next")
	if s.Conns() != 2 {
		t.Errorf("%d connections, want 2", s.Conns())
	}
}

func TestIdleCloseSeenDialsFresh(t *testing.T) {
	for _, mode := range []replaysafetest.CloseMode{replaysafetest.CloseFIN, replaysafetest.CloseRST} {
		t.Run(mode.String(), func(t *testing.T) {
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.IdleClose(0, mode)),
				replaysafetest.Script(replaysafetest.OK()),
			}})
			closed := make(chan struct{})
			var once sync.Once
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				var nd net.Dialer
				c, err := nd.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &closeNotifier{Conn: c, f: func() { once.Do(func() { close(closed) }) }}, nil
			}
			tr, obs := client(t, s, replaysafe.Options{DialContext: dial})
			get(t, tr, s, "/warm")
			select { // the client's stack saw the close and closed its side
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the client never closed the idle connection")
			}
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/target", "hello"))
			if err != nil || code != 200 {
				t.Fatalf("POST: %d %v", code, err)
			}
			cs := wantCopies(t, s, "/target", 1)
			if cs[0].Conn != 1 {
				t.Errorf("copy on connection %d, want 1", cs[0].Conn)
			}
			as := obs.attemptsFor("/target")
			if len(as) != 1 || as[0].Reused {
				t.Errorf("attempts: %+v", as)
			}
		})
	}
}

type closeNotifier struct {
	net.Conn
	f func()
}

func (c *closeNotifier) Close() error {
	c.f()
	return c.Conn.Close()
}

func TestIdleConnTimeout(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{IdleConnTimeout: 20 * time.Millisecond})
	get(t, tr, s, "/a")
	if err := s.WaitConnClosed(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if tr.IdleConns() != 0 {
		t.Errorf("%d idle connections after the timeout", tr.IdleConns())
	}
	get(t, tr, s, "/b")
	if s.Conns() != 2 {
		t.Errorf("%d connections, want 2", s.Conns())
	}
}

func TestMaxIdleConnsPerHost(t *testing.T) {
	for _, tc := range []struct{ max, idle int }{{1, 1}, {-1, 0}, {0, 2}} {
		s := start(t, replaysafetest.Config{})
		tr, _ := client(t, s, replaysafe.Options{MaxIdleConnsPerHost: tc.max})
		var resps []*http.Response
		for _, p := range []string{"/a", "/b", "/c"} {
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+p, ""))
			if err != nil {
				t.Fatal(err)
			}
			resps = append(resps, resp)
		}
		for _, r := range resps {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		if got := tr.IdleConns(); got != tc.idle {
			t.Errorf("MaxIdleConnsPerHost %d: %d idle connections, want %d", tc.max, got, tc.idle)
		}
		tr.CloseIdleConnections()
	}
}

func TestConcurrentRequests(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	tr, _ := client(t, s, replaysafe.Options{MaxIdleConnsPerHost: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/c", ""))
			if err == nil && code != 200 {
				err = errors.New("status " + http.StatusText(code))
			}
			if err != nil {
				errs <- err
			}
			_ = i
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(copies(s, "/c")); n != 40 {
		t.Errorf("%d copies, want 40", n)
	}
	if tr.IdleConns() > 4 {
		t.Errorf("%d idle connections, want at most 4", tr.IdleConns())
	}
}

// ---- TLS, validation, the client -----------------------------------------

func TestTLSState(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	tr, _ := client(t, s, replaysafe.Options{})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" || !resp.TLS.HandshakeComplete {
		t.Errorf("resp.TLS = %+v", resp.TLS)
	}
}

func TestTLSHandshakeFailure(t *testing.T) {
	s := start(t, replaysafetest.Config{TLS: true})
	tr := replaysafe.New(replaysafe.Options{}) // does not trust the server
	defer tr.CloseIdleConnections()
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/", ""))
	wantRule(t, err, fsm.RuleAcquireFailed, 1)
	if s.Count() != 0 {
		t.Errorf("server received %d requests", s.Count())
	}
}

func TestInvalidRequests(t *testing.T) {
	tr := replaysafe.New(replaysafe.Options{})
	defer tr.CloseIdleConnections()
	bad := func(mut func(r *http.Request)) *http.Request {
		r, _ := http.NewRequest("GET", "http://127.0.0.1:1/", strings.NewReader("x"))
		mut(r)
		return r
	}
	for name, req := range map[string]*http.Request{
		"scheme": bad(func(r *http.Request) { r.URL.Scheme = "ftp" }),
		"host":   bad(func(r *http.Request) { r.URL.Host = "" }),
		"header": bad(func(r *http.Request) { r.Header["Bad Name"] = []string{"v"} }),
		"value":  bad(func(r *http.Request) { r.Header.Set("X", "a\nb") }),
		"method": bad(func(r *http.Request) { r.Method = "G ET" }),
		"url":    bad(func(r *http.Request) { r.URL = nil }),
	} {
		if _, err := tr.RoundTrip(req); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestHTTPClient(t *testing.T) {
	s := start(t, crossing(replaysafetest.CloseFIN))
	tr, _ := client(t, s, replaysafe.Options{})
	c := &http.Client{Transport: tr}
	for _, p := range []string{"/warm", "/target"} {
		resp, err := c.Get(s.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wantCopies(t, s, "/target", 2)
	resp, err := c.Post(s.URL()+"/post", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	if tr.IdleConns() != 0 {
		t.Errorf("%d idle connections after CloseIdleConnections", tr.IdleConns())
	}
}

func TestErrorText(t *testing.T) {
	e := &replaysafe.Error{Rule: fsm.RuleAmbiguousNotIdempotent, Attempts: 1, Err: io.EOF}
	if got, want := e.Error(), "replaysafe: EOF (RS18 ambiguous-not-idempotent, 1 attempt)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &replaysafe.Error{Rule: fsm.RuleNoSecondResend, Attempts: 2, Err: io.EOF}
	if got, want := e.Error(), "replaysafe: EOF (RS08 no-second-resend, 2 attempts)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if e.Timeout() || !errors.Is(e, io.EOF) {
		t.Errorf("Timeout %v, Is(EOF) %v", e.Timeout(), errors.Is(e, io.EOF))
	}
	te := &replaysafe.TimeoutError{Phase: fsm.PhaseHeader, Limit: time.Second}
	if got, want := te.Error(), "replaysafe: header phase timed out after 1s"; got != want {
		t.Errorf("TimeoutError = %q, want %q", got, want)
	}
}
