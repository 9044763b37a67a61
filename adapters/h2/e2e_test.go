package h2_test

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startServer(t *testing.T, cfg h2server.Config) *h2server.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := h2server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func script(actions ...h2server.Action) h2server.Config {
	return h2server.Config{Conns: []h2server.ConnScript{{Streams: actions}}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// observed is one ClientConn over an observed connection.
type observed struct {
	t    *testing.T
	s    *h2server.Server
	cc   *http2.ClientConn
	wire *h2.Wire
	used bool // a request already ran on the connection
}

func dialObserved(t *testing.T, s *h2server.Server) *observed {
	t.Helper()
	nc, err := s.Dial(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, wire := h2.Observe(nc)
	cc, err := (&http2.Transport{}).NewClientConn(conn)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &observed{t: t, s: s, cc: cc, wire: wire}
}

// outcome is what one request produced: the machine's view and the raw
// material.
type outcome struct {
	events   []fsm.Event // in the order fed
	decision fsm.Decision
	err      error
	body     string
	claim    h2.Claim
	failure  fsm.Event // Attempt.Failure, zero on success
	classify fsm.Event // Classify(err, claim.Stream), zero on success
}

// do runs one request through ClientConn.RoundTrip with an Attempt, and
// feeds an fsm.Machine as a transport would.
func (o *observed) do(ctx context.Context, method, path string, body []byte) outcome {
	o.t.Helper()
	facts := fsm.Request{Method: fsm.ParseMethod(method)}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
		facts.Body = fsm.BodyBuffered
	}
	req, err := http.NewRequestWithContext(ctx, method, o.s.URL()+path, r)
	if err != nil {
		o.t.Fatal(err)
	}

	var mu sync.Mutex
	var out outcome
	var clock fsm.Instant
	m := fsm.New(facts, fsm.Limits{}, clock)
	feed := func(e fsm.Event) {
		mu.Lock()
		defer mu.Unlock()
		clock++
		e.At = clock
		out.events = append(out.events, e)
		out.decision = m.Step(e)
	}
	feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: o.used, Proto: fsm.ProtoH2})
	o.used = true

	att := o.wire.NewAttempt()
	defer att.Done()
	ctx = httptrace.WithClientTrace(ctx, att.Trace(h2.EmitFunc(feed)))
	res, err := o.cc.RoundTrip(req.WithContext(ctx))
	if err == nil {
		feed(fsm.Event{Kind: fsm.EventFinalHeaders})
		b, rerr := io.ReadAll(res.Body)
		res.Body.Close()
		out.body = string(b)
		if rerr != nil {
			err = rerr
		} else {
			feed(fsm.Event{Kind: fsm.EventResponseComplete})
		}
	}
	out.err = err
	out.claim = att.Claim()
	if err != nil {
		out.failure = att.Failure(ctx, err)
		out.classify = h2.Classify(err, out.claim.Stream)
		feed(out.failure)
	}
	return out
}

func (out outcome) String() string {
	return fmt.Sprintf("err=%v claim=%+v classify=%v failure=%v events=%v decision=%v",
		out.err, out.claim, out.classify, out.failure, out.events, out.decision)
}

func wantDecision(t *testing.T, out outcome, action fsm.Action, rule fsm.Rule) {
	t.Helper()
	if out.decision.Action != action || out.decision.Rule != rule {
		t.Errorf("decision %v, want %v %v\n%v", out.decision, action, rule, out)
	}
}

func TestRefusedStreamIsEvidence(t *testing.T) {
	for _, a := range []h2server.Action{h2server.Refuse(), h2server.RefuseAfterBody()} {
		t.Run(a.At.String(), func(t *testing.T) {
			s := startServer(t, script(a))
			o := dialObserved(t, s)
			out := o.do(testCtx(t), "POST", "/refused", []byte("payload"))
			if out.classify.Kind != fsm.EventRefusedStream || out.failure.Kind != fsm.EventRefusedStream {
				t.Fatalf("%v", out)
			}
			if out.claim != (h2.Claim{Stream: 1, Wrote: true}) {
				t.Errorf("claim %+v", out.claim)
			}
			// Even a POST on a fresh connection: RFC 9113 §8.7.
			wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceRefusedStream)
			facts, ok := o.wire.Stream(1)
			if ok {
				t.Errorf("Attempt.Done left stream 1 tracked: %+v", facts)
			}
		})
	}
}

