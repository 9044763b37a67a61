package transports

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
)

// errFallbackH1 means ALPN selected HTTP/1.1 under ProtocolNegotiate: the
// call goes to the HTTP/1.1 path, nothing of it having been sent.
var errFallbackH1 = errors.New("replaysafe: ALPN selected HTTP/1.1")

// errH2Proxied means ProtocolHTTP2 met an http (h2c) route through a
// proxy, which the HTTP/2 path does not dial: HTTP/2 through a proxy is
// TLS with the origin inside the tunnel, ALPN h2.
var errH2Proxied = errors.New("replaysafe: h2c (HTTP/2 over cleartext) through a proxy is not supported")

// newH2Factory returns the http2.Transport whose only use is
// NewClientConn: its RoundTrip, and with it x/net's retry loop and
// backoff sleeps, never runs.
func newH2Factory(o Options) *http2.Transport {
	t := &http2.Transport{
		DisableCompression: o.DisableCompression,
		AllowHTTP:          true,
	}
	if o.IdleConnTimeout > 0 {
		t.IdleConnTimeout = o.IdleConnTimeout
	}
	if o.MaxResponseHeaderBytes > 0 && o.MaxResponseHeaderBytes <= 1<<32-1 {
		t.MaxHeaderListSize = uint32(o.MaxResponseHeaderBytes)
	}
	return t
}

// runH2 is call.run for HTTP/2: at most two wire attempts, the resend at
// once on a new connection.
func (c *call) runH2() (*http.Response, error) {
	if err := checkH2Header(c.req.Header); err != nil {
		if c.req.Body != nil {
			c.req.Body.Close()
		}
		return nil, err
	}
	facts := c.facts
	var body io.ReadCloser = c.req.Body
	for n := 1; n <= maxAttempts; n++ {
		resp, next, err := c.attemptH2(n, facts, body)
		if next == nil {
			return resp, err
		}
		facts, body = next.facts, next.body
	}
	panic("replaysafe: fsm decided a second resend") // RS08 forbids it
}

// checkH2Header rejects the connection-specific fields HTTP/2 forbids
// (RFC 9113 §8.2.2) that x/net refuses only once it holds a connection:
// its refusal comes before anything is written, so it would read as a
// request handed back, be resent, and fail the same way.
func checkH2Header(h http.Header) error {
	if v := h.Values("Upgrade"); len(v) > 0 && v[0] != "" {
		return fmt.Errorf("replaysafe: HTTP/2 request with an Upgrade header field %q", v)
	}
	if v := h.Values("Transfer-Encoding"); len(v) > 1 || len(v) == 1 && v[0] != "" && v[0] != "chunked" {
		return fmt.Errorf("replaysafe: HTTP/2 request with Transfer-Encoding %q", v)
	}
	if v := h.Values("Connection"); len(v) > 1 || len(v) == 1 && v[0] != "" &&
		!strings.EqualFold(v[0], "close") && !strings.EqualFold(v[0], "keep-alive") {
		return fmt.Errorf("replaysafe: HTTP/2 request with Connection %q", v)
	}
	return nil
}

// h2Attempt is one HTTP/2 wire attempt: one stream.
type h2Attempt struct {
	c      *call
	n      int
	rec    *h2Rec
	ctx    context.Context // the call's context, canceled on a deadline or at the end
	cancel context.CancelCauseFunc
	hc     *h2Conn
	reused bool
	att    *h2.Attempt
	body   *reqBody // nil without a body
}

