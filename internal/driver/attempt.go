package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// attemptRecorder is an attempt's recorder: the adapters/recorder Core that
// feeds its machine, with the final headers its stack reports. The
// HTTP/1.1 recorder (adapters/h1) and the HTTP/2 and HTTP/3 one
// (streamRec) both are.
type attemptRecorder interface {
	Feed(e fsm.Event) fsm.Decision
	BodyRead()
	FinalHeaders() fsm.Decision
	Decision() fsm.Decision
	Facts() fsm.Facts
	Request() fsm.Request
	Events() []fsm.Event
	Start() fsm.Instant
	Arm()
	Stop()
	Stopped() bool
	Seal() (fsm.Decision, []fsm.Event, string)
}

// attemptWire is what a protocol adds to an attempt once it holds a
// connection (HTTP/1.1, h1.go) or a stream on one (HTTP/2, h2.go;
// HTTP/3, h3.go). Everything else about an attempt is the one driver's
// below.
type attemptWire interface {
	// fail classifies err, from the stack's RoundTrip or from a response
	// body read, and feeds it; a failure of the caller's own request body
	// is a local failure (RS21) on every protocol.
	fail(a *attempt, err error) fsm.Decision
	// complete feeds the response's clean end, after what the stack's
	// own hooks may not have reported yet.
	complete(a *attempt) fsm.Decision
	// end lets go of the connection or stream, once, after decision d;
	// clean reports a complete exchange.
	end(d fsm.Decision, clean bool)
	// retire takes the connection out of the pool: it takes no new
	// attempt and closes once its attempts are done.
	retire()
	// delivered prepares a response for the caller and reports whether
	// the caller now owns the connection (HTTP/1.1 101 Switching
	// Protocols): the attempt then ends at once.
	delivered(resp *http.Response) (owned bool)
	// bodyDoneOnError reports whether, when RoundTrip failed, the
	// request body it read from is to be closed now: HTTP/1.1, because
	// net/http is done with it; HTTP/3, because quic-go closes it only
	// once a Read returns, which a producer that went quiet may never
	// let happen (x/net closes it itself, as the request ends).
	bodyDoneOnError() bool
	// informational returns the error of informational (1xx) responses
	// beyond their bound, or nil: the stack's own error does not say so.
	informational() error
	// resendFrom returns what a resend after this attempt may take:
	// connections whose dial started after a mark (the pool's clock now,
	// or, when connFailed, when the connection was first seen failing,
	// the same for every request it displaced, or, for HTTP/3's
	// rejection of one request alone, the rejection's mark, which any
	// other pooled connection passes too) and the attempt's own
	// connection, taken again only after a refusal of the stream alone
	// (see streamOnly). HTTP/1.1 returns zero values: its resend always
	// dials.
	resendFrom(connFailed bool) (after uint64, same any)
	// streamReset reports whether err, the attempt's failure, was the
	// server resetting the attempt's stream alone, its connection still
	// open: no loss of the connection. HTTP/1.1: false.
	streamReset(err error) bool
	// rejectedAlone reports whether an attempt decided by rule was
	// rejected by the server alone, on a connection that stays open
	// with no GOAWAY: HTTP/3's H3_REQUEST_REJECTED (RS15). The connection
	// stays pooled for other requests, but the resend never takes it
	// (spec/choices.md, choice 22). HTTP/1.1 and HTTP/2: false.
	rejectedAlone(rule fsm.Rule) bool
	// connLost tells the pool of key that the attempt's connection died
	// under it, so that refused dials to the route soon after are taken
	// for a restart (pool.Down.Lost).
	connLost(key pool.Key)
	// resendLost tells the pool that this attempt, a displaced
	// request's resend, failed; if its connection is gone and carried
	// other resends, the route learns to spread them (pool.Mux.ResendLost).
	resendLost()
	// learnGoAway tells the pool, when the connection received a GOAWAY,
	// how many streams the server accepted on it (see muxPool.learn).
	learnGoAway()
	// uploading reports whether the stack is still sending the request
	// body after the response ended; the attempt then leaves its context
	// to the upload (see attempt.finishBody).
	uploading() bool
}