func TestGoAwayBelowOurStream(t *testing.T) {
	for _, closeAfter := range []bool{false, true} {
		t.Run("close="+strconv.FormatBool(closeAfter), func(t *testing.T) {
			a := h2server.GoAwayBelow()
			if closeAfter {
				a = a.WithClose(h2server.CloseFIN)
			}
			s := startServer(t, script(h2server.OK("first"), a))
			o := dialObserved(t, s)
			if out := o.do(testCtx(t), "GET", "/1", nil); out.err != nil || out.body != "first" {
				t.Fatalf("first request: %v", out)
			}
			out := o.do(testCtx(t), "POST", "/3", []byte("not processed"))
			// x/net's error is unexported: the error alone proves nothing.
			if out.classify.Kind != fsm.EventClosed {
				t.Errorf("Classify: %v (x/net typed this error now? revisit the table)", out.classify)
			}
			want := fsm.Event{Kind: fsm.EventH2GoAway, Boundary: 1, Stream: 3}
			if out.failure.Kind != want.Kind || out.failure.Boundary != want.Boundary || out.failure.Stream != want.Stream {
				t.Fatalf("Failure %v, want %v\n%v", out.failure, want, out)
			}
			// Boundary < Stream: RFC 9113 §6.8, any method.
			wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceGoAwayBoundary)
			if n := s.Count(); n != 2 {
				t.Errorf("server saw %d streams", n)
			}
		})
	}
}

// TestGoAwayWithErrorOnStreamOne covers the case x/net singles out: a
// GOAWAY with an error code above stream 1 aborts it with a bare
// fmt.Errorf, and x/net's own loop does not retry it. The boundary still
// proves the stream was not processed.
func TestGoAwayWithErrorOnStreamOne(t *testing.T) {
	s := startServer(t, script(h2server.GoAway(0).WithCode(http2.ErrCodeEnhanceYourCalm)))
	o := dialObserved(t, s)
	out := o.do(testCtx(t), "POST", "/1", []byte("not processed"))
	if out.classify.Kind != fsm.EventClosed {
		t.Errorf("Classify %v", out.classify)
	}
	if out.failure.Kind != fsm.EventH2GoAway || out.failure.Boundary != 0 || out.failure.Stream != 1 {
		t.Fatalf("Failure %v\n%v", out.failure, out)
	}
	wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceGoAwayBoundary)
	if g, ok := o.wire.GoAway(); !ok || g.Code != http2.ErrCodeEnhanceYourCalm || g.Count != 1 {
		t.Errorf("wire GOAWAY %+v %v", g, ok)
	}
}

func TestGoAwayAtOurStreamThenClose(t *testing.T) {
	// The server may have processed the stream: GoAwayError with
	// LastStreamID equal to ours, which is ambiguous.
	s := startServer(t, script(h2server.GoAwayAt().WithAt(h2server.AfterBody).WithClose(h2server.CloseFIN)))
	o := dialObserved(t, s)
	out := o.do(testCtx(t), "POST", "/1", []byte("maybe processed"))
	if out.classify.Kind != fsm.EventH2GoAway || out.classify.Boundary != 1 || out.classify.Stream != 1 {
		t.Fatalf("Classify %v\n%v", out.classify, out)
	}
	if out.failure.Kind != fsm.EventH2GoAway || out.failure.Boundary < out.failure.Stream {
		t.Fatalf("Failure %v", out.failure)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleAmbiguousFreshConn)

	// The same on a reused connection with an idempotent request: the
	// ambiguous rule allows one resend.
	s = startServer(t, script(h2server.OK("first"), h2server.GoAwayAt().WithClose(h2server.CloseFIN)))
	o = dialObserved(t, s)
	if out := o.do(testCtx(t), "GET", "/1", nil); out.err != nil {
		t.Fatal(out)
	}
	out = o.do(testCtx(t), "GET", "/3", nil)
	if out.failure.Kind != fsm.EventH2GoAway || out.failure.Boundary != 3 || out.failure.Stream != 3 {
		t.Fatalf("Failure %v\n%v", out.failure, out)
	}
	wantDecision(t, out, fsm.ActionResend, fsm.RuleAmbiguousIdempotentResend)
}

func TestResetIsAmbiguous(t *testing.T) {
	s := startServer(t, script(h2server.Reset(http2.ErrCodeInternal)))
	o := dialObserved(t, s)
	out := o.do(testCtx(t), "POST", "/reset", []byte("body"))
	if out.classify.Kind != fsm.EventReset || out.failure.Kind != fsm.EventReset {
		t.Fatalf("%v", out)
	}
	if facts, _ := h2.StreamOf(out.err); facts != 1 {
		t.Errorf("StreamOf = %d", facts)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleAmbiguousFreshConn)
}

