package h1

import (
	"context"
	"errors"
	"net/http/httptrace"
	"net/textproto"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/adapters/netclass"
	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// Recorder feeds the observations of one HTTP/1.1 wire attempt into an
// fsm.Machine, in the order they happen, and keeps them as a trace. It is
// safe for concurrent use: net/http reports from its read and write loops
// and from the caller's goroutine at once.
//
// The calling contract:
//
//  1. NewRecorder when the attempt starts (before acquiring a connection).
//  2. Acquired, or AcquireFailed, once.
//  3. Attach the Recorder to the connection's Conn (it is the Sink) and
//     pass ClientTrace in the request's context; wrap a request body so its
//     first Read calls BodyRead. Optionally BoundHeaderSections, to fail
//     the attempt when a response header section dribbles in.
//  4. When the round trip returns: FinalHeaders with a response, Fail with
//     an error. While the response body is read: Complete at its EOF, Fail
//     on a read error, Abandon when it is closed early.
//  5. Act on each returned Decision; call Stop when the attempt is over.
//
// Progress events are fed at most once each, so a duplicate observation
// (GotFirstResponseByte after a read counted the same byte) never reaches
// the machine as an out-of-order event.
type Recorder struct {
	recorder.Core // the machine, the events, the deadline timer; Mu guards the rest too

	serialized bool  // WroteRequest(nil) seen; RequestWritten waits for a byte on the wire
	earlyByte  bool  // a response byte was read before Acquired
	bodyRead   bool  // EventBodyRead fed
	connErr    error // the first read or write error the Conn saw

	info   informational.Counter // the 1xx responses, against their bound
	header headerBound           // each header section, against its bound
}

// NewRecorder starts the machine for one attempt now. onDeadline, if not
// nil, is called (in the timer's goroutine, without the Recorder's lock)
// when a phase limit passes and the machine failed the attempt or
// discarded its connection because of it: the caller then aborts the
// exchange.
func NewRecorder(req fsm.Request, lim fsm.Limits, clock recorder.Clock, onDeadline func(fsm.Phase)) *Recorder {
	r := &Recorder{}
	r.Init(req, lim, clock, onDeadline)
	return r
}

// Acquired feeds EventConnAcquired for an HTTP/1.1 connection. A
// response byte the Conn read between Attach and Acquired is fed right
// after it.
func (r *Recorder) Acquired(reused bool) fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	d := r.FeedLocked(fsm.Event{Kind: fsm.EventConnAcquired, At: r.Now(), Reused: reused, Proto: fsm.ProtoH1})
	if r.earlyByte {
		r.responseByteLocked()
		d = r.DecisionLocked()
	}
	return d
}

// AcquireFailed feeds the failure to get a connection: a cancellation or a
// timeout when ctx (the caller's context) ended, else
// EventAcquireFailed.
func (r *Recorder) AcquireFailed(ctx context.Context) fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if e, ok := r.contextEventLocked(ctx); ok {
		return r.FeedLocked(e)
	}
	return r.StepLocked(fsm.EventAcquireFailed)
}

// Wrote implements Sink: a byte reached the wire.
func (r *Recorder) Wrote() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.HasLocked(fsm.FactWroteAny) {
		r.StepLocked(fsm.EventFirstByteWritten)
	}
	r.maybeWrittenLocked()
}

// WriteFailed implements Sink.
func (r *Recorder) WriteFailed(err error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.connErr == nil {
		r.connErr = err
	}
}

// Read implements Sink: a response byte arrived, or the read failed.
func (r *Recorder) Read(n int, err error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if n > 0 {
		r.responseByteLocked()
	}
	if err != nil && r.connErr == nil {
		r.connErr = err
	}
}

// BodyRead feeds EventBodyRead the first time the request body is read.
func (r *Recorder) BodyRead() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.bodyRead {
		r.bodyRead = true
		r.StepLocked(fsm.EventBodyRead)
	}
}

// ClientTrace returns the httptrace hooks that feed the Recorder. A
// request whose context carries no other trace can use its Conn's
// ClientTrace instead, made once per connection.
func (r *Recorder) ClientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		WroteRequest:         r.wroteRequest,
		GotFirstResponseByte: r.gotFirstResponseByte,
		Got1xxResponse:       r.got1xxResponse,
	}
}

func (r *Recorder) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		r.serializedRequest()
	}
}

func (r *Recorder) gotFirstResponseByte() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.responseByteLocked()
}

