package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	adapterh2 "github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// errFallbackH1 means ALPN selected HTTP/1.1 under plan.Negotiate: the
// call goes to the HTTP/1.1 path, nothing of it having been sent.
var errFallbackH1 = errors.New("replaysafe: ALPN selected HTTP/1.1")

// errNotH2 means a server chose a protocol other than h2 in ALPN where
// the leg allows no fallback.
var errNotH2 = errors.New("did not select h2")

// alpnH1 is errFallbackH1 with the TLS connection ALPN answered on: the
// HTTP/1.1 leg takes it over (try.handoff) rather than dialing again.
type alpnH1 struct{ conn dial.Conn }

func (e *alpnH1) Error() string        { return errFallbackH1.Error() }
func (e *alpnH1) Is(target error) bool { return target == errFallbackH1 }

// h2Config returns the configuration of the Transport's HTTP/2
// connections: the response header bound of MaxResponseHeaderBytes, and
// room for more interim responses than the attempt's own 1xx bound
// (adapters/informational), which then decides.
func h2Config(cfg Config) h2.Config {
	c := cfg.H2
	c.DisableCompression, c.MaxInformational = cfg.DisableCompression, 2*informational.DefaultCount
	if cfg.MaxResponseHeaderBytes > 0 && cfg.MaxResponseHeaderBytes <= 1<<32-1 {
		c.MaxHeaderListSize = uint32(cfg.MaxResponseHeaderBytes)
	}
	return c
}

// runH2 is call.run for HTTP/2: a try's wire attempts (attempts), a
// resend at once on a connection opened after the failure, or after
// REFUSED_STREAM on the same one.
func (tr *try) runH2(start resend) (*http.Response, error) {
	if err := checkStreamHeader("HTTP/2", tr.call.req.Header); err != nil {
		return tr.refuse(err)
	}
	return tr.attempts((*try).attemptH2, start)
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
	a := tr.newAttempt(&ha.attempt, body, tr.streamRecorder(&ha.rec, &ha.attempt, start.facts), bodyWatch{mux: true}, start.hedge)
	if a.lostAtStart() {
		return a.failed(a.rec.Decision(), errHedgeLost)
	}
	a.displaced = start.displaced
	same, _ := start.same.(*h2Conn)
	// A pooled connection with room is taken at once (the pool's own
	// first step, muxPool.acquire); only an attempt that may wait or dial
	// needs its own context and the acquisition deadline's timer.
	var hc *h2Conn
	reused := false
	hc, reused, _ = tr.call.t.h2pool.Take(tr.key, start.after, same, start.displaced)
	var err error
	if hc == nil {
		hc, reused, err = tr.call.t.acquireH2(a.acquireContext(), tr.key, tr.snap, tr.leg, a.rec.Start(), start)
	}
	if err != nil {
		if n == 1 && errors.Is(err, errFallbackH1) {
			a.rec.Stop()
			a.cancel(nil)
			return nil, nil, err
		}
		if h, ok := errors.AsType[*alpnH1](err); ok {
			h.conn.Conn.Close() // a resend has no HTTP/1.1 leg to hand it to
		}
		return a.acquireFailed(err)
	}
	a.reused = reused
	if reused {
		hc.obs.reused(hc.state.Key.Addr)
	}
	a.rec.Feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH2})
	trace := httptrace.ContextClientTrace(tr.call.context())
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: hc.conn, Reused: reused})
	}

	ha.att.Init(&ha.rec)
	ha.att.SetInformationalLimit(tr.call.t.informationalLimit())
	ha.hc, ha.trace = hc, trace
	ha.unsent.Store(start.displaced) // the pool counted it as a resend
	a.wire = ha
	a.gotConn()
	out := a.outgoing(body, nil)
	resp, err := hc.cc.RoundTrip(out, ha)
	return a.roundTripped(resp, err)
}

