package h2

import "net/http"

// StreamEvents receives the first-hand evidence of one request's
// exchange, as the connection observes it. Pass one to RoundTrip (nil
// means no evidence is wanted); embed NopEvents to implement only some
// methods.
//
// Duties of an implementation:
//
//  1. Return quickly, without blocking: methods are called with the
//     connection's lock held, from the connection's reader or writer
//     goroutine or from a goroutine running RoundTrip or a body Read.
//  2. Never call a method of the ClientConn, nor Read or Close a body
//     of it, from a method (that would deadlock).
//  3. Synchronize your own state: once RoundTrip has returned a
//     response, methods may run concurrently with your goroutines (the
//     request body may still be uploading; the writer's report of the
//     last frames may come just after the response body's end). No
//     method is called after RoundTrip returned an error, after the
//     response body returned an error other than io.EOF, or once the
//     stream has ended and the writer has reported its last frame.
//
// For one stream, the calls come in protocol order: HeadersWritten
// before BodyWritten and RequestWritten; HeadersWritten before
// ResponseStarted; ResponseStarted before Informational and
// ResponseHeaders.
type StreamEvents interface {
	// HeadersWritten reports that a write on the connection accepted at
	// least one byte of the HEADERS frame that opened the stream: from
	// now on the server may have seen the request. It is called once.
	// (When the server's answer is read before the writer has seen its
	// write return, it is called just before ResponseStarted.)
	HeadersWritten(streamID uint32)
	// BodyWritten reports that n more bytes of request body (DATA
	// payload) were accepted by a write on the connection.
	BodyWritten(n int64)
	// RequestWritten reports that the frame carrying END_STREAM (the
	// whole request, trailers included) was accepted by a write. It is
	// called at most once.
	RequestWritten()
	// ResponseStarted reports that the first frame of the response
	// arrived: a HEADERS frame (interim or final), before its header
	// block is decoded. It is called at most once.
	ResponseStarted()
	// Informational reports an interim (1xx) response with its decoded
	// header and its size as RFC 9113 counts it (names, values and 32
	// octets per field). Returning an error resets the stream with
	// CANCEL; RoundTrip then returns a *StreamError wrapping it.
	Informational(status int, header http.Header, size int) error
	// ResponseHeaders reports the final response's status, once its
	// header section is decoded and valid.
	ResponseHeaders(status int)
}

// NopEvents is a StreamEvents that ignores every event; embed it to
// implement only the methods you need.
type NopEvents struct{}

// HeadersWritten does nothing.
func (NopEvents) HeadersWritten(uint32) {}

// BodyWritten does nothing.
func (NopEvents) BodyWritten(int64) {}

// RequestWritten does nothing.
func (NopEvents) RequestWritten() {}

// ResponseStarted does nothing.
func (NopEvents) ResponseStarted() {}

// Informational does nothing and returns nil.
func (NopEvents) Informational(int, http.Header, int) error { return nil }

// ResponseHeaders does nothing.
func (NopEvents) ResponseHeaders(int) {}