func (r *Recorder) got1xxResponse(code int, h textproto.MIMEHeader) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.responseByteLocked()
	r.headerEndLocked(false)
	if !r.HasLocked(fsm.FactHeaders) {
		r.StepLocked(fsm.EventInformational)
	}
	// The hook's error ends net/http's read of the response:
	// installing it switched off net/http's own bound on 1xx
	// header bytes, so the Counter is the bound.
	return r.info.Add(code, h)
}

// SetInformationalLimit bounds the informational (1xx) responses the
// attempt accepts; without it the attempt takes informational.Limit's
// defaults. Call it before the request is sent. A response over the
// bound fails the round trip with a *informational.LimitError, which Fail
// feeds as EventMalformed.
func (r *Recorder) SetInformationalLimit(l informational.Limit) { r.info.SetLimit(l) }

// InformationalError returns the *informational.LimitError the attempt
// met, or nil.
func (r *Recorder) InformationalError() error { return r.info.Err() }

// serializedRequest records that net/http serialised the whole request.
// It is in net/http's write buffer, not necessarily on the wire yet:
// EventRequestWritten is fed once a byte has also reached the wire.
func (r *Recorder) serializedRequest() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.serialized = true
	r.maybeWrittenLocked()
}

func (r *Recorder) maybeWrittenLocked() {
	if r.serialized && r.HasLocked(fsm.FactWroteAny) && !r.HasLocked(fsm.FactWroteAll) {
		r.StepLocked(fsm.EventRequestWritten)
	}
}

func (r *Recorder) responseByteLocked() {
	r.headerByteLocked()
	switch {
	case !r.HasLocked(fsm.FactAcquired):
		r.earlyByte = true
	case !r.HasLocked(fsm.FactResponseByte):
		r.StepLocked(fsm.EventFirstResponseByte)
	}
}

// FinalHeaders feeds EventFinalHeaders: the round trip returned a
// response.
func (r *Recorder) FinalHeaders() fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.headerEndLocked(true)
	r.responseByteLocked()
	if r.HasLocked(fsm.FactHeaders) {
		return r.DecisionLocked()
	}
	return r.StepLocked(fsm.EventFinalHeaders)
}

// Complete feeds EventResponseComplete: the response body reached EOF.
func (r *Recorder) Complete() fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.HasLocked(fsm.FactComplete) {
		return r.DecisionLocked()
	}
	return r.StepLocked(fsm.EventResponseComplete)
}

// Abandon feeds EventCanceled: the caller gave up on the exchange (closed
// the response body before its end).
func (r *Recorder) Abandon() fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return r.StepLocked(fsm.EventCanceled)
}

// Fail classifies err, the error the round trip or the response body
// returned, and feeds the failure it is evidence of. ctx is the caller's
// context; local is the error the caller's request body returned, if any.
//
// In order: the caller's context ended (EventCanceled, or EventTimeout in
// the current phase); the informational responses went over their bound
// (EventMalformed: the server's response is unacceptable, whatever
// net/http did with the connection since); err is the request body's own error
// (EventLocalFailure); netclass.Classify(err);
// Classify of the read or write error the Conn saw; EventMalformed when a
// response byte arrived (net/http's parse errors are untyped); else a local
// failure, fed as EventCanceled.
func (r *Recorder) Fail(err error, ctx context.Context, local error) fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if e, ok := r.contextEventLocked(ctx); ok {
		return r.FeedLocked(e)
	}
	if r.info.Err() != nil {
		return r.StepLocked(fsm.EventMalformed)
	}
	if local != nil && errors.Is(err, local) {
		return r.StepLocked(fsm.EventLocalFailure)
	}
	k, ok := netclass.Classify(err)
	if !ok {
		k, ok = netclass.Classify(r.connErr)
	}
	switch {
	case ok && k == fsm.EventTimeout:
		return r.FeedLocked(fsm.Event{Kind: k, At: r.Now(), Phase: r.TimeoutPhaseLocked()})
	case ok:
		return r.StepLocked(k)
	case r.HasLocked(fsm.FactResponseByte):
		return r.StepLocked(fsm.EventMalformed)
	}
	return r.StepLocked(fsm.EventCanceled)
}

// contextEventLocked returns the event for a caller's context that ended.
func (r *Recorder) contextEventLocked(ctx context.Context) (fsm.Event, bool) {
	if ctx == nil {
		return fsm.Event{}, false
	}
	switch err := ctx.Err(); {
	case err == nil:
		return fsm.Event{}, false
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout, At: r.Now(), Phase: r.TimeoutPhaseLocked()}, true
	}
	return fsm.Event{Kind: fsm.EventCanceled, At: r.Now()}, true
}
