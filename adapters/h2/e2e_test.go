package h2_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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
	conn "github.com/replaysafe/replaysafe/transports/h2"
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

// client is one transports/h2 connection to a scripted server.
type client struct {
	t    *testing.T
	s    *h2server.Server
	cc   *conn.ClientConn
	used bool // a request already ran on the connection
}

func dial(t *testing.T, s *h2server.Server) *client {
	t.Helper()
	nc, err := s.Dial(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := conn.NewClientConn(nc, conn.Config{})
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &client{t: t, s: s, cc: cc}
}

// outcome is what one request produced: the machine's view and the raw
// material.
type outcome struct {
	events   []fsm.Event // in the order fed
	decision fsm.Decision
	err      error
	body     string
	stream   uint32 // what HeadersWritten named
	written  bool
	failure  fsm.Event // Attempt.Failure, zero on success
	classify fsm.Event // Classify(err), zero on success
}

// do runs one request through RoundTrip with an Attempt, and feeds an
// fsm.Machine as a transport would. A request the connection cannot
// reserve still goes to RoundTrip, which hands it back unsent.
func (c *client) do(ctx context.Context, method, path string, body []byte) outcome {
	c.t.Helper()
	facts := fsm.Request{Method: fsm.ParseMethod(method)}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
		facts.Body = fsm.BodyBuffered
	}
	req, err := http.NewRequestWithContext(ctx, method, c.s.URL()+path, r)
	if err != nil {
		c.t.Fatal(err)
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
	feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: c.used, Proto: fsm.ProtoH2})
	c.used = true

	var att h2.Attempt
	att.Init(h2.EmitFunc(feed))
	c.cc.Reserve()
	res, err := c.cc.RoundTrip(req, &att)
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
	out.stream, out.written = att.Stream()
	if err != nil {
		out.failure = att.Failure(ctx, err)
		out.classify = h2.Classify(err)
		feed(out.failure)
	}
	return out
}

func (out outcome) String() string {
	return fmt.Sprintf("err=%v stream=%d written=%v classify=%v failure=%v events=%v decision=%v",
		out.err, out.stream, out.written, out.classify, out.failure, out.events, out.decision)
}

func wantDecision(t *testing.T, out outcome, action fsm.Action, rule fsm.Rule) {
	t.Helper()
	if out.decision.Action != action || out.decision.Rule != rule {
		t.Errorf("decision %v, want %v %v\n%v", out.decision, action, rule, out)
	}
}

// wantStreams checks that the server received exactly n streams.
func wantStreams(t *testing.T, s *h2server.Server, n int) {
	t.Helper()
	if got := s.Count(); got != n {
		t.Errorf("server received %d streams, want %d", got, n)
	}
}

// TestRefusedStreamIsEvidence: REFUSED_STREAM, before or after the body,
// is evidence even for a POST on a fresh connection (RFC 9113 §8.7): the
// server received the stream once and refused it.
func TestRefusedStreamIsEvidence(t *testing.T) {
	for _, a := range []h2server.Action{h2server.Refuse(), h2server.RefuseAfterBody()} {
		t.Run(a.At.String(), func(t *testing.T) {
			s := startServer(t, script(a))
			c := dial(t, s)
			out := c.do(testCtx(t), "POST", "/refused", []byte("payload"))
			if out.classify.Kind != fsm.EventRefusedStream || out.failure.Kind != fsm.EventRefusedStream {
				t.Fatalf("%v", out)
			}
			if out.stream != 1 || !out.written {
				t.Errorf("stream %d written %v", out.stream, out.written)
			}
			wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceRefusedStream)
			wantStreams(t, s, 1)
		})
	}
}

// TestGoAwayBelowOurStream: a GOAWAY whose last stream ID is below ours
// proves our stream was not processed, with or without a close after it:
// any method may go again. The server received both streams and answered
// the first.
func TestGoAwayBelowOurStream(t *testing.T) {
	for _, closeAfter := range []bool{false, true} {
		t.Run("close="+strconv.FormatBool(closeAfter), func(t *testing.T) {
			a := h2server.GoAwayBelow()
			if closeAfter {
				a = a.WithClose(h2server.CloseFIN)
			}
			s := startServer(t, script(h2server.OK("first"), a))
			c := dial(t, s)
			if out := c.do(testCtx(t), "GET", "/1", nil); out.err != nil || out.body != "first" {
				t.Fatalf("first request: %v", out)
			}
			out := c.do(testCtx(t), "POST", "/3", []byte("not processed"))
			want := fsm.Event{Kind: fsm.EventH2GoAway, Boundary: 1, Stream: 3}
			if out.failure.Kind != want.Kind || out.failure.Boundary != want.Boundary || out.failure.Stream != want.Stream || out.classify != out.failure {
				t.Fatalf("Failure %v, want %v\n%v", out.failure, want, out)
			}
			wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceGoAwayBoundary)
			wantStreams(t, s, 2)
		})
	}
}