// attemptH2 runs wire attempt n over HTTP/2. It returns the response, or
// the final error, or the next attempt's start when fsm decided to
// resend; or errFallbackH1 (attempt 1 only, nothing sent, nothing
// reported) when ALPN selected HTTP/1.1.
func (c *call) attemptH2(n int, facts fsm.Request, body io.ReadCloser) (*http.Response, *resend, error) {
	ctx, cancel := context.WithCancelCause(c.ctx)
	a := &h2Attempt{c: c, n: n, ctx: ctx, cancel: cancel}
	a.rec = newH2Rec(facts, c.t.limits, c.t.clock, a.deadlinePassed)
	if body != nil && body != http.NoBody {
		a.body = newReqBody(body, a.rec.bodyRead, true)
	}

	hc, reused, err := c.t.acquireH2(ctx, c.key, n == 1)
	if err != nil {
		if n == 1 && errors.Is(err, errFallbackH1) {
			a.rec.stop()
			cancel(nil)
			return nil, nil, err
		}
		if a.body != nil {
			a.body.stackFinished() // x/net never saw it
		}
		ev := fsm.Event{Kind: fsm.EventAcquireFailed}
		if e, ok := contextEvent(c.ctx); ok {
			ev = e
		}
		return a.failed(a.rec.feed(ev), a.cause(err))
	}
	a.hc, a.reused = hc, reused
	a.rec.feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH2})
	if trace := httptrace.ContextClientTrace(c.ctx); trace != nil && trace.GotConn != nil {
		// x/net calls it from its Transport's loop only, which never runs.
		trace.GotConn(httptrace.GotConnInfo{Conn: hc.conn, Reused: reused})
	}

	// Every request on an observed ClientConn needs its own Attempt, even
	// one a deadline already decided: RoundTrip also gives back the stream
	// reservation take made.
	a.att = hc.wire.NewAttempt()
	out := c.req.WithContext(httptrace.WithClientTrace(ctx, a.att.Trace(a.rec.emit)))
	out.Header = routeFrom(c.ctx).header(out.Header)
	if a.body != nil {
		out.Body = a.body
	} else {
		out.Body = body
	}
	resp, err := hc.cc.RoundTrip(out)
	if err != nil {
		if a.body != nil && a.rec.facts()&fsm.FactBodyRead == 0 {
			a.body.stackFinished() // x/net closes it too; without a read it is not reading
		}
		ev := a.att.Failure(ctx, err)
		if local := a.localErr(); local != nil && errors.Is(err, local) {
			ev = fsm.Event{Kind: fsm.EventCanceled} // the caller's body failed: a local failure
		}
		return a.failed(a.rec.feed(ev), a.cause(err))
	}
	d := a.rec.finalHeaders()
	if d.Action != fsm.ActionDeliver {
		resp.Body.Close()
		return a.failed(d, a.cause(context.Cause(ctx)))
	}
	return a.deliver(resp), nil, nil
}

// acquireH2 returns a connection with a stream reserved for one attempt:
// for an original attempt a pooled one that can take a stream, else a new
// one; a resend always gets a new one.
//
// Original attempts that miss the pool together share one dial: the
// others wait for it (under their own acquisition deadline), then try the
// pool again, and dial themselves only when the new connection cannot
// take their stream either.
func (t *Transport) acquireH2(ctx context.Context, key connKey, pooled bool) (*h2Conn, bool, error) {
	var dialed func()
	for pooled {
		if hc, reused := t.h2pool.take(key); hc != nil {
			return hc, reused, nil
		}
		if _, h1 := t.h1Only.Load(key); h1 {
			return nil, false, errFallbackH1
		}
		wait, lead := t.h2pool.joinDial(key)
		if lead != nil {
			dialed = lead
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, context.Cause(ctx)
		}
	}
	hc, err := t.dialH2(ctx, key)
	if err == nil {
		t.h2pool.add(hc)
	}
	if dialed != nil {
		dialed()
	}
	if err != nil {
		return nil, false, err
	}
	return hc, false, nil
}

// dialH2 makes a new HTTP/2 connection for key: connect, as the HTTP/1.1
// path does (direct, or through the route's proxies under one acquisition
// deadline), with the ALPN list of the protocol policy for TLS with an
// https origin (h2c with prior knowledge for a direct http route), the
// ALPN check, the adapters/h2 observer over the plaintext side, and
// x/net's ClientConn over that.
func (t *Transport) dialH2(ctx context.Context, key connKey) (*h2Conn, error) {
	snap := routeFrom(ctx)
	if key.scheme != "https" && snap != nil && snap.route.Proxied() {
		if t.opt.Protocol == ProtocolNegotiate {
			return nil, errFallbackH1 // not reached: h2For keeps http on HTTP/1.1
		}
		return nil, errH2Proxied
	}
	c, err := t.connect(ctx, key, snap, t.h2Connect())
	if err != nil {
		return nil, err
	}
	if c.tls != nil && c.tls.NegotiatedProtocol != http2.NextProtoTLS {
		c.conn.Close()
		if t.opt.Protocol == ProtocolNegotiate {
			t.h1Only.Store(key, true)
			return nil, errFallbackH1
		}
		return nil, fmt.Errorf("replaysafe: %s did not select h2 in ALPN (selected %q)", key.addr, c.tls.NegotiatedProtocol)
	}
	oc, wire := h2.Observe(c.conn)
	cc, err := t.h2factory.NewClientConn(oc)
	if err != nil {
		c.conn.Close()
		return nil, err
	}
	return &h2Conn{key: key, cc: cc, wire: wire, tls: c.tls, conn: oc}, nil
}

// h2Connect is how the HTTP/2 path connects: ALPN offers h2 alone, or h2
// then http/1.1 under ProtocolNegotiate; no WireCounter under TLS, the
// observer watches the plaintext side.
func (t *Transport) h2Connect() connectOpts {
	alpn := []string{http2.NextProtoTLS}
	if t.opt.Protocol == ProtocolNegotiate {
		alpn = append(alpn, "http/1.1")
	}
	return connectOpts{alpn: alpn}
}

