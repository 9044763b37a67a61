package driver

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// errFallbackH1 means ALPN selected HTTP/1.1 under plan.Negotiate: the
// call goes to the HTTP/1.1 path, nothing of it having been sent.
var errFallbackH1 = errors.New("replaysafe: ALPN selected HTTP/1.1")

// newH2Factory returns the http2.Transport whose only use is
// NewClientConn: its RoundTrip, and with it x/net's retry loop and
// backoff sleeps, never runs.
func newH2Factory(cfg Config) *http2.Transport {
	// No IdleConnTimeout: the pool closes idle connections (muxPool),
	// with a timer that lets go of the connection once it is closed.
	// x/net's own idle timer, once stopped for good, stays in the
	// runtime's timer heap holding the closed ClientConn until the heap is
	// next cleaned, and its too-idle check reads the clock on every
	// reservation.
	t := &http2.Transport{
		DisableCompression: cfg.DisableCompression,
		AllowHTTP:          true,
	}
	if cfg.MaxResponseHeaderBytes > 0 && cfg.MaxResponseHeaderBytes <= 1<<32-1 {
		t.MaxHeaderListSize = uint32(cfg.MaxResponseHeaderBytes)
	}
	return t
}

// runH2 is call.run for HTTP/2: at most two wire attempts, the resend at
// once on a new connection.
func (tr *try) runH2() (*http.Response, error) {
	if err := checkStreamHeader("HTTP/2", tr.req.Header); err != nil {
		return tr.refuse(err)
	}
	return tr.attempts(tr.attemptH2)
}

// checkStreamHeader rejects the connection-specific fields HTTP/2 and
// HTTP/3 forbid (RFC 9113 §8.2.2, RFC 9114 §4.2) that the stack refuses
// only once it holds a connection: its refusal comes before anything is
// written, so it would read as a request handed back, be resent, and fail
// the same way. proto names the protocol in the error.
//
// The keys are looked up in their canonical form directly: Header.Values
// would canonicalise the constant again on every call.
func checkStreamHeader(proto string, h http.Header) error {
	if v := h["Upgrade"]; len(v) > 0 && v[0] != "" {
		return fmt.Errorf("replaysafe: %s request with an Upgrade header field %q", proto, v)
	}
	if v := h["Transfer-Encoding"]; len(v) > 1 || len(v) == 1 && v[0] != "" && v[0] != "chunked" {
		return fmt.Errorf("replaysafe: %s request with Transfer-Encoding %q", proto, v)
	}
	if v := h["Connection"]; len(v) > 1 || len(v) == 1 && v[0] != "" &&
		!strings.EqualFold(v[0], "close") && !strings.EqualFold(v[0], "keep-alive") {
		return fmt.Errorf("replaysafe: %s request with Connection %q", proto, v)
	}
	return nil
}

// attemptH2 runs wire attempt n over HTTP/2. It returns the response, or
// the final error, or the next attempt's start when fsm decided to
// resend; or errFallbackH1 (attempt 1 only, nothing sent, nothing
// reported) when ALPN selected HTTP/1.1.
func (tr *try) attemptH2(n int, start resend) (*http.Response, *resend, error) {
	body := start.body
	ha := &h2Attempt{}
	a := tr.newAttempt(&ha.attempt, n, body, tr.streamRecorder(&ha.rec, &ha.attempt, start.facts), bodyWatch{mux: true})
	same, _ := start.same.(*h2Conn)
	// A pooled connection with room is taken at once (the pool's own
	// first step, muxPool.acquire); only an attempt that may wait or dial
	// needs its own context and the acquisition deadline's timer.
	var hc *h2Conn
	reused := false
	if start.after != pool.OwnConn {
		hc, reused, _ = tr.t.h2pool.Take(tr.key, start.after, same)
	}
	var err error
	if hc == nil {
		hc, reused, err = tr.t.acquireH2(a.acquireContext(), tr.key, tr.snap, tr.leg, a.rec.Start(), start.after, same)
	}
	if err != nil {
		if n == 1 && errors.Is(err, errFallbackH1) {
			a.rec.Stop()
			a.cancel(nil)
			return nil, nil, err
		}
		return a.acquireFailed(err)
	}
	a.reused = reused
	a.rec.Feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH2})
	if trace := httptrace.ContextClientTrace(tr.ctx); trace != nil && trace.GotConn != nil {
		// x/net calls it from its Transport's loop only, which never runs.
		trace.GotConn(httptrace.GotConnInfo{Conn: hc.conn, Reused: reused})
	}

	// Every request on an observed ClientConn needs its own Attempt, even
	// one a deadline already decided: RoundTrip also gives back the stream
	// reservation take made.
	s := &ha.stream
	ha.att.Init(hc.wire)
	*s = h2Stream{t: tr.t, hc: hc, att: &ha.att, rec: &ha.rec}
	s.att.SetInformationalLimit(tr.t.informationalLimit())
	a.wire = s
	out := a.outgoing(body, func(ctx context.Context) context.Context {
		return withTrace(ctx, s.att.Trace(s.rec))
	})
	resp, err := hc.cc.RoundTrip(out)
	return a.roundTripped(resp, err)
}