// TestGoAwayWithErrorOnStreamOne: a GOAWAY with an error code above
// stream 1 (last stream ID 0) proves stream 1 was not processed; the
// connection reports the code.
func TestGoAwayWithErrorOnStreamOne(t *testing.T) {
	s := startServer(t, script(h2server.GoAway(0).WithCode(http2.ErrCodeEnhanceYourCalm)))
	c := dial(t, s)
	out := c.do(testCtx(t), "POST", "/1", []byte("not processed"))
	if out.failure.Kind != fsm.EventH2GoAway || out.failure.Boundary != 0 || out.failure.Stream != 1 {
		t.Fatalf("Failure %v\n%v", out.failure, out)
	}
	wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceGoAwayBoundary)
	if g, ok := c.cc.GoAway(); !ok || g.Code != http2.ErrCodeEnhanceYourCalm || g.LastStreamID != 0 {
		t.Errorf("GOAWAY %+v %v", g, ok)
	}
	wantStreams(t, s, 1)
}

// TestGoAwayAtOurStreamThenClose: a GOAWAY whose last stream ID is ours,
// then a close with our stream unfinished: the server may have processed
// it. On a fresh connection that fails (RS17); on a reused one an
// idempotent request is resent once (RS20). The server received each
// stream once.
func TestGoAwayAtOurStreamThenClose(t *testing.T) {
	s := startServer(t, script(h2server.GoAwayAt().WithAt(h2server.AfterBody).WithClose(h2server.CloseFIN)))
	c := dial(t, s)
	out := c.do(testCtx(t), "POST", "/1", []byte("maybe processed"))
	if out.classify.Kind != fsm.EventH2GoAway || out.classify.Boundary != 1 || out.classify.Stream != 1 {
		t.Fatalf("Classify %v\n%v", out.classify, out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleAmbiguousFreshConn)
	wantStreams(t, s, 1)

	s = startServer(t, script(h2server.OK("first"), h2server.GoAwayAt().WithClose(h2server.CloseFIN)))
	c = dial(t, s)
	if out := c.do(testCtx(t), "GET", "/1", nil); out.err != nil {
		t.Fatal(out)
	}
	out = c.do(testCtx(t), "GET", "/3", nil)
	if out.failure.Kind != fsm.EventH2GoAway || out.failure.Boundary != 3 || out.failure.Stream != 3 {
		t.Fatalf("Failure %v\n%v", out.failure, out)
	}
	wantDecision(t, out, fsm.ActionResend, fsm.RuleAmbiguousIdempotentResend)
	wantStreams(t, s, 2)
}

// TestResetIsAmbiguous: RST_STREAM INTERNAL_ERROR proves nothing.
func TestResetIsAmbiguous(t *testing.T) {
	s := startServer(t, script(h2server.Reset(http2.ErrCodeInternal)))
	c := dial(t, s)
	out := c.do(testCtx(t), "POST", "/reset", []byte("body"))
	if out.classify.Kind != fsm.EventReset || out.failure.Kind != fsm.EventReset {
		t.Fatalf("%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleAmbiguousFreshConn)
	wantStreams(t, s, 1)
}

// TestPartialHeadersAreAResponseByte: a HEADERS frame cut inside its
// header block is a response byte: nothing is resent after it.
func TestPartialHeadersAreAResponseByte(t *testing.T) {
	s := startServer(t, script(h2server.PartialHeaders()))
	c := dial(t, s)
	out := c.do(testCtx(t), "GET", "/partial", nil)
	if !slices.ContainsFunc(out.events, func(e fsm.Event) bool { return e.Kind == fsm.EventFirstResponseByte }) {
		t.Fatalf("no response byte fed\n%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleResponseStarted)
	wantStreams(t, s, 1)
}

// TestConnectionLoss: the connection closed (FIN) or reset (RST) under a
// request on a reused connection: ambiguous, and an idempotent request is
// resent once.
func TestConnectionLoss(t *testing.T) {
	for _, tc := range []struct {
		action h2server.Action
		want   []fsm.EventKind
	}{
		{h2server.CloseConn(), []fsm.EventKind{fsm.EventClosed}},
		{h2server.CloseConnAfterBody().WithClose(h2server.CloseRST), []fsm.EventKind{fsm.EventReset, fsm.EventClosed}},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			s := startServer(t, script(h2server.OK("first"), tc.action))
			c := dial(t, s)
			if out := c.do(testCtx(t), "GET", "/1", nil); out.err != nil {
				t.Fatal(out)
			}
			out := c.do(testCtx(t), "GET", "/3", nil)
			if !slices.Contains(tc.want, out.classify.Kind) || out.failure != out.classify {
				t.Fatalf("want one of %v\n%v", tc.want, out)
			}
			wantDecision(t, out, fsm.ActionResend, fsm.RuleAmbiguousIdempotentResend)
			wantStreams(t, s, 2)
		})
	}
}

// TestNothingWrittenIsHandedBack: a request the connection cannot take
// (after a GOAWAY, or once closed) is handed back unsent: any method may
// go again, and the server never saw it.
func TestNothingWrittenIsHandedBack(t *testing.T) {
	t.Run("after-goaway", func(t *testing.T) {
		a := h2server.GoAwayAt()
		a.Body = []byte("first")
		s := startServer(t, script(a))
		c := dial(t, s)
		if out := c.do(testCtx(t), "GET", "/1", nil); out.err != nil || out.body != "first" {
			t.Fatalf("first: %v", out)
		}
		if c.cc.Reserve() {
			t.Error("Reserve after GOAWAY")
		}
		out := c.do(testCtx(t), "POST", "/never", []byte("one-shot"))
		if out.written || out.failure.Kind != fsm.EventHandedBack {
			t.Fatalf("%v", out)
		}
		wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceHandedBack)
		wantStreams(t, s, 1)
	})
	t.Run("closed", func(t *testing.T) {
		s := startServer(t, h2server.Config{})
		c := dial(t, s)
		c.cc.Close()
		out := c.do(testCtx(t), "POST", "/never", []byte("x"))
		if out.err == nil || out.failure.Kind != fsm.EventHandedBack {
			t.Fatalf("%v", out)
		}
		wantDecision(t, out, fsm.ActionResend, fsm.RuleEvidenceHandedBack)
		wantStreams(t, s, 0)
	})
}

// TestTimeoutAndCancel: the caller's deadline and cancellation decide,
// whatever error the connection returns for them.
func TestTimeoutAndCancel(t *testing.T) {
	s := startServer(t, h2server.Config{Default: h2server.Every(h2server.Hang(0))})
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	out := c.do(ctx, "GET", "/hang", nil)
	if out.failure.Kind != fsm.EventTimeout {
		t.Fatalf("%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleTimeout)

	ctx, cancel = context.WithCancel(testCtx(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	out = c.do(ctx, "GET", "/hang", nil)
	if out.failure.Kind != fsm.EventCanceled {
		t.Fatalf("%v", out)
	}
	wantDecision(t, out, fsm.ActionFail, fsm.RuleCanceled)
	wantStreams(t, s, 2)
}

// TestSuccessfulExchangeOverTLS: each stream is named as it is written,
// and a clean exchange leaves the connection reusable.
func TestSuccessfulExchangeOverTLS(t *testing.T) {
	s := startServer(t, h2server.Config{TLS: true, Default: h2server.Every(h2server.OK("hello"))})
	c := dial(t, s)
	for i, want := range []uint32{1, 3} {
		out := c.do(testCtx(t), "POST", "/ok", []byte("up"))
		if out.err != nil || out.body != "hello" || out.stream != want || !out.written {
			t.Fatalf("request %d: %v", i, out)
		}
		if out.decision.Action != fsm.ActionDeliver || out.decision.Conn != fsm.ConnReuse {
			t.Errorf("request %d: decision %v\n%v", i, out.decision, out)
		}
	}
	wantStreams(t, s, 2)
}

// TestConcurrentStreamsMatchTheServer: under concurrency each request's
// stream, as HeadersWritten named it, is the stream the server received
// that request on.
func TestConcurrentStreamsMatchTheServer(t *testing.T) {
	const n = 24
	s := startServer(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
	c := dial(t, s)
	streams := make([]uint32, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var att h2.Attempt
			req, _ := http.NewRequestWithContext(testCtx(t), "POST", s.URL()+"/"+strconv.Itoa(i), bytes.NewReader([]byte("b")))
			if !c.cc.Reserve() {
				t.Errorf("request %d: no room", i)
				return
			}
			res, err := c.cc.RoundTrip(req, &att)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			streams[i], _ = att.Stream()
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
	for i, id := range streams {
		if want := byPath["/"+strconv.Itoa(i)]; id != want {
			t.Errorf("request %d: stream %d, server got it on stream %d", i, id, want)
		}
	}
}