// usesH2 reports whether a call for key starts on the HTTP/2 path.
func (t *Transport) usesH2(key connKey) bool {
	if !t.opt.Protocol.h2For(key) {
		return false
	}
	_, h1 := t.h1Only.Load(key)
	return !h1
}

// deadlinePassed is the recorder's deadline hook: abort the exchange.
func (a *h2Attempt) deadlinePassed(p fsm.Phase) {
	a.cancel(&TimeoutError{Phase: p, Limit: a.c.t.limits.For(p)})
}

// cause returns the TimeoutError when a phase limit aborted the attempt
// (the AcquireDeadlineError naming the step on a proxied route), else
// err.
func (a *h2Attempt) cause(err error) error { return abortCause(a.ctx, err) }

func (a *h2Attempt) localErr() error {
	if a.body == nil {
		return nil
	}
	return a.body.readErr()
}

// endStream lets go of the attempt's stream; a resend also retires the
// connection, so that it takes no new stream. clean reports a complete
// exchange, which makes the connection count as reused for the next.
func (a *h2Attempt) endStream(d fsm.Decision, clean bool) {
	a.rec.stop()
	if a.hc == nil {
		return
	}
	a.att.Done()
	if d.Action == fsm.ActionResend {
		a.c.t.h2pool.retire(a.hc)
	}
	a.c.t.h2pool.done(a.hc, clean)
}

// failed ends an attempt that did not deliver: it fails the call or
// hands the next attempt its start, at once.
func (a *h2Attempt) failed(d fsm.Decision, err error) (*http.Response, *resend, error) {
	a.endStream(d, false)
	a.cancel(nil)
	a.report(d, err)
	switch d.Action {
	case fsm.ActionResend:
		next, gerr := a.nextAttempt()
		if gerr != nil {
			return nil, nil, &Error{Rule: d.Rule, Attempts: a.n, Err: gerr}
		}
		return nil, next, nil
	case fsm.ActionFail:
		if a.body != nil {
			a.body.release(false)
		}
		return nil, nil, &Error{Rule: d.Rule, Attempts: a.n, Err: err}
	}
	panic("replaysafe: attempt failed with decision " + d.String())
}

// nextAttempt prepares the resend of this attempt.
func (a *h2Attempt) nextAttempt() (*resend, error) {
	return a.c.nextResend(a.rec.request(), a.rec.facts(), a.body)
}

// deliver hands resp to the caller with its body wrapped so that its end
// ends the attempt.
func (a *h2Attempt) deliver(resp *http.Response) *http.Response {
	resp.Request = a.c.req
	if resp.Body == nil || resp.Body == http.NoBody {
		a.finishBody(io.EOF)
		return resp
	}
	resp.Body = &respBody{rc: resp.Body, a: a}
	return resp
}

// finishBody ends a delivered attempt when its response body ends.
func (a *h2Attempt) finishBody(err error) {
	var d fsm.Decision
	clean := false
	switch {
	case errors.Is(err, io.EOF):
		a.wroteFromWire()
		d = a.rec.feed(fsm.Event{Kind: fsm.EventResponseComplete})
		err, clean = nil, true
	case errors.Is(err, errAbandoned):
		d = a.rec.feed(fsm.Event{Kind: fsm.EventCanceled})
	default:
		d = a.rec.feed(a.att.Failure(a.ctx, err))
	}
	a.endStream(d, clean)
	a.cancel(nil)
	if a.body != nil {
		a.body.release(false)
	}
	a.report(d, err)
}

// wroteFromWire feeds what the wire shows was written of the request when
// x/net's hooks, which run on its write goroutine, have not reported it
// yet: a fast server's whole response can be read before them.
func (a *h2Attempt) wroteFromWire() {
	c := a.att.Claim()
	if !c.Wrote || c.Stream == 0 {
		return
	}
	a.rec.emit(fsm.Event{Kind: fsm.EventFirstByteWritten})
	if f, ok := a.hc.wire.Stream(c.Stream); ok && f.EndStreamWritten {
		a.rec.emit(fsm.Event{Kind: fsm.EventRequestWritten})
	}
}

// report tells the Observer how the attempt ended.
func (a *h2Attempt) report(d fsm.Decision, err error) {
	if a.c.t.opt.Observer.OnAttempt == nil {
		return
	}
	a.c.t.opt.Observer.attempt(AttemptReport{
		Request:  a.c.req,
		Number:   a.n,
		Facts:    a.rec.request(),
		Reused:   a.reused,
		Decision: d,
		Events:   a.rec.eventList(),
		Err:      err,
		Trace:    a.rec.trace(),
	})
}