// h2Attempt is an HTTP/2 attempt with its recorder and stream, in one
// allocation.
type h2Attempt struct {
	attempt
	rec    streamRec
	stream h2Stream
	att    h2.Attempt
}

// h2Stream is an HTTP/2 attempt's stream: its attemptWire.
type h2Stream struct {
	t   *Transport
	hc  *h2Conn
	att *h2.Attempt
	rec *streamRec
}

func (s *h2Stream) fail(a *attempt, err error) fsm.Decision {
	return a.rec.Feed(a.failureEvent(s.att.Failure(a.stackContext(), err), err))
}

func (s *h2Stream) delivered(*http.Response) bool { return false }

func (s *h2Stream) bodyDoneOnError() bool { return false }

func (s *h2Stream) informational() error { return s.att.InformationalError() }

// complete feeds what the wire shows was written of the request when
// x/net's hooks, which run on its write goroutine, have not reported it
// yet (a fast server's whole response can be read before them), then the
// response's end.
func (s *h2Stream) complete(a *attempt) fsm.Decision {
	if c := s.att.Claim(); c.Wrote && c.Stream != 0 {
		s.rec.Emit(fsm.Event{Kind: fsm.EventFirstByteWritten})
		if f, ok := s.hc.wire.Stream(c.Stream); ok && f.EndStreamWritten {
			s.rec.Emit(fsm.Event{Kind: fsm.EventRequestWritten})
		}
	}
	return a.rec.Feed(fsm.Event{Kind: fsm.EventResponseComplete})
}

// end lets go of the stream; a clean exchange makes the connection count
// as reused for the next.
func (s *h2Stream) end(_ fsm.Decision, clean bool) {
	s.att.Done()
	s.t.h2pool.Done(s.hc, clean)
}

func (s *h2Stream) retire() { s.t.h2pool.Retire(s.hc) }

// learnGoAway reads the connection's GOAWAY, if one came: HTTP/2 client
// streams are 1, 3, 5, ... and its last stream ID is the last one the
// server processes (RFC 9113 §6.8).
func (s *h2Stream) learnGoAway() {
	if g, ok := s.hc.wire.GoAway(); ok && g.Code == http2.ErrCodeNo {
		s.t.h2pool.Learn(s.hc, int(g.LastStreamID+1)/2, time.Now())
	}
}

func (s *h2Stream) resendFrom() (uint64, any) { return s.t.h2pool.Mark(), s.hc }

// uploading reports false: x/net ends a stream's upload with its
// response.
func (s *h2Stream) uploading() bool { return false }

// acquireH2 returns a connection with a stream reserved for one
// attempt: a pooled one that can take a stream and joined the pool after
// mark after (or is same), else a new one (muxPool.acquire).
func (t *Transport) acquireH2(ctx context.Context, key pool.Key, snap *dial.Route, leg plan.Leg, start fsm.Instant, after uint64, same *h2Conn) (*h2Conn, bool, error) {
	check := func() error {
		if _, h1 := t.h1Only.Load(key); h1 {
			return errFallbackH1
		}
		return nil
	}
	dial := func() (*h2Conn, error) { return t.dialH2(ctx, key, snap, leg, start) }
	return t.h2pool.Acquire(ctx, key, after, same, check, dial)
}

// dialH2 makes a new HTTP/2 connection for key over snap: connect, as the
// HTTP/1.1 path does (direct, or through the route's proxies under one
// acquisition deadline), with the leg's ALPN list for TLS with an https
// origin (h2c with prior knowledge for a direct http route; the plan
// refuses h2c through a proxy), the ALPN check, the adapters/h2
// observer over the plaintext side, and x/net's ClientConn over that.
func (t *Transport) dialH2(ctx context.Context, key pool.Key, snap *dial.Route, leg plan.Leg, start fsm.Instant) (*h2Conn, error) {
	c, err := t.dial.Connect(ctx, key, snap, dial.Opts{ALPN: leg.ALPN, Start: start})
	if err != nil {
		return nil, err
	}
	if c.TLS != nil && c.TLS.NegotiatedProtocol != http2.NextProtoTLS {
		c.Conn.Close()
		if leg.Next == plan.FallbackALPN {
			t.h1Only.Store(key, struct{}{})
			return nil, errFallbackH1
		}
		return nil, fmt.Errorf("replaysafe: %s did not select h2 in ALPN (selected %q)", key.Addr, c.TLS.NegotiatedProtocol)
	}
	oc, wire := h2.Observe(c.Conn)
	cc, err := t.h2factory.NewClientConn(oc)
	if err != nil {
		c.Conn.Close()
		return nil, err
	}
	// The dialing attempt's stream, reserved like every other, so that
	// x/net counts it before the attempt's RoundTrip starts.
	if !cc.ReserveNewRequest() {
		cc.Close()
		return nil, fmt.Errorf("replaysafe: new HTTP/2 connection to %s takes no stream", key.Addr)
	}
	return &h2Conn{cc: cc, wire: wire, tls: c.TLS, conn: oc, state: pool.MuxState{Key: key}}, nil
}
