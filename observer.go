package replaysafe

import (
	"net/http"

	"github.com/replaysafe/replaysafe/fsm"
)

// Observer receives what a Transport does, for logging and tests. Every
// field may be nil. The hooks are called synchronously from the call's
// goroutine (or the goroutine reading or closing a response body) and must
// not block for long.
//
// User-facing semantics follow the reference client: per call, OnRequest
// once, then OnResponse once or OnError once, and OnError only for the
// final failure: a failure that is resent is seen by OnAttempt alone.
type Observer struct {
	// OnRequest is called once per call, before its first wire attempt,
	// with the caller's request.
	OnRequest func(req *http.Request)
	// OnAttempt is called once per wire attempt when it is over: at once
	// when it failed or is resent, and when its response body is finished
	// (read to the end, failed or closed) when it delivered.
	OnAttempt func(AttemptReport)
	// OnResponse is called once when a call delivers a response, before
	// RoundTrip returns it.
	OnResponse func(req *http.Request, resp *http.Response)
	// OnError is called once when a call fails, with the error RoundTrip
	// returns, before RoundTrip returns it.
	//
	// It is the way to get a call's *Error under http.Client.Timeout,
	// which may replace the error Client.Do returns with net/http's own,
	// keeping only the text (errors.As then finds nothing): req is the
	// request net/http handed to RoundTrip, whose context derives from
	// the caller's, so a slot the caller put in the context (a pointer
	// under a key of its own) can receive err, and Client.Do, which
	// waits for RoundTrip, returns after it was filled. See
	// ExampleObserver_clientTimeout. With a deadline on the request's
	// context instead, Client.Do returns the *Error itself.
	OnError func(req *http.Request, err error)

	// OnAttemptStart is called as each wire attempt begins, before it
	// takes or dials a connection, from the call's goroutine (a hedged
	// call's copies each from their own): with OnAttempt it brackets the
	// attempt.
	OnAttemptStart func(AttemptStart)
	// OnConn is told of the Transport's connections: each one dialed
	// (once it is ready for its first request), each attempt that took
	// a pooled one, and each close with its reason (ConnEvent). A
	// connection reported dialed is reported closed exactly once; it may
	// be called from any goroutine, the pool's timers included.
	OnConn func(ConnEvent)
}

// AttemptReport describes one finished wire attempt.
type AttemptReport struct {
	// Request is the caller's request.
	Request *http.Request
	// Number counts the call's wire attempts from 1: 2 is the automatic
	// resend or the first configured retry.
	Number int
	// Facts are the request facts the attempt was decided on.
	Facts fsm.Request
	// Reused reports whether the attempt ran on a pooled connection.
	Reused bool
	// Status is the status of the final response the attempt received,
	// delivered or not (a 503 that is retried), or 0 when none arrived.
	Status int
	// Decision is the machine's last decision: its action and rule, and
	// what happened to the connection.
	Decision fsm.Decision
	// Call is how the call went on after this attempt (fsm.Call): it
	// delivered, failed, resent at once, or retried after Call.Delay, and
	// the rule that said so.
	Call fsm.CallDecision
	// Events are the events fed to the machine, in order.
	Events []fsm.Event
	// Err is the error that ended the attempt, or nil.
	Err error
	// Trace is the attempt in the spec trace format; `replaysafe explain`
	// replays it to Decision.
	Trace string
	// Hedge reports a hedge (Retry.Hedge): a copy sent while another
	// copy of the call was in flight. A copy that lost to another's
	// response, or failed beside another, has Call continue by
	// hedge-copy-failed.
	Hedge bool
}

func (o *Observer) request(req *http.Request) {
	if o.OnRequest != nil {
		o.OnRequest(req)
	}
}

func (o *Observer) response(req *http.Request, resp *http.Response) {
	if o.OnResponse != nil {
		o.OnResponse(req, resp)
	}
}

func (o *Observer) fail(req *http.Request, err error) {
	if o.OnError != nil {
		o.OnError(req, err)
	}
}
