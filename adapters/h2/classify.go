package h2

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"errors"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/netclass"
	"github.com/replaysafe/replaysafe/fsm"
)

// source says which row of the classification table decided, so that
// Attempt.Failure can tell a stream's own error from a connection's.
type source uint8

const (
	fromNothing    source = iota // err was nil
	fromContext                  // the caller's context, or a deadline
	fromStream                   // an HTTP/2 stream error
	fromGoAway                   // a GoAwayError
	fromConnection               // anything that ended the connection
	fromAcquire                  // no connection at all
)

// Classify maps an error returned by x/net/http2's ClientConn.RoundTrip,
// or by a read of a response body it returned, to the fsm failure event.
// It inspects the error's types and identities only (errors.As,
// errors.Is), never its text. ourStream is the request's stream ID, or 0
// when unknown; it fills Event.Stream of an EventH2GoAway. The returned
// event has no At (the caller stamps it), and an EventTimeout has no Phase
// (the caller knows which phase ran out).
//
// In order, the first row that matches decides:
//
//	nil                              zero Event (EventInvalid): nothing failed
//	context.Canceled                 EventCanceled
//	context.DeadlineExceeded         EventTimeout
//	http2.StreamError REFUSED_STREAM EventRefusedStream (RFC 9113 §8.7)
//	http2.StreamError, other codes   EventReset
//	http2.GoAwayError                EventH2GoAway{Boundary: LastStreamID, Stream: ourStream}
//	http2.ConnectionError            EventReset (a connection-level protocol error)
//	http2.ErrNoCachedConn            EventAcquireFailed (pools only; ClientConn never returns it)
//	what netclass.Classify places    its event: TLS failures, timeouts,
//	                                 resets (EPIPE included), closes, as on
//	                                 every protocol
//	anything else                    EventClosed (ambiguous: no evidence)
//
// The last row matters: x/net reports several decisive situations with
// unexported errors.New values that no caller can match without reading
// their text — among them the error for a stream above a GOAWAY's last
// stream ID ("Transport received Server's graceful shutdown GOAWAY"), a
// connection that could not take the request ("client conn not usable",
// "client conn could not be established"), and a GOAWAY with an error code
// on stream 1. Classify calls them all EventClosed, which is never wrong:
// without evidence the failure is ambiguous. The evidence those errors
// stand for is on the wire, and Attempt.Failure recovers it from there.
func Classify(err error, ourStream uint32) fsm.Event {
	ev, _ := classify(err, ourStream)
	return ev
}

func classify(err error, ourStream uint32) (fsm.Event, source) {
	if err == nil {
		return fsm.Event{}, fromNothing
	}
	switch {
	case errors.Is(err, context.Canceled):
		return fsm.Event{Kind: fsm.EventCanceled}, fromContext
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout}, fromContext
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		if se.Code == http2.ErrCodeRefusedStream {
			return fsm.Event{Kind: fsm.EventRefusedStream}, fromStream
		}
		return fsm.Event{Kind: fsm.EventReset}, fromStream
	}
	var ge http2.GoAwayError
	if errors.As(err, &ge) {
		return fsm.Event{Kind: fsm.EventH2GoAway, Boundary: uint64(ge.LastStreamID), Stream: uint64(ourStream)}, fromGoAway
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return fsm.Event{Kind: fsm.EventReset}, fromConnection
	}
	if errors.Is(err, http2.ErrNoCachedConn) {
		return fsm.Event{Kind: fsm.EventAcquireFailed}, fromAcquire
	}
	// What every stack meets on a connection means the same here as on
	// HTTP/1.1 and HTTP/3.
	if k, ok := netclass.Classify(err); ok {
		return fsm.Event{Kind: k}, fromConnection
	}
	// Unknown: no evidence either way, so the failure is ambiguous.
	return fsm.Event{Kind: fsm.EventClosed}, fromConnection
}

// StreamOf returns the stream ID an http2.StreamError names, the one
// error x/net returns that carries our stream ID.
func StreamOf(err error) (uint32, bool) {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.StreamID, true
	}
	return 0, false
}
