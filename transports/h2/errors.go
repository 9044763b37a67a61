package h2

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

// ErrUnsent is matched (errors.Is) by every error meaning that nothing
// of the request reached the socket: no byte of its HEADERS frame was
// accepted by a write on the connection. Such a request may be sent
// again, whatever its method, if its body can be reproduced or was
// never read. The error itself is an *UnsentError that wraps the cause.
var ErrUnsent = errors.New("h2: nothing of the request was written")

// Causes of an *UnsentError.
var (
	// ErrNotReserved: RoundTrip was called without an outstanding
	// reservation (see ClientConn.Reserve).
	ErrNotReserved = errors.New("h2: RoundTrip without a reservation")
	// ErrClosed: the connection was closed by ClientConn.Close (or
	// Shutdown's deadline).
	ErrClosed = errors.New("h2: connection closed")
	// ErrShutdown: the connection is shutting down (ClientConn.Shutdown
	// sent GOAWAY) and takes no new stream.
	ErrShutdown = errors.New("h2: connection shutting down")
	// ErrExtendedConnectUnsupported: an extended CONNECT (RFC 8441) was
	// asked of a server whose SETTINGS did not enable it.
	ErrExtendedConnectUnsupported = errors.New("h2: server does not support extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL)")
)

// Causes of stream errors detected locally.
var (
	// ErrHeaderListTooLarge: a response header section (with the
	// interim responses before it) exceeded Config.MaxHeaderListSize.
	ErrHeaderListTooLarge = errors.New("h2: response header list too large")
	// ErrTooManyInformational: more interim responses than
	// Config.MaxInformational.
	ErrTooManyInformational = errors.New("h2: too many interim (1xx) responses")
	// ErrBodyLength: the request body's length differed from its
	// declared ContentLength.
	ErrBodyLength = errors.New("h2: request body length differs from ContentLength")
	// ErrBodyClosed: Read on a response body after Close.
	ErrBodyClosed = errors.New("h2: read on closed response body")
)

// UnsentError reports that nothing of the request reached the socket
// (errors.Is(err, ErrUnsent)). Cause says why: ErrNotReserved, ErrClosed,
// ErrShutdown, ErrExtendedConnectUnsupported, a *GoAwayError, the
// context's error, or the connection's own ending error (*ReadError,
// *WriteError, *ConnectionError, *TimeoutError).
type UnsentError struct {
	// Cause is why the request was not written.
	Cause error
}

func (e *UnsentError) Error() string {
	return "h2: request not sent: " + errString(e.Cause)
}

// Unwrap returns the cause.
func (e *UnsentError) Unwrap() error { return e.Cause }

// Is reports whether target is ErrUnsent.
func (e *UnsentError) Is(target error) bool { return target == ErrUnsent }

// StreamError is a stream reset: by the server (Remote, its RST_STREAM
// code) or by us (Code is what we sent, Cause why). A Remote
// REFUSED_STREAM proves the server did not process the request (RFC
// 9113 §8.7): see Unprocessed.
type StreamError struct {
	// StreamID is the stream's identifier.
	StreamID uint32
	// Code is the RST_STREAM error code.
	Code http2.ErrCode
	// Remote reports that the server reset the stream.
	Remote bool
	// Cause, for a local reset, is what we detected (a malformed
	// response, a bound, an error returned by StreamEvents); nil for a
	// remote reset.
	Cause error
}