func TestPartialHeadersAreAResponseByte(t *testing.T) {
	s := startServer(t, script(h2server.PartialHeaders()))
	o := dialObserved(t, s)
	out := o.do(testCtx(t), "GET", "/partial", nil)
	// x/net sees a connection that ended: io.ErrUnexpectedEOF.
	if out.classify.Kind != fsm.EventClosed {
		t.Errorf("Classify %v", out.classify)
	}
	// The wire saw a HEADERS frame on our stream that never completed.
	if out.failure.Kind != fsm.EventMalformed {
		t.Fatalf("Failure %v\n%v", out.failure, out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleResponseStarted)
}

func TestConnectionLoss(t *testing.T) {
	for _, tc := range []struct {
		action h2server.Action
		want   []fsm.EventKind
	}{
		{h2server.CloseConn(), []fsm.EventKind{fsm.EventClosed}},
		// Linux reports a peer's RST once; when x/net's writer meets it
		// first, the read loop reads EOF. Both events are ambiguous.
		{h2server.CloseConnAfterBody().WithClose(h2server.CloseRST), []fsm.EventKind{fsm.EventReset, fsm.EventClosed}},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			s := startServer(t, script(h2server.OK("first"), tc.action))
			o := dialObserved(t, s)
			if out := o.do(testCtx(t), "GET", "/1", nil); out.err != nil {
				t.Fatal(out)
			}
			out := o.do(testCtx(t), "GET", "/3", nil)
			if !slices.Contains(tc.want, out.classify.Kind) || out.failure != out.classify {
				t.Fatalf("want one of %v\n%v", tc.want, out)
			}
			// Reused connection, idempotent, nothing answered: one resend.
			wantDecision(t, out, fsm.ActionResend, fsm.RuleAmbiguousIdempotentResend)
		})
	}
}

func TestNothingWrittenIsHandedBack(t *testing.T) {
	t.Run("after-goaway", func(t *testing.T) {
		// The first request is answered under a GOAWAY(last=1); the
		// ClientConn then refuses the second without writing it.
		a := h2server.GoAwayAt()
		a.Body = []byte("first")
		s := startServer(t, script(a))
		o := dialObserved(t, s)
		if out := o.do(testCtx(t), "GET", "/1", nil); out.err != nil || out.body != "first" {
			t.Fatalf("first: %v", out)
		}
		if o.cc.ReserveNewRequest() {
			t.Error("ReserveNewRequest after GOAWAY")
		}
		out := o.do(testCtx(t), "POST", "/never", []byte("one-shot"))
		if out.claim != (h2.Claim{}) || out.failure.Kind != fsm.EventHandedBack {
			t.Fatalf("%v", out)
		}
		wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceHandedBack)
		if n := s.Count(); n != 1 {
			t.Errorf("server saw %d streams", n)
		}
	})
	t.Run("closed-clientconn", func(t *testing.T) {
		s := startServer(t, h2server.Config{})
		o := dialObserved(t, s)
		o.cc.Close()
		out := o.do(testCtx(t), "POST", "/never", []byte("x"))
		if out.err == nil || out.failure.Kind != fsm.EventHandedBack {
			t.Fatalf("%v", out)
		}
		if s.Count() != 0 {
			t.Errorf("server saw %d streams", s.Count())
		}
	})
}

func TestTimeoutAndCancel(t *testing.T) {
	s := startServer(t, h2server.Config{Default: h2server.Every(h2server.Hang(0))})
	o := dialObserved(t, s)
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	out := o.do(ctx, "GET", "/hang", nil)
	if out.classify.Kind != fsm.EventTimeout || out.failure.Kind != fsm.EventTimeout {
		t.Fatalf("%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleTimeout)

	ctx, cancel = context.WithCancel(testCtx(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	out = o.do(ctx, "GET", "/hang", nil)
	if out.failure.Kind != fsm.EventCanceled {
		t.Fatalf("%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleCanceled)
}

func TestSuccessfulExchangeOverTLS(t *testing.T) {
	s := startServer(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("hello"))})
	o := dialObserved(t, s)
	for i, want := range []uint32{1, 3} {
		out := o.do(testCtx(t), "POST", "/ok", []byte("up"))
		if out.err != nil || out.body != "hello" || out.claim.Stream != want {
			t.Fatalf("request %d: %v", i, out)
		}
		if out.decision.Action != fsm.ActionDeliver || out.decision.Conn != fsm.ConnReuse {
			t.Errorf("request %d: decision %v\n%v", i, out.decision, out)
		}
	}
	if o.wire.BytesWritten() == 0 || o.wire.BytesRead() == 0 {
		t.Error("no bytes counted")
	}
}

// TestConcurrentClaimsMatchTheServer checks the stream-ID learning under
// concurrency: each request's claimed stream is the stream the server
// received that request on.
func TestConcurrentClaimsMatchTheServer(t *testing.T) {
	const n = 24
	s := startServer(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
	o := dialObserved(t, s)
	o.used = true
	claims := make([]h2.Claim, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			att := o.wire.NewAttempt()
			ctx := httptrace.WithClientTrace(testCtx(t), att.Trace(nil))
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/"+strconv.Itoa(i), bytes.NewReader([]byte("b")))
			res, err := o.cc.RoundTrip(req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			claims[i] = att.Claim()
		})
	}
	wg.Wait()
	if err := s.WaitRequests(testCtx(t), n); err != nil {
		t.Fatal(err)
	}
	byPath := map[string]uint32{}
	for _, r := range s.Requests() {
		byPath[r.Path] = r.StreamID
	}
	for i, c := range claims {
		if want := byPath["/"+strconv.Itoa(i)]; !c.Wrote || c.Stream != want {
			t.Errorf("request %d: claimed %+v, server got it on stream %d", i, c, want)
		}
	}
}