// attempt is one wire attempt of a call, on any protocol: the one
// driver of the machine's decisions.
type attempt struct {
	tr     *try
	cd     fsm.CallDecision // how the call went on after this attempt
	rec    attemptRecorder
	body   *reqBody    // nil without a body; allocated apart, so that a request without one does not pay for it
	wire   attemptWire // nil until a connection (HTTP/1.1) or stream was had
	status int         // the final response's status, once its header section arrived

	// The narrow fields share a word (an attempt is held per request in
	// flight); ended belongs to the context below and is guarded by mu.
	number    int32 // within the call, as the call machine counts (at most MaxAttempts)
	displaced bool  // a displaced request's resend (resend.displaced)
	reused    bool
	hedge     bool // a hedge: a copy sent beside another in flight (resend.hedge)
	ended     bool // cancel was called

	// The attempt's own context, made only when something may have to
	// abort the exchange while the stack holds it (see context): a pool
	// miss, a write or header limit, a watched request body. Without
	// one the stack gets the caller's context and an abort before the
	// stack got the request is only recorded. It is allocated apart, as
	// body is: most attempts of a GET on a pooled connection make none.
	mu  sync.Mutex
	own *ownContext // nil until made, or until ended with a cause
}

// ownContext is an attempt's own context, or the cause it ended with
// before one was made.
type ownContext struct {
	ctx      context.Context // nil until made
	cancelFn context.CancelCauseFunc
	endCause error // the cause, when ended without a context
}

// bodyWatch says how an attempt's request body is watched. mux is set
// for HTTP/2 and HTTP/3: their stacks may still read a body handed on to
// the resend (reqBody guards it), and BodyReadTimeout and
// UploadStallTimeout apply; finish says whether the stack reports the
// end of the upload (see reqBody.watchStalls).
type bodyWatch struct{ mux, finish bool }

// newAttempt starts the try's next wire attempt in a (zero, and
// allocated by the protocol together with its recorder and wire) with the
// given body and recorder rec, made unarmed with a as its Deadliner;
// hedge marks a hedge.
func (tr *try) newAttempt(a *attempt, body io.ReadCloser, rec attemptRecorder, w bodyWatch, hedge bool) *attempt {
	a.tr, a.number, a.rec, a.hedge = tr, int32(tr.call.attempts()+1), rec, hedge
	if h := tr.hedge; h != nil {
		h.add(a)
	}
	if f := tr.call.t.cfg.OnAttemptStart; f != nil {
		f(AttemptStart{Request: tr.call.req, Number: int(a.number), Facts: rec.Request(), Hedge: hedge})
	}
	if body != nil && body != http.NoBody {
		a.body = new(reqBody)
		a.body.init(body, a.rec, w.mux)
		if w.mux {
			a.body.watchStalls(tr.call.t.clock, tr.call.t.cfg.BodyReadTimeout, tr.call.t.cfg.UploadStallTimeout, a, w.finish)
		}
	}
	if tr.call.t.limits.Write > 0 || tr.call.t.limits.Header > 0 || w.mux && a.body != nil || tr.hedge != nil {
		// A limit may pass, or a stall fire, while the stack holds the
		// request, a multiplexed stack may still be uploading when
		// the response ends, and a copy of a hedged call is canceled when
		// another wins: the stack runs on the attempt's context.
		a.context()
	}
	return a
}

// context returns the attempt's own context, made now if it was not:
// the caller's, canceled on a deadline or when the attempt ends.
func (a *attempt) context() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.own == nil {
		a.own = new(ownContext)
	}
	o := a.own
	if o.ctx == nil {
		o.ctx, o.cancelFn = context.WithCancelCause(a.tr.call.context())
		if a.ended {
			o.cancelFn(o.endCause)
		}
	}
	return o.ctx
}

// acquireContext is context for an attempt that may wait for or dial a
// connection: it also arms the recorder's deadline timer (the
// acquisition limit), which a pooled connection acquired at once never
// needs. Later phases' limits arm it themselves as their events are fed.
func (a *attempt) acquireContext() context.Context {
	ctx := a.context()
	a.rec.Arm()
	return ctx
}

// stackContext is the context of the request handed to the stack: the
// attempt's own, if it was made, else the caller's.
func (a *attempt) stackContext() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.own == nil || a.own.ctx == nil {
		return a.tr.call.context()
	}
	return a.own.ctx
}

// cancel ends the attempt's context with cause (nil: the attempt is
// over), as context.CancelCauseFunc does: the first call's cause wins.
func (a *attempt) cancel(cause error) {
	a.mu.Lock()
	var cancel context.CancelCauseFunc
	if a.own != nil {
		cancel = a.own.cancelFn
	}
	if !a.ended {
		a.ended = true
		if cause != nil && cancel == nil {
			// Kept for a context made later (context) and for
			// abortCause; with a context, the context keeps it.
			if a.own == nil {
				a.own = new(ownContext)
			}
			a.own.endCause = cause
		}
	}
	a.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// abortCause returns what context.Cause returns for the attempt's
// context: nil while it runs, the first cancel's cause (context.Canceled
// for nil) after.
func (a *attempt) abortCause() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.own != nil && a.own.ctx != nil:
		return context.Cause(a.own.ctx)
	case !a.ended:
		return nil
	case a.own == nil || a.own.endCause == nil:
		return context.Canceled
	}
	return a.own.endCause
}

