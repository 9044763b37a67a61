package h3

import (
	"context"
	"net/http/httptrace"
	"net/textproto"
	"sync"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
)

// Attempt follows one request on a watched connection: it learns the
// request's stream ID and whether any of it was handed to QUIC, turns
// quic-go's httptrace callbacks into fsm progress events, and classifies
// the request's failure with what the Watch saw. Its methods are safe for
// concurrent use.
//
// The calling contract, in order:
//
//  1. Create it with Watch.NewAttempt just before ClientConn.RoundTrip.
//  2. Install Trace(emit, uploaded) on the request's context with
//     httptrace.WithClientTrace; emit receives EventFirstByteWritten,
//     EventRequestWritten, EventFirstResponseByte and EventInformational,
//     and uploaded (when non-nil) the end of the upload. A request for
//     which OwnStream holds may instead carry StreamTrace(emit, uploaded)
//     and be sent with the Attempt's own RoundTrip, which reports the
//     same events.
//  3. Feed EventFinalHeaders when RoundTrip returns a response, and
//     EventResponseComplete when its body reads io.EOF.
//  4. On an error from RoundTrip or from a body read, feed
//     Failure(ctx, err).
//  5. When the exchange is over, call Done so the Watch forgets the
//     stream.
type Attempt struct {
	w        *Watch
	emit     Emitter  // set by Trace, before quic-go can call a hook
	uploaded Uploader // set by Trace
	trace    httptrace.ClientTrace

	mu           sync.Mutex
	wrote        bool   // header fields were encoded (or RoundTrip sends them): bytes went to QUIC
	stream       uint64 // our stream ID, once the HEADERS frame was seen or RoundTrip opened it
	haveStream   bool
	responseByte bool        // quic-go reported the first response byte
	uploadErr    error       // the error that ended the upload, if any
	uploadDone   bool        // quic-go finished with the request body
	stop         func() bool // RoundTrip's cancellation of its stream, until Done

	info informational.Counter // the 1xx responses, against their bound
}

// NewAttempt starts following one request.
func (w *Watch) NewAttempt() *Attempt { return &Attempt{w: w} }

// Init starts a, a zero Attempt held inside a larger value, following
// one request on w, as NewAttempt does.
func (a *Attempt) Init(w *Watch) { a.w = w }

// Emitter receives an Attempt's progress events (see Trace).
type Emitter interface {
	Emit(fsm.Event)
}

// Uploader is told when quic-go is done with a request body (see Trace).
type Uploader interface {
	Uploaded(err error)
}

// EmitFunc is a func as an Emitter.
type EmitFunc func(fsm.Event)

// Emit calls f.
func (f EmitFunc) Emit(e fsm.Event) { f(e) }

// Trace returns hooks for httptrace.WithClientTrace. Each calls emit (when
// non-nil) with an event that has no At: emit stamps the instant and feeds
// the machine. uploaded, when non-nil, is called once quic-go is done with
// the request body, with the error that ended the upload or nil; an HTTP/3
// upload may end after the response (RFC 9114 §4.1). The hooks run on
// quic-go's goroutines, WroteHeaderField while quic-go holds its
// request-writer lock, so emit and uploaded must be safe for concurrent
// use, must not block, and must not call into the ClientConn. Call it
// once per Attempt: the hooks are the Attempt's own.
func (a *Attempt) Trace(emit Emitter, uploaded Uploader) *httptrace.ClientTrace {
	a.emit, a.uploaded = emit, uploaded
	a.trace = httptrace.ClientTrace{
		WroteHeaderField:     a.wroteHeaderField,
		WroteRequest:         a.wroteRequest,
		GotFirstResponseByte: a.gotFirstResponseByte,
		Got1xxResponse:       a.got1xxResponse,
	}
	return &a.trace
}

func (a *Attempt) send(k fsm.EventKind) {
	if a.emit != nil {
		a.emit.Emit(fsm.Event{Kind: k})
	}
}

func (a *Attempt) wroteHeaderField(string, []string) {
	if a.markWrote() {
		a.w.expect(a)
		a.send(fsm.EventFirstByteWritten)
	}
}

// markWrote records that bytes of the request go to QUIC, and reports
// whether that is news.
func (a *Attempt) markWrote() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	first := !a.wrote
	a.wrote = true
	return first
}

func (a *Attempt) wroteRequest(info httptrace.WroteRequestInfo) {
	a.mu.Lock()
	a.uploadDone, a.uploadErr = true, info.Err
	wrote := a.wrote
	a.mu.Unlock()
	if info.Err == nil && wrote {
		a.send(fsm.EventRequestWritten)
	}
	if a.uploaded != nil {
		a.uploaded.Uploaded(info.Err)
	}
}

