package fsm

import "strconv"

// EventKind names one thing that happened to an attempt.
type EventKind uint8

// Event kinds. Progress events come first, then failures. Each stack's
// adapter maps what it can observe onto this one vocabulary. The line
// comment after each constant is its name in the trace format (stringer
// -linecomment).
const (
	// EventInvalid is the zero value: never valid.
	EventInvalid EventKind = iota // invalid

	// EventConnAcquired: the attempt has a connection. Event.Reused and
	// Event.Proto describe it.
	EventConnAcquired // conn-acquired
	// EventHandedBack: the stack returned the request untouched, before
	// serialising any of it.
	EventHandedBack // handed-back
	// EventFirstByteWritten: the first request byte reached the socket.
	EventFirstByteWritten // first-byte-written
	// EventBodyRead: the request body was read from for the first time.
	EventBodyRead // body-read
	// EventRequestWritten: the whole request was written.
	EventRequestWritten // request-written
	// EventFirstResponseByte: a response byte arrived, of any kind.
	EventFirstResponseByte // first-response-byte
	// EventInformational: a 1xx response arrived.
	EventInformational // informational
	// EventFinalHeaders: the final response's header section arrived.
	EventFinalHeaders // final-headers
	// EventResponseComplete: the whole response arrived cleanly.
	EventResponseComplete // response-complete
	// EventTick: the caller's clock reached Event.At; sent when a deadline
	// reported by Machine.Deadline passes.
	EventTick // tick

	// EventClosed: the connection closed (EOF) under the attempt.
	EventClosed // closed
	// EventReset: the connection or stream was reset (ECONNRESET, an HTTP/2
	// RST_STREAM other than REFUSED_STREAM, an HTTP/3 stream reset other than
	// H3_REQUEST_REJECTED, a protocol error).
	EventReset // reset
	// EventTLSFailure: TLS failed on an established connection.
	EventTLSFailure // tls-failure
	// EventMalformed: the response could not be parsed; bytes arrived.
	EventMalformed // malformed
	// EventTimeout: a phase ran out of time; Event.Phase names it.
	EventTimeout // timeout
	// EventCanceled: the caller canceled the request.
	EventCanceled // canceled
	// EventRefusedStream: an HTTP/2 RST_STREAM with REFUSED_STREAM for our
	// stream (RFC 9113 §8.7).
	EventRefusedStream // refused-stream
	// EventH2GoAway: an HTTP/2 GOAWAY ended the connection; Event.Boundary
	// carries its last stream ID and Event.Stream ours (RFC 9113 §6.8).
	EventH2GoAway // h2-goaway
	// EventRequestRejected: an HTTP/3 stream error H3_REQUEST_REJECTED for
	// our request (RFC 9114 §4.1.1).
	EventRequestRejected // request-rejected
	// EventH3GoAway: an HTTP/3 GOAWAY ended the connection. Event.Boundary is
	// its stream ID when the adapter saw it, Event.Stream ours (RFC 9114
	// §5.2); Event.BoundaryKnown says whether the boundary was observed.
	EventH3GoAway // h3-goaway
	// EventAcquireFailed: no connection could be had (dial, TLS handshake,
	// proxy).
	EventAcquireFailed // acquire-failed
	// EventLocalFailure: the caller's side failed, not the server or the
	// network: the request body's Read returned an error, or GetBody could
	// not produce the body again for a resend.
	EventLocalFailure // local-failure

	// EventEarlyAccepted: the handshake of a connection the request went
	// on as early data completed, and the server accepted the early data
	// (quic-go: ConnectionState().Used0RTT once HandshakeComplete). It is
	// progress, not a failure, though it sits after them, and it may come
	// after response bytes: the adapter may see the handshake's end late.
	EventEarlyAccepted // early-data-accepted
	// EventEarlyRejected: the server rejected the early data the request
	// went in (quic-go: quic.Err0RTTRejected), so none of it was
	// processed.
	EventEarlyRejected // early-data-rejected
)

// eventKindCount is not an event; it is the size of the alphabet.
const eventKindCount = EventEarlyRejected + 1

// EventKinds is the number of valid event kinds plus one (the invalid zero).
const EventKinds = int(eventKindCount)

// ParseEventKind is the inverse of EventKind.String; "invalid" does not
// parse.
func ParseEventKind(s string) (EventKind, bool) { return ParseEnum(s, eventKindCount, false) }

// Failure reports whether the event kind is a failure. The early-data
// events came last: EventEarlyAccepted is the one kind after
// EventClosed that is not a failure.
func (k EventKind) Failure() bool {
	return k >= EventClosed && k < eventKindCount && k != EventEarlyAccepted
}

// Event is one observation. Only the fields its kind names are read; the
// others should be zero.
//
// The 8-byte fields come first: so ordered an Event takes 32 bytes
// instead of 48, and a recorder keeps its events inline.
type Event struct {
	At Instant // when it happened, on the caller's monotonic clock

	// Stream is our request's stream ID (EventH2GoAway, EventH3GoAway).
	Stream uint64
	// Boundary is the GOAWAY stream ID: HTTP/2's last stream ID, or
	// HTTP/3's first unprocessed stream ID.
	Boundary uint64

	Kind EventKind

	Reused bool  // EventConnAcquired: the connection served an earlier request
	Proto  Proto // EventConnAcquired: the connection's protocol
	// Early (EventConnAcquired): the connection's handshake is not
	// complete, and the request goes as early data (0-RTT).
	Early bool

	Phase Phase // EventTimeout: the phase that ran out of time

	// BoundaryKnown is set when the adapter observed Boundary
	// (EventH3GoAway; HTTP/2 GOAWAY always carries it).
	BoundaryKnown bool
}

// String prints the event in the trace format.
func (e Event) String() string {
	s := "@" + e.At.String() + " " + e.Kind.String()
	switch e.Kind {
	case EventConnAcquired:
		if e.Reused {
			s += " reused"
		} else {
			s += " fresh"
		}
		if e.Proto != ProtoUnknown {
			s += " " + e.Proto.String()
		}
		if e.Early {
			s += " early"
		}
	case EventTimeout:
		if e.Phase != PhaseNone {
			s += " phase=" + e.Phase.String()
		}
	case EventH2GoAway:
		s += " last=" + strconv.FormatUint(e.Boundary, 10) + " stream=" + strconv.FormatUint(e.Stream, 10)
	case EventH3GoAway:
		if e.BoundaryKnown {
			s += " boundary=" + strconv.FormatUint(e.Boundary, 10)
		}
		s += " stream=" + strconv.FormatUint(e.Stream, 10)
	}
	return s
}