// h2Attempt is an HTTP/2 attempt with its recorder, in one allocation:
// its attemptWire, and what the connection reports the stream's evidence
// to (h2.StreamEvents): the adapter's Attempt, which feeds the machine,
// then the caller's httptrace hooks, called as net/http's HTTP/2 client
// calls them. Both run on the connection's goroutines, with its lock
// held.
type h2Attempt struct {
	attempt
	rec   streamRec
	att   adapterh2.Attempt
	hc    *h2Conn
	trace *httptrace.ClientTrace // the caller's, or nil
	// unsent is set while the stream is a displaced request's resend
	// whose HEADERS have not been written: the pool waits for the
	// resends of a GOAWAY's burst to be on the wire before the
	// connection takes originals beyond the GOAWAY's count (pool.Mux.Sent).
	unsent atomic.Bool
}

// sent tells the pool, once, that the resend is on the wire or never
// will be.
func (ha *h2Attempt) sent() {
	if ha.unsent.Swap(false) {
		ha.t().h2pool.Sent(ha.hc)
	}
}

func (ha *h2Attempt) t() *Transport { return ha.tr.call.t }

func (ha *h2Attempt) HeadersWritten(id uint32) {
	ha.sent()
	ha.att.HeadersWritten(id)
	if ha.trace != nil && ha.trace.WroteHeaders != nil {
		ha.trace.WroteHeaders()
	}
}

func (ha *h2Attempt) BodyWritten(n int64) { ha.att.BodyWritten(n) }