// outgoing returns the request to hand the stack: the caller's, on the
// attempt's context with trace installed (nil: none, for a stack that
// reports its evidence otherwise), the route's header and the attempt's
// body.
//
// When none of them differs from the caller's request (its own context,
// a header the route leaves as it is, no body or the same empty one) it
// is the caller's request itself, not a copy: a stack may not modify the
// request it is handed (http.RoundTripper), and neither may the caller
// of outgoing.
func (a *attempt) outgoing(body io.ReadCloser, trace func(context.Context) context.Context) *http.Request {
	req := a.tr.call.req
	ctx := a.stackContext()
	if trace != nil {
		ctx = trace(ctx)
	}
	header := a.tr.snap.Header(req.Header)
	// Without a.body, body is nil or http.NoBody, whose comparison with
	// the caller's body cannot panic.
	if a.body == nil && body == req.Body && ctx == req.Context() && sameHeader(header, req.Header) {
		return req
	}
	out := req.WithContext(ctx)
	out.Header = header
	if a.body != nil {
		out.Body = a.body
	} else {
		out.Body = body
	}
	return out
}

// sameHeader reports whether x and y are the same map, not merely equal
// ones: dial.Route.Header returns the header it is given unless it drops
// a field from a copy.
func sameHeader(x, y http.Header) bool {
	return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
}

// acquireFailed ends an attempt that got no connection or stream.
func (a *attempt) acquireFailed(err error) (*http.Response, *resend, error) {
	if a.body != nil {
		a.body.stackFinished() // the stack never saw it
	}
	ev := fsm.Event{Kind: fsm.EventAcquireFailed}
	if e, ok := contextEvent(a.tr.call.context()); ok {
		ev = e
	}
	return a.failed(a.rec.Feed(ev), a.cause(err))
}

// roundTripped ends the stack's RoundTrip: it fails the attempt on err,
// else feeds the final headers and delivers resp.
func (a *attempt) roundTripped(resp *http.Response, err error) (*http.Response, *resend, error) {
	if err != nil {
		if a.body != nil && (a.wire.bodyDoneOnError() || a.rec.Facts()&fsm.FactBodyRead == 0) {
			a.body.stackFinished() // the stack closes it too; without a read it is not reading
		}
		d := a.wire.fail(a, err)
		if ie := a.wire.informational(); ie != nil {
			err = boundError{bound: ie, stack: err}
		}
		return a.failed(d, a.cause(err))
	}
	d := a.rec.FinalHeaders()
	if d.Action != fsm.ActionDeliver {
		resp.Body.Close()
		return a.failed(d, a.cause(a.abortCause()))
	}
	a.status = resp.StatusCode
	o := fsm.Outcome{Decision: d, Facts: a.rec.Facts(), Status: resp.StatusCode}
	if v := resp.Header["Retry-After"]; len(v) > 0 && v[0] != "" { // canonical key: no CanonicalMIMEHeaderKey per call
		o.RetryAfter, o.HasRetryAfter = fsm.ParseRetryAfter(v[0], time.Now())
	}
	var lost bool
	if a.cd, lost = a.stepCopy(o); lost {
		// Another copy's response header came first: this one is
		// closed unread, which ends the attempt.
		if body := a.deliver(resp).Body; body != nil {
			body.Close()
		}
		return nil, nil, errHedgeLost
	}
	if a.cd.Action != fsm.ActionResend {
		return a.deliver(resp), nil, nil
	}
	// The call goes on without this response: its body is read up to a
	// bound, so that a small one leaves the connection reusable, and
	// closed, which ends the attempt.
	status := resp.Status
	body := a.deliver(resp).Body
	if body != nil {
		io.CopyN(io.Discard, body, maxDiscard)
		body.Close()
	}
	_, err = a.tr.again(a.cd, fmt.Errorf("replaysafe: the server answered %s", proxy.CutText(status, proxy.MaxPeerText)), nil)
	return nil, nil, err
}

// maxDiscard bounds what is read of a response the call does not deliver
// (one it retries) before it is closed.
const maxDiscard = 64 << 10

// DeadlinePassed is the recorder's deadline hook (recorder.Deadliner):
// abort the exchange.
func (a *attempt) DeadlinePassed(p fsm.Phase) {
	a.cancel(&recorder.TimeoutError{Phase: p, Limit: a.tr.call.t.limits.For(p)})
}

