// Package netclass maps the errors every HTTP stack meets on a
// connection (the caller's context, TLS, timeouts, resets and closes,
// malformed text) to the fsm failure event they are evidence of. The
// HTTP/1.1, HTTP/2 and HTTP/3 adapters place their protocol's own errors
// first and fall back to it, so the same error means the same event on
// every protocol.
package netclass

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/textproto"
	"os"
	"syscall"

	"github.com/replaysafe/replaysafe/fsm"
)

// Classify maps an error met on a connection to the failure event
// it is evidence of, by its type and identity only (errors.Is, errors.As),
// never by its text. It reports false for an error it cannot place.
//
// The order matters where one error matches several cases: a TLS alert or
// a non-TLS record is a TLS failure even though the connection also ended;
// a timeout is a timeout whatever else it wraps; a reset beats an EOF.
//
//   - context.Canceled: EventCanceled
//   - context.DeadlineExceeded, os.ErrDeadlineExceeded, or a net.Error
//     whose Timeout is true: EventTimeout (the caller supplies the phase)
//   - tls.AlertError, tls.RecordHeaderError, *tls.CertificateVerificationError,
//     or a *net.OpError with Op "remote error" or "local error" (how
//     crypto/tls reports an alert it received or sent): EventTLSFailure
//   - syscall.ECONNRESET, ECONNABORTED, EPIPE: EventReset (a write into a
//     connection the peer has torn down: the same on every protocol)
//   - io.EOF, io.ErrUnexpectedEOF (also a TLS stream cut without
//     close_notify), net.ErrClosed: EventClosed
//   - textproto.ProtocolError: EventMalformed
//
// What it cannot place is the adapter's to judge: net/http reports most
// unparsable responses with untyped errors (the HTTP/1.1 recorder treats
// one after a response byte as EventMalformed); x/net and quic-go report
// some evidence only on the wire.
func Classify(err error) (fsm.EventKind, bool) {
	if err == nil {
		return fsm.EventInvalid, false
	}
	var (
		alert  tls.AlertError
		record tls.RecordHeaderError
		verify *tls.CertificateVerificationError
		proto  textproto.ProtocolError
		nerr   net.Error
		op     *net.OpError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return fsm.EventCanceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.EventTimeout, true
	case errors.As(err, &alert), errors.As(err, &record), errors.As(err, &verify),
		errors.As(err, &op) && (op.Op == "remote error" || op.Op == "local error"):
		return fsm.EventTLSFailure, true
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return fsm.EventTimeout, true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return fsm.EventReset, true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return fsm.EventClosed, true
	case errors.As(err, &proto):
		return fsm.EventMalformed, true
	}
	return fsm.EventInvalid, false
}
