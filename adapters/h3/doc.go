// Package h3 turns what github.com/quic-go/quic-go/http3 lets a client
// observe into fsm events: the errors its ClientConn returns, its
// httptrace callbacks, and the HTTP/3 frames its qlog tracing reports.
//
// # Why errors are not enough
//
// quic-go reports a stream reset as *http3.Error (wrapping a
// *quic.StreamError) with the peer's error code, so H3_REQUEST_REJECTED
// (RFC 9114 §4.1.1, "the request was not processed") is typed and
// classifiable. Two other facts that decide a replay are not exported:
//
//   - The GOAWAY stream ID. ClientConn keeps it in an unexported field and
//     never fails the requests it proves were not processed: a request on
//     a stream at or above the ID waits until the server resets it or the
//     connection closes, and then carries an error that names neither the
//     GOAWAY nor its ID.
//   - The request's stream ID. ClientConn.RoundTrip opens the stream
//     itself and never shows it to the caller.
//
// Both are visible through quic-go's qlog tracing: the http3 layer
// records a FrameParsed event for the GOAWAY frame on the control stream,
// and a FrameCreated event, carrying the stream ID, for every HEADERS
// frame it writes. A Watch is that tracer. It is installed per
// connection as quic.Config.Tracer; it keeps the GOAWAY ID and hands
// each request its stream ID.
//
// # Which stream is ours
//
// quic-go writes a request's header section while holding its
// connection's request-writer lock: it encodes the fields, calling
// httptrace.ClientTrace.WroteHeaderField for each, then records the
// HEADERS frame's FrameCreated event with the stream ID, then writes the
// frame. An Attempt's WroteHeaderField hook marks it as the writer the
// Watch is waiting for; the next HEADERS frame the Watch sees created on
// a new stream is the Attempt's. Trailing HEADERS frames (request
// trailers) go through the same recorder but belong to a stream already
// claimed, and are ignored.
//
// The first WroteHeaderField call also means the request's bytes were
// handed to the QUIC stream: from then on the Attempt counts the request
// as possibly sent. When it never fires, nothing of the request left
// (ClientConn refused to open a stream after a GOAWAY, or the stream
// could not be opened), and Failure reports EventHandedBack.
//
// # A request on a stream of its own
//
// A request with no body, no trailers and no CONNECT method (OwnStream)
// can be sent by Attempt.RoundTrip instead: it opens the request stream
// itself (ClientConn.OpenRequestStream), so the stream ID is known before
// a byte is written, and claims it with the Watch, whose next HEADERS
// frame on that stream then goes to no waiting Attempt. It takes
// ClientConn.RoundTrip's steps for such a request, reports what Trace's
// hooks report and calls the caller's httptrace hooks where
// ClientConn.RoundTrip calls them, but starts no goroutine per request
// and needs no WroteHeaderField hook, for which quic-go builds a slice
// per header field: StreamTrace installs the one hook it needs. quic-go's
// stream API cannot announce a request body (it writes every header
// section as if there were none, a POST's with "content-length: 0"), so
// a request with a body goes through ClientConn.RoundTrip.
//
// # Cost of the tracer
//
// quic-go's QUIC layer asks the tracer for its own recorder first, when
// the connection is created, and records an event per packet into it.
// A Watch returns no recorder to that first request, so the QUIC layer
// records nothing; only the http3 layer, which asks next, gets one. Its
// events are per frame, not per packet.
//
// # Using it with a ClientConn
//
//	w := h3.NewWatch()
//	qc, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{Tracer: w.Tracer})
//	cc := (&http3.Transport{}).NewClientConn(qc)
//	…
//	att := w.NewAttempt()
//	ctx := httptrace.WithClientTrace(req.Context(), att.Trace(h3.EmitFunc(emit), nil))
//	res, err := cc.RoundTrip(req.WithContext(ctx))
//	if err != nil {
//		emit(att.Failure(ctx, err))
//	}
package h3