// stalled is the request body's stall hook: the upload made no progress
// for its limit. The machine decides the timeout first (RS06), then the
// exchange is aborted with the stall as its cause. After the response
// ended the attempt is over: a stalled transport then retires the
// connection, which closes once its other streams are done and so ends
// the stack's blocked write; a stalled producer gets its error from the
// request body's next read.
func (a *attempt) stalled(e *recorder.TimeoutError) {
	if a.rec.Stopped() {
		if e.Stall == recorder.StallTransport && a.wire != nil {
			a.wire.retire()
		}
		return
	}
	a.rec.Feed(fsm.Event{Kind: fsm.EventTimeout, Phase: fsm.PhaseWrite})
	a.cancel(e)
}

// cause returns the TimeoutError when a phase limit aborted the attempt
// (the AcquireDeadlineError naming the step on a proxied route), else
// err.
func (a *attempt) cause(err error) error { return abortCause(a.abortCause(), err) }

func (a *attempt) localErr() error {
	if a.body == nil {
		return nil
	}
	return a.body.readErr()
}

// failureEvent returns ev, the adapter's reading of err, unless err is
// the caller's own request body's failure: a local failure (RS21).
func (a *attempt) failureEvent(ev fsm.Event, err error) fsm.Event {
	if local := a.localErr(); local != nil && errors.Is(err, local) {
		return fsm.Event{Kind: fsm.EventLocalFailure}
	}
	return ev
}

// streamRecorder starts r as the recorder of HTTP/2 or HTTP/3 attempt
// a with facts, unarmed (attempt.acquireContext arms it).
func (tr *try) streamRecorder(r *streamRec, a *attempt, facts fsm.Request) *streamRec {
	r.InitUnarmed(facts, tr.call.t.limits, tr.call.t.clock, a)
	tr.call.t.traceOrSkip(&r.Core)
	return r
}

// traceOrSkip makes c keep no trace unless an observer (OnAttempt) will
// be given it: the trace is only ever read for the report.
func (t *Transport) traceOrSkip(c *recorder.Core) {
	if t.cfg.OnAttempt == nil {
		c.SkipEvents()
	}
}

// endWire stops the recorder and lets go of the attempt's connection or
// stream; clean reports a complete exchange. A connection whose failure
// made a resend takes no new attempt, unless the failure was the stream's
// alone: a refusal of it, or (keep) a reset of it by the server on a
// connection that stays open.
func (a *attempt) endWire(d fsm.Decision, clean, keep bool) {
	a.rec.Stop()
	if a.wire == nil {
		return
	}
	if d.Action == fsm.ActionResend && !streamOnly(d.Rule) && !keep {
		a.wire.retire()
	}
	a.wire.end(d, clean)
}

// streamOnly reports whether rule resends after the server refused one
// stream on a connection that stays healthy: HTTP/2 REFUSED_STREAM. The
// resend may then run on the same connection (spec/choices.md): frames
// arrive in order on its one TCP stream, so by the time the refusal is
// read the stack has read, and acknowledged, every SETTINGS frame the
// server sent before it, which is what a server refusing early streams
// waits for. Not HTTP/3's H3_REQUEST_REJECTED: a draining server rejects
// requests and sends GOAWAY on another QUIC stream, which may arrive
// after the rejection, so the same connection could reject the resend
// too.
func streamOnly(rule fsm.Rule) bool {
	return rule == fsm.RuleEvidenceRefusedStream
}

// connDeath reports whether an attempt that ended by rule on a
// connection may have lost that connection under it: any failure but
// the caller's (canceled, a local failure of its body), a timeout (the
// server is slow, not gone) and an impossible order of events.
func connDeath(rule fsm.Rule) bool {
	switch rule {
	case fsm.RuleCanceled, fsm.RuleTimeout, fsm.RuleLocalFailure, fsm.RuleInvalidOrder:
		return false
	}
	return true
}