func (e *StreamError) Error() string {
	s := "h2: stream " + strconv.FormatUint(uint64(e.StreamID), 10) + " reset with " + e.Code.String()
	if e.Remote {
		s += " by the server"
	} else {
		s += " by the client"
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause of a local reset.
func (e *StreamError) Unwrap() error { return e.Cause }

// Unprocessed reports that the server refused the stream with
// REFUSED_STREAM, which promises that it did no application processing
// (RFC 9113 §8.7): the request may be sent again on another connection.
func (e *StreamError) Unprocessed() bool {
	return e.Remote && e.Code == http2.ErrCodeRefusedStream
}

// GoAwayError reports a stream ended by the server's GOAWAY: either the
// stream is above LastStreamID (the server promised not to process it,
// RFC 9113 §6.8: Unprocessed), or it is at or below and the connection
// closed before the stream completed (the boundary proves nothing).
// StreamID is zero when no stream was opened (the error is then the
// cause of an *UnsentError).
type GoAwayError struct {
	// LastStreamID is the GOAWAY's last stream identifier.
	LastStreamID uint32
	// Code is the GOAWAY's error code.
	Code http2.ErrCode
	// Debug is the GOAWAY's debug data, at most MaxGoAwayDebug bytes.
	Debug string
	// StreamID is our stream, or 0.
	StreamID uint32
}

func (e *GoAwayError) Error() string {
	s := "h2: server sent GOAWAY (last stream " + strconv.FormatUint(uint64(e.LastStreamID), 10) + ", " + e.Code.String()
	if e.Debug != "" {
		s += ", " + strconv.Quote(e.Debug)
	}
	s += ")"
	switch {
	case e.StreamID == 0:
	case e.Unprocessed():
		s += ": stream " + strconv.FormatUint(uint64(e.StreamID), 10) + " was not processed"
	default:
		s += " and closed the connection with stream " + strconv.FormatUint(uint64(e.StreamID), 10) + " unfinished"
	}
	return s
}

// Unprocessed reports that the stream is above the GOAWAY's last stream
// ID: the server did not process it.
func (e *GoAwayError) Unprocessed() bool { return e.StreamID != 0 && e.StreamID > e.LastStreamID }

// ConnectionError is a protocol error we detected on the connection
// (RFC 9113 §5.4.1): we sent GOAWAY with Code and closed the connection.
// (A protocol error the server detects reaches us as its GOAWAY, a
// *GoAwayError.)
type ConnectionError struct {
	// Code is the error code we sent in GOAWAY.
	Code http2.ErrCode
	// Reason says what the server did.
	Reason string
}

func (e *ConnectionError) Error() string {
	return "h2: connection error " + e.Code.String() + ": " + e.Reason
}

// ReadError reports that reading from the connection failed (the server
// closed it, or it was reset) with no GOAWAY to explain it.
type ReadError struct {
	// Err is the read error (io.EOF for an orderly close).
	Err error
}

func (e *ReadError) Error() string { return "h2: reading from the connection: " + errString(e.Err) }

// Unwrap returns the read error.
func (e *ReadError) Unwrap() error { return e.Err }

// WriteError reports that a write on the connection failed. For a
// stream, HeadersWritten says whether a byte of its HEADERS frame had
// been accepted by an earlier or the failing write; when it had not, the
// stream's error is an *UnsentError wrapping the *WriteError.
type WriteError struct {
	// Err is the write error.
	Err error
	// StreamID is the stream the error is reported to, or 0 for the
	// connection.
	StreamID uint32
	// HeadersWritten reports that the stream's HEADERS had (at least
	// partly) reached the socket.
	HeadersWritten bool
}

func (e *WriteError) Error() string {
	s := "h2: writing to the connection: " + errString(e.Err)
	if e.StreamID != 0 {
		if e.HeadersWritten {
			s += " (stream " + strconv.FormatUint(uint64(e.StreamID), 10) + " had been written)"
		} else {
			s += " (stream " + strconv.FormatUint(uint64(e.StreamID), 10) + " was not written)"
		}
	}
	return s
}

// Unwrap returns the write error.
func (e *WriteError) Unwrap() error { return e.Err }

// TimeoutKind names the timer that ended a connection.
type TimeoutKind uint8

// Timeout kinds.
const (
	// TimeoutPing: a liveness PING got no answer (nothing was read) within
	// Config.PingTimeout.
	TimeoutPing TimeoutKind = iota + 1
	// TimeoutSettings: the server did not send its SETTINGS, or did not
	// acknowledge ours, within Config.SettingsTimeout.
	TimeoutSettings
)

func (k TimeoutKind) String() string {
	switch k {
	case TimeoutPing:
		return "ping"
	case TimeoutSettings:
		return "settings"
	}
	return "TimeoutKind(" + strconv.Itoa(int(k)) + ")"
}

// TimeoutError reports that the connection was declared dead by one of
// its timers.
type TimeoutError struct {
	// Kind names the timer.
	Kind TimeoutKind
	// After is the timer's duration.
	After time.Duration
}

func (e *TimeoutError) Error() string {
	switch e.Kind {
	case TimeoutPing:
		return "h2: connection dead: nothing read within " + e.After.String() + " of a liveness PING"
	case TimeoutSettings:
		return "h2: server SETTINGS not received and acknowledged within " + e.After.String()
	}
	return "h2: " + e.Kind.String() + " timeout after " + e.After.String()
}

// Timeout reports true (net.Error).
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports false (net.Error).
func (e *TimeoutError) Temporary() bool { return false }

// RequestError reports a request this connection cannot send as it is
// (an invalid header field, a header list larger than the server
// accepts, ...). Nothing was written, but it does not match ErrUnsent:
// sending the same request again cannot succeed.
type RequestError struct {
	// Reason says what is wrong.
	Reason string
}

func (e *RequestError) Error() string { return "h2: invalid request: " + e.Reason }

// RequestBodyError reports that the request body failed: its Read
// returned Err, or its length differed from ContentLength (Err is then
// ErrBodyLength). The stream was reset with CANCEL; the connection goes
// on.
type RequestBodyError struct {
	// Err is the body's error.
	Err error
}

func (e *RequestBodyError) Error() string { return "h2: request body: " + errString(e.Err) }

// Unwrap returns the body's error.
func (e *RequestBodyError) Unwrap() error { return e.Err }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