func (ha *h2Attempt) RequestWritten() {
	ha.att.RequestWritten()
	if ha.trace != nil && ha.trace.WroteRequest != nil {
		ha.trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
}

func (ha *h2Attempt) ResponseStarted() {
	ha.att.ResponseStarted()
	if ha.trace != nil && ha.trace.GotFirstResponseByte != nil {
		ha.trace.GotFirstResponseByte()
	}
}

// Informational counts the 1xx against the attempt's bound first: over
// it the caller's hook does not see the response (see withTrace).
func (ha *h2Attempt) Informational(status int, header http.Header, size int) error {
	if err := ha.att.Informational(status, header, size); err != nil {
		return err
	}
	if ha.trace != nil && ha.trace.Got1xxResponse != nil {
		return ha.trace.Got1xxResponse(status, textproto.MIMEHeader(header))
	}
	return nil
}

func (ha *h2Attempt) ResponseHeaders(status int) { ha.att.ResponseHeaders(status) }

func (ha *h2Attempt) fail(a *attempt, err error) fsm.Decision {
	return a.rec.Feed(a.failureEvent(ha.att.Failure(a.stackContext(), err), err))
}

func (ha *h2Attempt) delivered(resp *http.Response) bool {
	resp.TLS = ha.hc.tls
	return false
}

// bodyDoneOnError reports false: the connection closes the request body
// itself, once its upload let go of it.
func (ha *h2Attempt) bodyDoneOnError() bool { return false }

func (ha *h2Attempt) informational() error { return ha.att.InformationalError() }

// complete feeds the response's end: the connection reported what was
// written of the request before the body's end.
func (ha *h2Attempt) complete(a *attempt) fsm.Decision {
	return a.rec.Feed(fsm.Event{Kind: fsm.EventResponseComplete})
}

// end lets go of the stream; a clean exchange makes the connection count
// as reused for the next.
func (ha *h2Attempt) end(_ fsm.Decision, clean bool) {
	ha.sent()
	ha.t().h2pool.Done(ha.hc, clean)
}

func (ha *h2Attempt) retire() {
	ha.hc.obs.retired.Store(true)
	ha.t().h2pool.Retire(ha.hc)
}

// learnGoAway reads the connection's GOAWAY, if one came: HTTP/2 client
// streams are 1, 3, 5, ... and its last stream ID is the last one the
// server processes (RFC 9113 §6.8).
func (ha *h2Attempt) learnGoAway() {
	if g, ok := ha.hc.cc.GoAway(); ok && g.Code == http2.ErrCodeNo {
		ha.t().h2pool.Learn(ha.hc, int(g.LastStreamID+1)/2, time.Now())
	}
}

func (ha *h2Attempt) resendLost() { ha.t().h2pool.ResendLost(ha.hc, time.Now()) }

func (ha *h2Attempt) resendFrom(connFailed bool) (uint64, any) {
	if connFailed {
		return ha.t().h2pool.FailMark(ha.hc), ha.hc
	}
	return ha.t().h2pool.Mark(), ha.hc
}

// rejectedAlone reports false: REFUSED_STREAM's connection stays pooled
// by streamOnly, and the resend may take it.
func (ha *h2Attempt) rejectedAlone(fsm.Rule) bool { return false }

// streamReset reports whether the server reset the stream (a remote
// *h2.StreamError) while the connection stays open.
func (ha *h2Attempt) streamReset(err error) bool {
	se, ok := errors.AsType[*h2.StreamError](err)
	return ok && se.Remote && !ha.hc.cc.Closed()
}

// uploading reports false: the connection ends a stream's upload with
// its response (a CONNECT's with its response body).
func (ha *h2Attempt) uploading() bool { return false }

// acquireH2 returns a connection with a stream reserved for one
// attempt: a pooled one that can take a stream and joined the pool after
// mark from.after (or is from.same), else a new one (pool.Mux.Acquire),
// waiting out a route that refuses when from is a displaced request's
// resend, or when the route is restarting (redialFor).
func (t *Transport) acquireH2(ctx context.Context, key pool.Key, snap *dial.Route, leg plan.Leg, start fsm.Instant, from resend) (*h2Conn, bool, error) {
	check := func() error {
		if _, h1 := t.h1Only.Load(key); h1 {
			return errFallbackH1
		}
		return nil
	}
	dial := func() (*h2Conn, error) { return t.dialH2(ctx, key, snap, leg, start) }
	same, _ := from.same.(*h2Conn)
	return t.h2pool.Acquire(ctx, key, from.after, same, check, dial, redialFor(from))
}

// dialH2 makes a new HTTP/2 connection for key over snap: connect, as the
// HTTP/1.1 path does (direct, or through the route's proxies under one
// acquisition deadline), with the leg's ALPN list for TLS with an https
// origin (h2c with prior knowledge for a direct http route; the plan
// refuses h2c through a proxy), the ALPN check, and our ClientConn over
// it with the dialing attempt's stream reserved. When ALPN selects
// HTTP/1.1 on a leg that may fall back, the connection is handed to the
// HTTP/1.1 leg (alpnH1), with the wire counter it needs already beneath
// TLS.
func (t *Transport) dialH2(ctx context.Context, key pool.Key, snap *dial.Route, leg plan.Leg, start fsm.Instant) (*h2Conn, error) {
	fallback := leg.Next == plan.FallbackALPN
	c, err := t.dial.Connect(ctx, key, snap, dial.Opts{ALPN: leg.ALPN, Start: start, CountWire: fallback})
	if err != nil {
		return nil, err
	}
	if c.TLS != nil && c.TLS.NegotiatedProtocol != http2.NextProtoTLS {
		if fallback {
			t.h1Only.Store(key, struct{}{})
			return nil, &alpnH1{conn: c}
		}
		c.Conn.Close()
		return nil, fmt.Errorf("replaysafe: %s %w in ALPN (selected %q)", key.Addr, errNotH2, c.TLS.NegotiatedProtocol)
	}
	cc, err := h2.NewClientConn(c.Conn, t.h2cfg)
	if err != nil {
		c.Conn.Close()
		return nil, err
	}
	// The dialing attempt's stream, reserved like every other.
	if !cc.Reserve() {
		cc.Close()
		return nil, fmt.Errorf("replaysafe: new HTTP/2 connection to %s takes no stream", key.Addr)
	}
	hc := &h2Conn{cc: cc, tls: c.TLS, conn: c.Conn, state: pool.MuxState{Key: key}}
	t.opened(&hc.obs, key, fsm.ProtoH2)
	return hc, nil
}

// connLost records the loss in the HTTP/2 pool.
func (ha *h2Attempt) connLost(key pool.Key) { ha.t().h2pool.Lost(key) }
