// Package h2 turns what golang.org/x/net/http2 lets a client observe into
// fsm events: the errors its ClientConn returns, its httptrace callbacks,
// and the frames crossing the connection.
//
// # Why errors are not enough
//
// x/net exports StreamError, GoAwayError and ConnectionError, and Classify
// maps those by type. But x/net's own replay decision (shouldRetryRequest
// and canRetryError in transport_common.go, the near copy of one rule that
// replaysafe exists to replace) rests on three facts, and a caller can
// match only one of them:
//
//   - REFUSED_STREAM arrives as StreamError{Code: ErrCodeRefusedStream,
//     StreamID: ours}: typed, and it names our stream.
//   - A stream above a GOAWAY's last stream ID is aborted with the
//     unexported errClientConnGotGoAway (or, on stream 1 with an error
//     code, an unwrapped fmt.Errorf); the GOAWAY's last stream ID is kept
//     in an unexported field. GoAwayError — which carries LastStreamID —
//     is returned only to streams at or below the boundary, when the
//     connection then closes: exactly the streams it proves nothing for.
//   - A request the connection could not take before writing anything gets
//     the unexported errClientConnUnusable or errClientConnNotEstablished.
//
// ClientConn does not expose a request's stream ID either. So a caller
// that wants the evidence must watch the wire, and Observe does: it wraps
// the net.Conn given to http2.Transport.NewClientConn and follows the
// frame headers both ways. An Attempt then answers the two questions that
// decide a replay:
//
//   - Which stream is ours? x/net assigns stream IDs (1, 3, 5, …) and
//     writes each request's HEADERS while holding its connection write
//     lock, then calls httptrace.ClientTrace.WroteHeaders before letting
//     go. At that instant the newest stream whose HEADERS frame reached the
//     socket is the caller's, and the Attempt claims it. Counting requests
//     instead is not reliable: concurrent RoundTrips race for the next ID,
//     and a request aborted after its ID was assigned but before its
//     HEADERS were written (a GOAWAY, a closed connection) consumes an ID
//     that never appears on the wire.
//   - Was any of the request written? Only if the connection accepted
//     bytes of a HEADERS frame opening our stream; the Wire counts what
//     the connection's Write accepted, not what x/net meant to write. If
//     WroteHeaders never fires, or fires with nothing new on the wire,
//     nothing of the request was sent.
//
// With those, Attempt.Failure recovers the GOAWAY boundary (EventH2GoAway
// with the last stream ID and our stream), hands back requests that never
// left (EventHandedBack), and notices a response cut off inside its header
// block (EventMalformed), none of which the error alone can tell.
//
// # Using it with a ClientConn
//
//	conn, wire := h2.Observe(tlsConn)               // after the TLS handshake
//	cc, err := (&http2.Transport{}).NewClientConn(conn)
//	…
//	att := wire.NewAttempt()
//	ctx := httptrace.WithClientTrace(req.Context(), att.Trace(h2.EmitFunc(emit)))
//	res, err := cc.RoundTrip(req.WithContext(ctx))
//	if err != nil {
//		emit(att.Failure(ctx, err))
//	}
//
// Use ClientConn.RoundTrip directly: http2.Transport's RoundTrip runs
// x/net's own retry loop, which resends a refused request up to seven
// times, the first at once and the others after sleeps of 1, 2, 4, 8,
// 16–17 and 32–35 seconds (see TestXNetTransportAgainstRefuseEverything).
//
// # Things the transport must still do
//
// x/net closes Request.Body whenever a request fails, even one it never
// wrote (cleanupWriteRequest): a one-shot body that should be handed back
// untouched must be wrapped so that this Close does not reach it. A
// request whose header fields x/net cannot encode fails before anything is
// written and is therefore handed back; it fails again on the resend, so
// validate header fields before the first attempt. The deprecated
// Request.Cancel channel makes x/net return an unexported "request
// canceled" error; treat a closed Cancel channel as a canceled context.
// Check ClientConn.ReserveNewRequest before choosing a pooled connection:
// false means the connection would refuse the request unwritten. Run at
// most MaxConcurrentStreams requests at once on one connection, however
// many its server allows: beyond them the Wire forgets the oldest
// stream's evidence. When the request's context already carries the
// caller's Got1xxResponse hook, compose the two yourself, Trace's first:
// httptrace.WithClientTrace would return the caller's verdict alone, and
// the 1xx bound would be gone.
package h2
