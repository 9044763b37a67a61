package h2

import (
	"context"
	"net/http/httptrace"
	"net/textproto"
	"sync"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
)

// Attempt follows one request on a connection a Wire observes: it learns
// the request's stream ID and whether any of it was written, turns x/net's
// httptrace callbacks into fsm progress events, and classifies the
// request's failure with what the wire showed. Its methods are safe for
// concurrent use.
//
// The calling contract, in order:
//
//  1. Create it with Wire.NewAttempt just before ClientConn.RoundTrip.
//  2. Install Trace(emit) on the request's context with
//     httptrace.WithClientTrace; emit receives EventFirstByteWritten,
//     EventRequestWritten, EventFirstResponseByte and EventInformational.
//  3. Feed EventFinalHeaders when RoundTrip returns a response, and
//     EventResponseComplete when its body reads io.EOF.
//  4. On an error from RoundTrip or from a body read, feed
//     Failure(ctx, err).
//  5. When the exchange is over, call Done so the Wire forgets the stream.
//
// Every request sent on an observed ClientConn needs its own Attempt with
// its Trace installed: stream IDs are learned by claiming, in order, the
// HEADERS frames x/net writes, and a request that claims nothing would
// leave its frame for the next one.
type Attempt struct {
	w     *Wire
	emit  Emitter               // set by Trace, before x/net can call a hook
	trace httptrace.ClientTrace // what Trace returns

	mu           sync.Mutex
	claim        Claim
	responseByte bool // x/net reported the first response byte
	done         bool // Done was called

	info informational.Counter // the 1xx responses, against their bound
}

// NewAttempt starts following one request.
func (w *Wire) NewAttempt() *Attempt { return &Attempt{w: w} }

// Init starts a, a zero Attempt held inside a larger value, following
// one request on w, as NewAttempt does.
func (a *Attempt) Init(w *Wire) { a.w = w }

// Emitter receives an Attempt's progress events (see Trace).
type Emitter interface {
	Emit(fsm.Event)
}

// EmitFunc is a func as an Emitter.
type EmitFunc func(fsm.Event)

// Emit calls f.
func (f EmitFunc) Emit(e fsm.Event) { f(e) }

// Trace returns hooks for httptrace.WithClientTrace. Each calls emit (when
// non-nil) with an event that has no At: emit stamps the instant and feeds
// the machine. The hooks run on x/net's goroutines — WroteHeaders while
// x/net holds its connection write lock — so emit must be safe for
// concurrent use, must not block, and must not call into the ClientConn.
// Call it once per Attempt: the hooks are the Attempt's own.
//
// Events may arrive in an order the wire did not follow: x/net reports the
// first response byte from its read loop and the written headers from its
// write goroutine, and a fast server's answer can be reported first. The
// machine accepts both orders.
func (a *Attempt) Trace(emit Emitter) *httptrace.ClientTrace {
	a.emit = emit
	a.trace = httptrace.ClientTrace{
		WroteHeaders:         a.wroteHeaders,
		WroteRequest:         a.wroteRequest,
		GotFirstResponseByte: a.gotFirstResponseByte,
		Got1xxResponse:       a.got1xxResponse,
	}
	return &a.trace
}

func (a *Attempt) wroteHeaders() {
	c := a.w.claim()
	a.mu.Lock()
	a.claim = c
	done := a.done
	a.mu.Unlock()
	if done && c.Stream != 0 {
		// A fast server's whole response was read, and the exchange
		// ended, before x/net's write goroutine got here: Done found no
		// stream to forget, so its claim does.
		a.w.Forget(c.Stream)
	}
	if c.Wrote {
		a.send(fsm.EventFirstByteWritten)
	}
}

func (a *Attempt) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil && a.Claim().Wrote {
		a.send(fsm.EventRequestWritten)
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
	// x/net counts 1xx header bytes only when no hook is installed; the
	// hook's error resets the stream (PROTOCOL_ERROR) and fails the
	// request.
	return a.info.Add(code, h)
}

