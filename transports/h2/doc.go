// Package h2 is an HTTP/2 client connection (RFC 9113) that reports, for
// every request, the first-hand evidence needed to decide whether the
// request may be sent again after a failure.
//
// It is built on golang.org/x/net/http2's Framer, frame types and hpack,
// not on x/net's Transport or ClientConn (on Go 1.27 those wrap net/http
// and lose the GOAWAY evidence). The protocol state is a value, driven
// by frames in and commands out, with no goroutine, clock or I/O of its
// own; ClientConn runs it with one reader goroutine and one writer
// goroutine, plus one goroutine per request that has a body, while the
// body uploads.
//
// # Using a connection
//
// The caller dials, completes TLS (ALPN "h2") if any, and calls
// NewClientConn; for cleartext HTTP/2 with prior knowledge (h2c) it
// passes the TCP connection as is. Then, per request:
//
//	if !cc.Reserve() {
//		// full, closing or closed: use another connection
//	}
//	res, err := cc.RoundTrip(req, events) // events may be nil
//
// Reserve is cheap and never waits on I/O; each successful Reserve is
// consumed by exactly one RoundTrip (or given back with Unreserve).
// Read every response body to io.EOF or Close it. Shutdown closes
// gracefully (GOAWAY, then wait for the open streams); Close closes at
// once and never blocks on a stuck write. Settled, GoAway, State,
// Closed, Err and Done describe the connection without waiting on it.
//
// # Evidence
//
// StreamEvents, passed per request, is called as the exchange happens:
// HeadersWritten (a write on the socket accepted at least one byte of
// the HEADERS frame that opened the stream: from then on the server may
// have seen the request), BodyWritten, RequestWritten (the END_STREAM
// frame was accepted), ResponseStarted (the first response frame
// arrived, an interim one included), Informational (each 1xx; it may
// abort the stream) and ResponseHeaders.
//
// Errors are typed; what each one means for sending the request again:
//
//   - errors.Is(err, ErrUnsent) (an *UnsentError): nothing of the
//     request reached the socket (the connection could not take it, it
//     closed first, or a write failed before the request's first byte).
//     Any method may be sent again, on another connection.
//   - *StreamError with Unprocessed() (REFUSED_STREAM from the server,
//     RFC 9113 §8.7): the server did no processing; any method may be
//     sent again.
//   - *GoAwayError with Unprocessed() (our stream is above the GOAWAY's
//     last stream ID, §6.8): not processed; any method may be sent
//     again. A *GoAwayError at or below the boundary (the server closed
//     after its GOAWAY with our stream unfinished) proves nothing.
//   - *StreamError otherwise (a reset by the server, or by us for a
//     malformed response or a bound), *ReadError (the connection was
//     closed or reset under the request), *WriteError with
//     HeadersWritten, *ConnectionError (a protocol error of the
//     server's), *TimeoutError (the liveness PING or SETTINGS timer):
//     the request may have been processed; only the caller's rules for
//     ambiguous failures (idempotent method, reused connection, no
//     response byte seen: ResponseStarted) can allow a resend.
//   - *RequestError: the request is invalid for HTTP/2 or too large
//     for the server; nothing was sent, and sending it again cannot
//     succeed.
//   - *RequestBodyError: the caller's request body failed; the stream
//     was reset with CANCEL, the connection goes on.
//   - The context's error: the caller gave up; the stream was reset.
//
// # Protocol
//
// The connection speaks RFC 9113 as a client: SETTINGS with
// acknowledgement (push disabled, our windows and sizes advertised; the
// server's applied, INITIAL_WINDOW_SIZE changes to open streams
// included); flow control both ways with WINDOW_UPDATE and overflow
// checks; request bodies sent only once the server's SETTINGS arrived
// (HEADERS go at once); MAX_CONCURRENT_STREAMS (100 assumed until the
// server's SETTINGS) and our own cap; HEADERS and CONTINUATION with
// HPACK; trailers both ways; interim responses; streamed request bodies
// of unknown length; PUSH_PROMISE refused as a connection error;
// RST_STREAM both ways (a cancelled context or a response body closed
// early resets the stream with CANCEL); PING answered, and a liveness
// PING while streams wait; graceful GOAWAY both ways; extended CONNECT
// (RFC 8441: Method CONNECT with the header key ":protocol"; it waits
// for the server's SETTINGS and needs SETTINGS_ENABLE_CONNECT_PROTOCOL)
// and plain CONNECT tunnels (full duplex: the request body is upstream,
// the response body downstream; ClientConn.Tunnel makes one a net.Conn,
// TunnelConn, for HTTP/2 CONNECT to a proxy); gzip decoded transparently unless
// Config.DisableCompression. Malformed responses (§8.1.1: bad
// pseudo-header fields, upper-case names, connection-specific fields,
// content-length differing from the DATA received, ...) reset their
// stream with PROTOCOL_ERROR; protocol errors of the server's end the
// connection with GOAWAY.
//
// # Bounds
//
// Everything the server can make grow is bounded (the defaults in
// parentheses; Config documents each field):
//
//   - unread response body per stream: the stream window
//     (Config.StreamWindow, 4 MiB), per connection: the connection
//     window (Config.ConnWindow, 16 MiB); buffers come from pools and
//     are released at the end of each body;
//   - response header list, interim responses included:
//     Config.MaxHeaderListSize (10 MiB), advertised; a header block of
//     more than twice that many bytes, or of more than
//     MaxHeaderBlockFrames frames (1024, or as many 16 KiB frames as
//     the bytes allow), ends the connection;
//   - interim responses per stream: Config.MaxInformational (10);
//   - acknowledgements owed while our writes do not drain (PING and
//     SETTINGS floods): Config.MaxQueuedControlFrames (10000);
//   - a frame: Config.MaxReadFrameSize (16 KiB), advertised;
//   - GOAWAY debug data kept: MaxGoAwayDebug (1024 bytes);
//   - streams at once: Config.MaxConcurrentStreams (1000) and the
//     server's setting;
//   - a silent server: Config.PingAfter and Config.PingTimeout (2 s and
//     2 s: dead within about 4 s while a stream waits); the server's
//     SETTINGS and its acknowledgement of ours:
//     Config.SettingsTimeout (10 s);
//   - request body queued for the writer: 64 KiB per connection, past
//     which uploads wait (back-pressure).
package h2