func (a *Attempt) gotFirstResponseByte() {
	a.mu.Lock()
	a.responseByte = true
	a.mu.Unlock()
	a.send(fsm.EventFirstResponseByte)
}

func (a *Attempt) got1xxResponse(code int, h textproto.MIMEHeader) error {
	a.send(fsm.EventInformational)
	// quic-go ignores this hook's error; it fails the request itself
	// after maxInformational responses. The count is kept so that
	// Failure knows why.
	a.info.Add(code, h)
	return nil
}

// maxInformational is the number of informational responses quic-go's
// http3 ClientConn accepts per request (its max1xxResponses); the next one
// fails the request with an untyped error and resets the stream with
// H3_EXCESSIVE_LOAD. Each response's header section is bounded by
// http3.Transport.MaxResponseHeaderBytes.
const maxInformational = 5

// SetInformationalLimit bounds the informational (1xx) responses the
// request accepts; without it the defaults of informational.Limit apply.
// quic-go ignores the hook's verdict, so the bound is quic-go's own
// (maxInformational responses, each within MaxResponseHeaderBytes)
// whenever that is lower; the Counter only tells Failure and
// InformationalError what happened.
func (a *Attempt) SetInformationalLimit(l informational.Limit) { a.info.SetLimit(l) }

// InformationalError returns a *informational.LimitError when the request
// failed for its informational responses: over the Limit, or past
// quic-go's own cap. Otherwise nil.
func (a *Attempt) InformationalError() error {
	if err := a.info.Err(); err != nil {
		return err
	}
	if n := a.info.Count(); n >= maxInformational {
		return &informational.LimitError{Count: n + 1, Limit: informational.Limit{Count: maxInformational}}
	}
	return nil
}

func (a *Attempt) setStream(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stream, a.haveStream = id, true
}

// Stream returns the request's QUIC stream ID, once its HEADERS frame was
// created or, for a request sent by RoundTrip, once its stream was
// opened.
func (a *Attempt) Stream() (id uint64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stream, a.haveStream
}

// Wrote reports whether any of the request was handed to QUIC.
func (a *Attempt) Wrote() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote
}

// Upload reports whether quic-go finished with the request body, and the
// error that ended it (nil when the whole body was written).
func (a *Attempt) Upload() (done bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.uploadDone, a.uploadErr
}

// Failure returns the failure event for err, an error from RoundTrip or
// from reading the response body; ctx is the request's context. It starts
// from Classify and corrects it with what the Watch saw, in this order:
//
//  1. The context is done: EventCanceled or EventTimeout, whatever err
//     says.
//  2. err is itself a cancellation or a timeout: that.
//  3. The informational responses went over their bound, quic-go's or
//     the Limit (see InformationalError): EventMalformed.
//  4. No header field of the request was encoded and no response byte
//     arrived: EventHandedBack. ClientConn opens no stream after a GOAWAY
//     ("connection in graceful shutdown"), and a stream it could not open
//     carried nothing.
//  5. The server reset our stream with H3_REQUEST_REJECTED:
//     EventRequestRejected (Classify's row).
//  6. err is another stream error: EventReset.
//  7. The server sent a GOAWAY: EventH3GoAway with its stream ID as the
//     boundary and our stream, when we know it. A stream at or above the
//     boundary was not processed (RFC 9114 §5.2).
//  8. Otherwise: Classify's event.
func (a *Attempt) Failure(ctx context.Context, err error) fsm.Event {
	if err == nil {
		return fsm.Event{}
	}
	if ctx != nil && ctx.Err() != nil {
		ev, _ := classify(ctx.Err())
		return ev
	}
	ev, src := classify(err)
	if src == fromContext || src == fromAcquire || ev.Kind == fsm.EventTimeout {
		return ev
	}
	if a.InformationalError() != nil {
		return fsm.Event{Kind: fsm.EventMalformed}
	}
	a.mu.Lock()
	wrote, responseByte, stream, haveStream := a.wrote, a.responseByte, a.stream, a.haveStream
	a.mu.Unlock()
	switch {
	case !wrote && !responseByte:
		return fsm.Event{Kind: fsm.EventHandedBack}
	case src == fromStream:
		return ev
	}
	if g, ok := a.w.GoAway(); ok {
		e := fsm.Event{Kind: fsm.EventH3GoAway, Stream: stream}
		if haveStream {
			e.Boundary, e.BoundaryKnown = g, true
		}
		return e
	}
	return ev
}

// Done tells the Watch the exchange is over and its stream can be
// forgotten, and stops RoundTrip's cancellation of the stream.
func (a *Attempt) Done() {
	a.mu.Lock()
	stop := a.stop
	a.stop = nil
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	a.w.forget(a)
}

// own makes the stream RoundTrip opened the Attempt's.
func (a *Attempt) own(str *http3.RequestStream) { a.w.own(a, str.StreamID()) }
