package h2

import (
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"sync/atomic"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// Emitter receives an Attempt's progress events.
type Emitter interface {
	Emit(fsm.Event)
}

// EmitFunc is a func as an Emitter.
type EmitFunc func(fsm.Event)

// Emit calls f.
func (f EmitFunc) Emit(e fsm.Event) { f(e) }

// Attempt follows one request on a transports/h2 ClientConn: passed to
// RoundTrip as its h2.StreamEvents, it turns what the connection reports
// into fsm progress events for its Emitter, bounds the request's
// informational (1xx) responses, and classifies the request's failure
// (Failure). Its methods are safe for concurrent use.
//
// The calling contract, in order:
//
//  1. Init it with the Emitter that feeds the attempt's machine, and set
//     the 1xx bound (SetInformationalLimit) if not the default.
//  2. Pass it to ClientConn.RoundTrip. The connection calls it from its
//     own goroutines with its lock held: the Emitter must not block or
//     call into the connection. It emits EventFirstByteWritten,
//     EventRequestWritten, EventFirstResponseByte and EventInformational,
//     each once (a 1xx each time), in the order they happened.
//  3. Feed EventFinalHeaders when RoundTrip returns a response, and
//     EventResponseComplete when its body reads io.EOF.
//  4. On an error from RoundTrip or from a body read, feed
//     Failure(ctx, err).
type Attempt struct {
	emit Emitter
	lim  informational.Limit
	// info counts the 1xx responses against lim; it is made by the
	// first, since almost no response has one (an Attempt is held per
	// request in flight).
	info atomic.Pointer[informational.Counter]
	// wrote is our stream's ID with wroteBit set, once HeadersWritten
	// reported that a byte of our HEADERS reached the socket; zero
	// before.
	wrote atomic.Uint64
}

// wroteBit marks Attempt.wrote as set; the stream ID is in the low 32
// bits.
const wroteBit = 1 << 32

// Init starts a, a zero Attempt held inside a larger value, feeding emit.
func (a *Attempt) Init(emit Emitter) { a.emit = emit }

// SetInformationalLimit bounds the informational (1xx) responses the
// request accepts; without it the defaults of informational.Limit apply.
// Call it before RoundTrip. A response over the bound resets the stream
// and fails the request with a *h2.StreamError whose cause is the
// *informational.LimitError; Failure says EventMalformed.
func (a *Attempt) SetInformationalLimit(l informational.Limit) { a.lim = l }

// InformationalError returns the *informational.LimitError the request
// met, or nil.
func (a *Attempt) InformationalError() error {
	if c := a.info.Load(); c != nil {
		return c.Err()
	}
	return nil
}

// Stream returns our stream's ID, and whether any of the request reached
// the socket: zero and false until the connection reports HeadersWritten.
func (a *Attempt) Stream() (uint32, bool) {
	w := a.wrote.Load()
	return uint32(w), w&wroteBit != 0
}

// HeadersWritten implements h2.StreamEvents: a byte of our HEADERS frame
// reached the socket.
func (a *Attempt) HeadersWritten(stream uint32) {
	a.wrote.Store(uint64(stream) | wroteBit)
	a.send(fsm.EventFirstByteWritten)
}

// BodyWritten implements h2.StreamEvents; the machine needs no count.
func (a *Attempt) BodyWritten(int64) {}

// RequestWritten implements h2.StreamEvents: the frame that ended the
// request was written.
func (a *Attempt) RequestWritten() { a.send(fsm.EventRequestWritten) }

// ResponseStarted implements h2.StreamEvents: a response frame arrived.
func (a *Attempt) ResponseStarted() { a.send(fsm.EventFirstResponseByte) }

// Informational implements h2.StreamEvents: an interim response, counted
// against the bound; past it the error resets the stream.
func (a *Attempt) Informational(status int, header http.Header, _ int) error {
	a.send(fsm.EventInformational)
	c := a.info.Load()
	if c == nil {
		c = new(informational.Counter)
		c.SetLimit(a.lim)
		if !a.info.CompareAndSwap(nil, c) {
			c = a.info.Load()
		}
	}
	return c.Add(status, textproto.MIMEHeader(header))
}

// ResponseHeaders implements h2.StreamEvents; the caller feeds the final
// headers when RoundTrip returns them.
func (a *Attempt) ResponseHeaders(int) {}

func (a *Attempt) send(k fsm.EventKind) {
	if a.emit != nil {
		a.emit.Emit(fsm.Event{Kind: k})
	}
}

// Failure returns the failure event for err, an error from RoundTrip or
// from reading the response body; ctx is the request's context. In
// order: the context ended (EventCanceled or EventTimeout, whatever err
// says, since the connection aborts the stream for it); the 1xx bound was
// crossed (EventMalformed); else Classify.
func (a *Attempt) Failure(ctx context.Context, err error) fsm.Event {
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout}
	case cerr != nil:
		return fsm.Event{Kind: fsm.EventCanceled}
	case a.InformationalError() != nil:
		return fsm.Event{Kind: fsm.EventMalformed}
	}
	return Classify(err)
}

var _ h2.StreamEvents = (*Attempt)(nil)
