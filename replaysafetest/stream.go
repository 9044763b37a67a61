package replaysafetest

import (
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// StreamKind says what an HTTP/2 or HTTP/3 scripted server (h2server,
// h3server) does with one request stream. The two servers share the
// kinds that mean the same on both; a kind one of them does not speak
// (marked below) makes that server reset the stream with its internal
// error code, the test author's mistake said on the wire.
type StreamKind uint8

// Stream kinds. To add one: add a constant before StreamHang with its
// name as a line comment, run go generate, and add its case to the act
// method of each server that speaks it.
const (
	// StreamRespond answers with the action's status, header and body,
	// then its trailer if set. The zero value.
	StreamRespond StreamKind = iota // respond
	// StreamRefuse refuses the stream with the code that promises the
	// client nothing was processed: HTTP/2 RST_STREAM(REFUSED_STREAM)
	// (RFC 9113 §8.7), HTTP/3 RESET_STREAM and STOP_SENDING with
	// H3_REQUEST_REJECTED (RFC 9114 §4.1.1).
	StreamRefuse // refuse
	// StreamReset resets the stream with the action's code.
	StreamReset // reset
	// StreamPartialHeaders (HTTP/2 only) sends the first half of the
	// response's header block without END_HEADERS, then closes the
	// connection.
	StreamPartialHeaders // partial-headers
	// StreamGoAway sends a GOAWAY naming a stream boundary, then closes
	// the connection or goes on serving below the boundary.
	StreamGoAway // goaway
	// StreamStopSending (HTTP/3 only) sends STOP_SENDING, after the
	// response or instead of it.
	StreamStopSending // stop-sending
	// StreamClose closes the connection without answering.
	StreamClose // close
	// StreamHang never answers the stream; the connection closes after
	// the action's delay.
	StreamHang // hang
)

// Valid reports whether k is one of the defined kinds.
func (k StreamKind) Valid() bool { return k <= StreamHang }

// StreamRecord is what h2server and h3server record of one request
// stream, whatever the protocol, from the moment its HEADERS arrive;
// each server's Received adds what only its protocol has.
type StreamRecord struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Seq is the stream's position on its connection, from 0: the j of
	// ConnScript.Streams[j].
	Seq int
	// At is when the stream's HEADERS arrived.
	At time.Time
	// Method, Scheme, Authority and Path are the request pseudo-header
	// fields; Protocol is :protocol (extended CONNECT), usually empty.
	Method, Scheme, Authority, Path, Protocol string
	// Header holds the regular header fields, with canonical keys.
	Header http.Header
	// Trailer holds the request trailer fields, or nil.
	Trailer http.Header
	// Body is the request body as received (DATA payloads, padding
	// removed), up to the server's Config.MaxBodyBytes.
	Body []byte
	// BodyDropped counts body bytes beyond Config.MaxBodyBytes.
	BodyDropped int64
	// ClientReset reports that the client reset the stream.
	ClientReset bool
	// Ignored reports that the stream arrived beyond the boundary of a
	// GOAWAY the server had already sent; it was recorded but not
	// processed (RFC 9113 §6.8, RFC 9114 §5.2).
	Ignored bool
	// Action is the kind of action the server took (meaningless when
	// Ignored).
	Action StreamKind
	// Done reports that the server will record nothing more for the
	// stream: the request ended, either side reset the stream, or the
	// server stopped reading it or its connection.
	Done bool
}

// Clone returns a copy of r that shares no memory with it.
func (r StreamRecord) Clone() StreamRecord {
	r.Header, r.Trailer, r.Body = kit.CloneMessage(r.Header, r.Trailer, r.Body)
	return r
}

// Receipt returns r reduced to a Receipt (Scripted.Receipts): complete
// when the whole request arrived, and Unprocessed when the stream was
// Ignored or refused.
func (r StreamRecord) Receipt(complete bool) Receipt {
	return Receipt{Conn: r.Conn, Method: r.Method, Path: r.Path, Body: r.Body,
		Complete: complete, Unprocessed: r.Ignored || r.Action == StreamRefuse}
}

// ConnRecord is what h2server and h3server record of one connection,
// whatever the protocol; each server's ConnInfo adds what only its
// protocol has.
type ConnRecord struct {
	// Index is the connection's position in accept order, from 0.
	Index int
	// Remote is the client's address.
	Remote string
	// NegotiatedProtocol is the ALPN result: "h2" or "h3", empty for h2c.
	NegotiatedProtocol string
	// Streams counts the request streams whose HEADERS arrived.
	Streams int
	// GoAwaySent reports that the server sent a GOAWAY.
	GoAwaySent bool
	// ClientGoAway reports that the client sent a GOAWAY.
	ClientGoAway bool
	// Closed reports that the connection is over.
	Closed bool
	// Err says why the connection ended, when the server ended it on an
	// error or a timeout, or as the QUIC stack reports it; empty
	// otherwise.
	Err string
}

// StreamScript scripts one connection of h2server or h3server (their
// ConnScript): Streams[j] handles the j-th request stream the client
// opens on it, in the order its HEADERS arrive, counting from 0 whatever
// its stream ID, and Default every stream after the list. A is the
// server's Action.
type StreamScript[A any] struct {
	// Streams lists the actions in stream order.
	Streams []A
	// Default handles streams beyond Streams; nil means the server's
	// OK("ok").
	Default *A
}

// Nth returns the action for the j-th stream: Streams[j], else
// *Default, else fallback (also for a nil script).
func (s *StreamScript[A]) Nth(j int, fallback A) A {
	switch {
	case s == nil:
	case j < len(s.Streams):
		return s.Streams[j]
	case s.Default != nil:
		return *s.Default
	}
	return fallback
}
