package driver

import (
	"context"
	"net/http"
	"net/http/httptrace"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// attemptH1 runs wire attempt n over HTTP/1.1 from its start (the
// caller's body, or GetBody's for a buffered resend). It returns the
// response, or the final error, or the next attempt's start when fsm
// decided to resend.
func (tr *try) attemptH1(n int, start resend) (*http.Response, *resend, error) {
	ha := &h1Attempt{}
	rec := &ha.rec
	rec.InitUnarmed(start.facts, tr.call.t.limits, tr.call.t.clock, &ha.attempt) // armed by attempt.acquireContext
	tr.call.t.traceOrSkip(&rec.Core)
	rec.SetInformationalLimit(tr.call.t.informationalLimit())
	a := tr.newAttempt(&ha.attempt, start.body, rec, bodyWatch{}, start.hedge)
	if a.lostAtStart() {
		return a.failed(a.rec.Decision(), errHedgeLost)
	}

	// An original attempt takes a pooled connection at once when there is
	// one; only when it may wait or dial does it need its own context
	// and the acquisition deadline's timer.
	var pc *persistConn
	reused := false
	if c := tr.handoff; c != nil && n == 1 {
		tr.handoff = nil
		pc = tr.call.t.adopt(a.acquireContext(), tr.key, *c, rec)
	}
	// A hedge may take a pooled connection too: one carries one exchange
	// at a time, so it is never another copy's.
	first := n == 1 || start.hedge
	if pc == nil && first {
		pc = tr.call.t.pooled(tr.key, rec)
		reused = pc != nil
	}
	if pc == nil {
		var err error
		pc, reused, err = tr.call.t.acquire(a.acquireContext(), tr.key, tr.snap, tr.leg.ALPN, first, redialFor(start), rec)
		if err != nil {
			return a.acquireFailed(err)
		}
	}
	a.reused = reused
	ha.wire = h1Wire{t: tr.call.t, pc: pc, rec: rec, req: tr.call.req}
	a.wire = &ha.wire
	a.gotConn()
	rec.BoundHeaderSections(DefaultHeaderSectionTimeout, tr.call.t.clock, ha)
	if d := a.rec.Decision(); d.Action.Final() {
		// A deadline or a cancellation decided while the dial succeeded.
		if a.body != nil {
			a.body.stackFinished()
		}
		return a.failed(d, a.cause(a.abortCause()))
	}
	tr.call.t.gotConn(tr.call.context(), pc, reused)
	out := a.outgoing(start.body, func(ctx context.Context) context.Context {
		if httptrace.ContextClientTrace(ctx) == nil {
			return httptrace.WithClientTrace(ctx, pc.conn.ClientTrace()) // made once per connection
		}
		return withTrace(ctx, rec.ClientTrace()) // composed with the caller's
	})
	resp, err := pc.cc.RoundTrip(out)
	return a.roundTripped(resp, err)
}

// h1Attempt is an HTTP/1.1 attempt with its recorder and wire, in one
// allocation.
type h1Attempt struct {
	attempt
	rec  h1.Recorder
	wire h1Wire
}

// HeaderSectionTimedOut aborts the exchange whose response header
// section outlived DefaultHeaderSectionTimeout (h1.HeaderAborter): the
// connection is aborted beneath TLS first (h1.Conn.Abort), which ends
// net/http's read of the response, and then the attempt ends with err.
// In the other order net/http, seeing the attempt's context end, closes
// the TLS connection itself and waits on its close_notify to a server
// that is not reading: the round trip returned 5 s late now and then.
func (ha *h1Attempt) HeaderSectionTimedOut(err *h1.HeaderTimeoutError) {
	ha.wire.pc.conn.Abort()
	ha.cancel(err)
}

// h1Wire is an HTTP/1.1 attempt's connection: its attemptWire. The
// connection carries this one exchange; its end decides whether it goes
// back to the pool.
type h1Wire struct {
	t    *Transport
	pc   *persistConn
	rec  *h1.Recorder
	req  *http.Request
	resp *http.Response // the delivered response, if any
}

// fail feeds the failure the recorder reads from err, the connection's
// own read or write error and the caller's context.
func (w *h1Wire) fail(a *attempt, err error) fsm.Decision {
	return w.rec.Fail(err, a.tr.call.context(), a.localErr())
}

func (w *h1Wire) complete(*attempt) fsm.Decision { return w.rec.Complete() }

// end pools the connection after a clean exchange the machine says it
// may be reused after (and neither side asked to close it), else closes
// it.
func (w *h1Wire) end(d fsm.Decision, clean bool) {
	keep := clean && d.Conn == fsm.ConnReuse && w.resp != nil && !w.resp.Close && !w.req.Close && w.t.cfg.MaxIdleConnsPerHost > 0
	if w.pc.reusable() && keep {
		w.t.h1pool.Put(w.pc)
		return
	}
	w.pc.closeFor(CloseDiscarded)
}

// retire does nothing: an HTTP/1.1 connection carries one attempt, and
// end closes it unless the exchange was clean.
func (w *h1Wire) retire() {}

// delivered sets the response's TLS state; after 101 Switching Protocols
// the caller owns the connection (its body is writable), which then no
// longer counts against MaxConnsPerHost.
func (w *h1Wire) delivered(resp *http.Response) bool {
	w.resp = resp
	if w.pc.tls != nil {
		resp.TLS = w.pc.tls
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return false
	}
	w.pc.conn.Detach()
	w.pc.release()
	w.pc.obs.shut(w.pc.idle.Key.Addr, CloseTakenOver)
	return true
}

// bodyDoneOnError reports true: net/http is done with the request body
// when RoundTrip returns.
func (w *h1Wire) bodyDoneOnError() bool { return true }

// informational returns the header section bound's error, when it ended
// the exchange (net/http's error then only says the connection closed),
// else nil: for the 1xx bound net/http's error already is the bound's.
func (w *h1Wire) informational() error { return w.rec.HeaderSectionError() }

// resendFrom returns zero values: an HTTP/1.1 resend always dials.
func (w *h1Wire) resendFrom(bool) (uint64, any) { return 0, nil }

// streamReset reports false: an HTTP/1.1 exchange has no stream of its
// own to reset.
func (w *h1Wire) streamReset(error) bool { return false }

func (w *h1Wire) rejectedAlone(fsm.Rule) bool { return false }

// resendLost does nothing: an HTTP/1.1 resend has its connection alone.
func (w *h1Wire) resendLost() {}

func (w *h1Wire) learnGoAway() {}

// uploading reports false: net/http ends the upload with the exchange.
func (w *h1Wire) uploading() bool { return false }

// connLost records the loss for the HTTP/1.1 acquisition's Down.
func (w *h1Wire) connLost(key pool.Key) { w.t.h1down.Lost(key) }