// failed ends an attempt that did not deliver: it fails the call or
// hands the next attempt its start, at once.
func (a *attempt) failed(d fsm.Decision, err error) (*http.Response, *resend, error) {
	var after uint64
	var same any
	if a.wire != nil {
		a.wire.learnGoAway()
		if a.displaced {
			a.wire.resendLost()
		}
	}
	reset := a.wire != nil && a.wire.streamReset(err)
	alone := a.wire != nil && a.wire.rejectedAlone(d.Rule)
	if a.wire != nil && connDeath(d.Rule) && !streamOnly(d.Rule) && !reset && !alone {
		a.wire.connLost(a.tr.key)
	}
	displaced := a.wire != nil && d.Action == fsm.ActionResend
	keep := displaced && reset && d.Rule == fsm.RuleAmbiguousIdempotentResend
	switch {
	case keep:
		// The server reset the stream alone and its connection stays
		// open: a stream error leaves the connection usable (RFC 9113
		// §5.4.2, RFC 9114 §8), so the connection stays pooled and the
		// resend takes any with room, this one included (spec/choices.md,
		// choice 23).
	case displaced:
		// Any other end: the resend takes only a connection that joins
		// the pool from now on (or, after REFUSED_STREAM, the same one),
		// and shares it with the other requests displaced with it
		// (choice 23).
		// After H3_REQUEST_REJECTED on a connection that stays open
		// (alone), the resend takes any other pooled connection, or one
		// dialed after the rejection, never this one, which stays pooled
		// for the others (pool.Mux.RejectMark, choice 22).
		after, same = a.wire.resendFrom(!streamOnly(d.Rule))
		if !streamOnly(d.Rule) {
			same = nil
		}
	}
	a.endWire(d, false, keep || alone)
	a.cancel(nil)
	var lost bool
	a.cd, lost = a.stepCopy(fsm.Outcome{Decision: d, Facts: a.rec.Facts()})
	a.report(err)
	if lost {
		if a.body != nil {
			a.body.release(false)
		}
		return nil, nil, errHedgeLost
	}
	resp, next, err := a.tr.afterFailure(a.cd, err, a.body)
	if next != nil {
		next.after, next.same, next.displaced = after, same, displaced
	}
	return resp, next, err
}

// deliver hands resp to the caller with its body wrapped so that its end
// ends the attempt.
func (a *attempt) deliver(resp *http.Response) *http.Response {
	resp.Request = a.tr.call.req
	if a.wire.delivered(resp) {
		// The caller owns the connection now.
		a.rec.Stop()
		a.cancel(nil)
		a.report(nil)
		if a.body != nil {
			a.body.release(false)
		}
		a.tr.call.done()
		return resp
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		a.finishBody(io.EOF)
		return resp
	}
	// The wrapper is allocated apart, once there is a body to wrap: an
	// attempt waiting for its response does not hold it.
	resp.Body = &respBody{rc: resp.Body, a: a}
	return resp
}

// finishBody ends a delivered attempt when its response body ends: io.EOF
// completes the exchange, errAbandoned means the caller closed it early,
// anything else is a read failure, for which it returns the error the
// body's Read gives the caller: the call's failure under the rule that
// decided it, wrapping err.
//
// An HTTP/3 server may answer before the request body is all sent
// (RFC 9114 §4.1): the upload then goes on after the response ended,
// driven by the stack, until the body ends, the server stops it
// (STOP_SENDING), it stalls, or the caller cancels the request. The
// attempt's context stays alive for it, and is released by the stack's
// end of the upload (see h3Stream).
func (a *attempt) finishBody(err error) error {
	var d fsm.Decision
	var failed error
	clean := false
	switch {
	case errors.Is(err, io.EOF):
		d = a.wire.complete(a)
		err, clean = nil, true
	case errors.Is(err, errAbandoned):
		d = a.rec.Feed(fsm.Event{Kind: fsm.EventCanceled}) // the caller gave up on the rest
	default:
		d = a.wire.fail(a, err)
		f := a.tr.fail(d.Rule, err)
		failed = f
		if conv := a.tr.call.t.cfg.FailureError; conv != nil {
			failed = conv(f)
		}
	}
	a.endWire(d, clean, false)
	if err != nil || !a.wire.uploading() {
		a.cancel(nil)
	}
	if a.body != nil {
		a.body.release(false)
	}
	a.report(err)
	if a.cd.Action == fsm.ActionDeliver {
		a.tr.call.done() // the call's response is over
	}
	return failed
}

// abandon ends the attempt's context when the caller closed the
// response body before its end (respBody.Close).
func (a *attempt) abandon() { a.cancel(nil) }

// report tells the Observer how the attempt ended.
func (a *attempt) report(err error) {
	a.tr.report(int(a.number), a.reused, a.hedge, a.status, err, a.rec, a.cd)
}

// boundError is a stack's error caused by a bound replaysafe set (the 1xx
// limit): it reads as the bound, whose text the stack's error repeats,
// and unwraps to both.
type boundError struct{ bound, stack error }

func (e boundError) Error() string   { return e.bound.Error() }
func (e boundError) Unwrap() []error { return []error{e.bound, e.stack} }
