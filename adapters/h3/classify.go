package h3

import (
	"context"
	"errors"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/netclass"
	"github.com/replaysafe/replaysafe/fsm"
)

// source says which row of the classification table decided, so that
// Attempt.Failure can tell a stream's own error from a connection's.
type source uint8

const (
	fromNothing    source = iota // err was nil
	fromContext                  // the caller's context, or a deadline
	fromStream                   // an HTTP/3 stream error
	fromConnection               // anything that ended the connection
	fromAcquire                  // no connection at all
)

// Classify maps an error returned by quic-go/http3's ClientConn.RoundTrip,
// or by a read of a response body it returned, to the fsm failure event.
// It inspects the error's types and identities only (errors.As,
// errors.Is), never its text. The returned event has no At (the caller
// stamps it), and an EventTimeout has no Phase (the caller knows which
// phase ran out).
//
// In order, the first row that matches decides:
//
//	nil                                zero Event (EventInvalid): nothing failed
//	context.Canceled                   EventCanceled
//	context.DeadlineExceeded           EventTimeout
//	*quic.StreamError from the peer,
//	code H3_REQUEST_REJECTED           EventRequestRejected (RFC 9114 §4.1.1)
//	*quic.StreamError, any other       EventReset
//	*quic.HandshakeTimeoutError,
//	*quic.VersionNegotiationError      EventAcquireFailed (dialing only)
//	*quic.IdleTimeoutError             EventTimeout
//	*quic.TransportError, TLS code     EventTLSFailure
//	*quic.TransportError, other        EventReset (a QUIC protocol error)
//	*quic.StatelessResetError          EventReset
//	*quic.ApplicationError             EventClosed (the connection was closed)
//	what netclass.Classify places      its event, as on every protocol
//	anything else                      EventClosed (ambiguous: no evidence)
//
// An idle timeout is a timeout: the peer went silent while the request
// was out, which a slow server also looks like, so the request is not
// resent (spec/choices.md). A connection closed with an application
// error code proves nothing about our request, whatever the code.
func Classify(err error) fsm.Event {
	ev, _ := classify(err)
	return ev
}

func classify(err error) (fsm.Event, source) {
	if err == nil {
		return fsm.Event{}, fromNothing
	}
	ev := func(k fsm.EventKind) fsm.Event { return fsm.Event{Kind: k} }
	switch {
	case errors.Is(err, context.Canceled):
		return ev(fsm.EventCanceled), fromContext
	case errors.Is(err, context.DeadlineExceeded):
		return ev(fsm.EventTimeout), fromContext
	}
	if se, ok := errors.AsType[*quic.StreamError](err); ok {
		if se.Remote && http3.ErrCode(se.ErrorCode) == http3.ErrCodeRequestRejected {
			return ev(fsm.EventRequestRejected), fromStream
		}
		return ev(fsm.EventReset), fromStream
	}
	if _, ok := errors.AsType[*quic.HandshakeTimeoutError](err); ok {
		return ev(fsm.EventAcquireFailed), fromAcquire
	}
	if _, ok := errors.AsType[*quic.VersionNegotiationError](err); ok {
		return ev(fsm.EventAcquireFailed), fromAcquire
	}
	if _, ok := errors.AsType[*quic.IdleTimeoutError](err); ok {
		return ev(fsm.EventTimeout), fromConnection
	}
	if te, ok := errors.AsType[*quic.TransportError](err); ok {
		if te.ErrorCode.IsCryptoError() {
			return ev(fsm.EventTLSFailure), fromConnection
		}
		return ev(fsm.EventReset), fromConnection
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](err); ok {
		return ev(fsm.EventReset), fromConnection
	}
	if _, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return ev(fsm.EventClosed), fromConnection
	}
	// What every stack meets on a connection means the same here as on
	// HTTP/1.1 and HTTP/2.
	if k, ok := netclass.Classify(err); ok {
		return ev(k), fromConnection
	}
	// Everything unknown: the connection went away under the request.
	return ev(fsm.EventClosed), fromConnection
}
