package h2

import (
	"context"
	"errors"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/adapters/netclass"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// Classify maps an error returned by a transports/h2 ClientConn's
// RoundTrip, or by a read of a response body it returned, to the fsm
// failure event. It inspects the error's types and identities only
// (errors.As, errors.Is), never its text. The returned event has no At
// (the caller stamps it), and an EventTimeout has no Phase (the caller
// knows which phase ran out).
//
// In order, the first row that matches decides:
//
//	nil                                zero Event (EventInvalid): nothing failed
//	context.Canceled                   EventCanceled
//	context.DeadlineExceeded           EventTimeout
//	errors.Is(err, h2.ErrUnsent)       EventHandedBack: nothing of the request reached the socket
//	*h2.StreamError, Unprocessed       EventRefusedStream (REFUSED_STREAM, RFC 9113 §8.7)
//	*h2.StreamError from the server    EventReset
//	*h2.StreamError of ours            EventMalformed: we reset a response we could not accept
//	                                   (a malformed one, one over a bound)
//	*h2.GoAwayError on our stream      EventH2GoAway{Boundary: LastStreamID, Stream}
//	*h2.RequestBodyError,
//	*h2.RequestError                   EventLocalFailure: the caller's body, or a request
//	                                   HTTP/2 cannot carry
//	*h2.TimeoutError                   EventClosed: the liveness PING or the SETTINGS
//	                                   exchange found the connection dead
//	*h2.ConnectionError                EventReset (a protocol error of the server's)
//	what netclass.Classify places      its event (of a ReadError's or WriteError's cause, say)
//	anything else                      EventClosed (ambiguous: no evidence)
//
// A connection declared dead by its liveness PING is closed, not a
// timeout: any live server answers a PING at once, however slow its
// handler, so no answer means the peer or the path is gone
// (spec/choices.md), and the ambiguous-failure rules decide.
func Classify(err error) fsm.Event {
	if err == nil {
		return fsm.Event{}
	}
	ev := func(k fsm.EventKind) fsm.Event { return fsm.Event{Kind: k} }
	switch {
	case errors.Is(err, context.Canceled):
		return ev(fsm.EventCanceled)
	case errors.Is(err, context.DeadlineExceeded):
		return ev(fsm.EventTimeout)
	case errors.Is(err, h2.ErrUnsent):
		return ev(fsm.EventHandedBack)
	}
	if se, ok := errors.AsType[*h2.StreamError](err); ok {
		switch {
		case se.Unprocessed():
			return ev(fsm.EventRefusedStream)
		case se.Remote:
			return ev(fsm.EventReset)
		}
		return ev(fsm.EventMalformed)
	}
	if ge, ok := errors.AsType[*h2.GoAwayError](err); ok && ge.StreamID != 0 {
		return fsm.Event{Kind: fsm.EventH2GoAway, Boundary: uint64(ge.LastStreamID), Stream: uint64(ge.StreamID)}
	}
	if _, ok := errors.AsType[*h2.RequestBodyError](err); ok {
		return ev(fsm.EventLocalFailure)
	}
	if _, ok := errors.AsType[*h2.RequestError](err); ok {
		return ev(fsm.EventLocalFailure)
	}
	if _, ok := errors.AsType[*h2.TimeoutError](err); ok {
		return ev(fsm.EventClosed)
	}
	if _, ok := errors.AsType[*h2.ConnectionError](err); ok {
		return ev(fsm.EventReset)
	}
	if errors.Is(err, informational.ErrLimit) {
		return ev(fsm.EventMalformed)
	}
	if k, ok := netclass.Classify(err); ok {
		return ev(k)
	}
	return ev(fsm.EventClosed)
}
