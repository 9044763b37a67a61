package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/textproto"
	"syscall"

	"github.com/replaysafe/replaysafe/fsm"
)

// Classify maps an error met by an HTTP/1.1 exchange to the failure event
// it is evidence of, by its type and identity only (errors.Is, errors.As),
// never by its text. It reports false for an error it cannot place.
//
// The order matters where one error matches several cases: a TLS alert or
// a non-TLS record is a TLS failure even though the connection also ended;
// a timeout is a timeout whatever else it wraps; a reset beats an EOF.
//
//   - context.Canceled: EventCanceled
//   - context.DeadlineExceeded, or a net.Error whose Timeout is true:
//     EventTimeout (the caller supplies the phase)
//   - tls.AlertError, tls.RecordHeaderError, *tls.CertificateVerificationError:
//     EventTLSFailure
//   - syscall.ECONNRESET, ECONNABORTED, EPIPE: EventReset
//   - io.EOF, io.ErrUnexpectedEOF (also a TLS stream cut without
//     close_notify), net.ErrClosed: EventClosed
//   - textproto.ProtocolError: EventMalformed
//
// net/http reports most unparsable responses with untyped errors; the
// Recorder treats an unplaceable error after a response byte as
// EventMalformed.
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
	)
	switch {
	case errors.Is(err, context.Canceled):
		return fsm.EventCanceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.EventTimeout, true
	case errors.As(err, &alert), errors.As(err, &record), errors.As(err, &verify):
		return fsm.EventTLSFailure, true
	case errors.As(err, &nerr) && nerr.Timeout():
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
