// Package h2 turns the evidence of an HTTP/2 exchange on a transports/h2
// ClientConn into fsm events: what the connection reports of each stream
// as it happens (StreamEvents) and the typed error a request or its
// response body ends with.
//
// The connection reports first-hand what a replay decision rests on, so
// nothing here reads the wire or matches error text:
//
//   - Was any of the request written? HeadersWritten fires when a write
//     on the socket accepted a byte of the HEADERS frame that opened the
//     stream; a request nothing of which left fails with
//     transports/h2.ErrUnsent, which is EventHandedBack.
//   - Which stream is ours? HeadersWritten names it, and so do the
//     connection's StreamError and GoAwayError.
//   - Did the server refuse it? REFUSED_STREAM is a StreamError with
//     Unprocessed (EventRefusedStream); a stream above a GOAWAY's last
//     stream ID is a GoAwayError with Unprocessed (EventH2GoAway whose
//     Boundary is below Stream). At or below the boundary the GOAWAY
//     proves nothing, and the machine judges it as ambiguous.
//   - Did a response byte arrive? ResponseStarted fires with the first
//     response frame on the stream, an interim one or one cut inside its
//     header block included.
//
// # Using it
//
//	att := new(h2.Attempt)
//	att.Init(emitter)                       // feeds the attempt's machine
//	att.SetInformationalLimit(limit)        // the 1xx bound, optional
//	resp, err := cc.RoundTrip(req, att)     // att is the StreamEvents
//	if err != nil {
//		emitter.Emit(att.Failure(req.Context(), err))
//	}
//
// Feed EventConnAcquired before RoundTrip, EventFinalHeaders when it
// returns a response, EventResponseComplete at its body's io.EOF, and
// Failure of a body read's error. An Attempt serves one request.
package h2