// send passes an event of kind k to the Emitter Trace was given.
func (a *Attempt) send(k fsm.EventKind) {
	if a.emit != nil {
		a.emit.Emit(fsm.Event{Kind: k})
	}
}

// SetInformationalLimit bounds the informational (1xx) responses the
// request accepts; without it the defaults of informational.Limit apply.
// Call it before Trace. A response over the bound fails the request: x/net
// resets the stream with PROTOCOL_ERROR and returns a StreamError whose
// Cause is the *informational.LimitError, and Failure says
// EventMalformed.
func (a *Attempt) SetInformationalLimit(l informational.Limit) { a.info.SetLimit(l) }

// InformationalError returns the *informational.LimitError the request
// met, or nil. x/net's StreamError does not unwrap to its Cause: a
// transport wraps this error into the one it reports.
func (a *Attempt) InformationalError() error { return a.info.Err() }

// Claim returns what the attempt knows of its stream: its ID, and whether
// any of the request reached the socket. It is the zero Claim until x/net
// reports the headers written, and stays zero when x/net never writes them.
func (a *Attempt) Claim() Claim {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.claim
}

// Failure returns the failure event for err, an error from RoundTrip or
// from reading the response body; ctx is the request's context. It starts
// from Classify and corrects it with what the wire showed, in this order:
//
//  1. The context is done: EventCanceled or EventTimeout, whatever err
//     says. (x/net may return another error while its write goroutine
//     still runs, so nothing else can be trusted then.)
//  2. err is itself a cancellation or a timeout: that.
//  3. The informational responses went over their bound (the hook failed
//     the request): EventMalformed.
//  4. Nothing of the request reached the socket and no response byte
//     arrived: EventHandedBack. This covers x/net's unexported "client
//     conn not usable" and "could not be established" errors, and a
//     request whose stream was aborted before its HEADERS were written.
//  5. Bytes of a response arrived on our stream but x/net never reported a
//     response (a header block cut short): EventMalformed.
//  6. The server reset our stream with REFUSED_STREAM: EventRefusedStream.
//  7. err is a stream error: Classify's event (EventReset).
//  8. The server sent a GOAWAY and we know our stream: EventH2GoAway with
//     the GOAWAY's last stream ID. This recovers the boundary x/net hides
//     behind its unexported "graceful shutdown GOAWAY" error.
//  9. Otherwise: Classify's event.
func (a *Attempt) Failure(ctx context.Context, err error) fsm.Event {
	if err == nil {
		return fsm.Event{}
	}
	if ctx != nil && ctx.Err() != nil {
		ev, _ := classify(ctx.Err(), 0)
		return ev
	}
	a.mu.Lock()
	c, responseByte := a.claim, a.responseByte
	a.mu.Unlock()
	ev, src := classify(err, c.Stream)
	if src == fromContext || src == fromAcquire {
		return ev
	}
	if a.info.Err() != nil {
		return fsm.Event{Kind: fsm.EventMalformed}
	}
	facts, known := a.w.Stream(c.Stream)
	started := known && facts.ResponseStarted
	switch {
	case !c.Wrote && !responseByte && !started:
		return fsm.Event{Kind: fsm.EventHandedBack}
	case started && !responseByte:
		return fsm.Event{Kind: fsm.EventMalformed}
	case known && facts.ResetByPeer && facts.ResetCode == http2.ErrCodeRefusedStream:
		return fsm.Event{Kind: fsm.EventRefusedStream}
	case src == fromStream:
		return ev
	}
	if g, ok := a.w.GoAway(); ok && c.Stream != 0 {
		return fsm.Event{Kind: fsm.EventH2GoAway, Boundary: uint64(g.LastStreamID), Stream: uint64(c.Stream)}
	}
	return ev
}

// Done tells the Wire the exchange is over and its stream can be
// forgotten, now or, when x/net has not reported the headers written yet,
// as soon as it does.
func (a *Attempt) Done() {
	a.mu.Lock()
	a.done = true
	c := a.claim
	a.mu.Unlock()
	if c.Stream != 0 {
		a.w.Forget(c.Stream)
	}
}
