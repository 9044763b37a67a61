package fsm

import "strconv"

// EventKind names one thing that happened to an attempt.
type EventKind uint8

// Event kinds. Progress events come first, then failures. Each stack's
// adapter maps what it can observe onto this one vocabulary.
const (
	EventInvalid EventKind = iota // zero value: never valid

	// EventConnAcquired: the attempt has a connection. Event.Reused and
	// Event.Proto describe it.
	EventConnAcquired
	// EventHandedBack: the stack returned the request untouched, before
	// serialising any of it.
	EventHandedBack
	// EventFirstByteWritten: the first request byte reached the socket.
	EventFirstByteWritten
	// EventBodyRead: the request body was read from for the first time.
	EventBodyRead
	// EventRequestWritten: the whole request was written.
	EventRequestWritten
	// EventFirstResponseByte: a response byte arrived, of any kind.
	EventFirstResponseByte
	// EventInformational: a 1xx response arrived.
	EventInformational
	// EventFinalHeaders: the final response's header section arrived.
	EventFinalHeaders
	// EventResponseComplete: the whole response arrived cleanly.
	EventResponseComplete
	// EventTick: the caller's clock reached Event.At; sent when a deadline
	// reported by Machine.Deadline passes.
	EventTick

	// EventClosed: the connection closed (EOF) under the attempt.
	EventClosed
	// EventReset: the connection or stream was reset (ECONNRESET, an HTTP/2
	// RST_STREAM other than REFUSED_STREAM, an HTTP/3 stream reset other than
	// H3_REQUEST_REJECTED, a protocol error).
	EventReset
	// EventTLSFailure: TLS failed on an established connection.
	EventTLSFailure
	// EventMalformed: the response could not be parsed; bytes arrived.
	EventMalformed
	// EventTimeout: a phase ran out of time; Event.Phase names it.
	EventTimeout
	// EventCanceled: the caller canceled the request.
	EventCanceled
	// EventRefusedStream: an HTTP/2 RST_STREAM with REFUSED_STREAM for our
	// stream (RFC 9113 §8.7).
	EventRefusedStream
	// EventH2GoAway: an HTTP/2 GOAWAY ended the connection; Event.Boundary
	// carries its last stream ID and Event.Stream ours (RFC 9113 §6.8).
	EventH2GoAway
	// EventRequestRejected: an HTTP/3 stream error H3_REQUEST_REJECTED for
	// our request (RFC 9114 §4.1.1).
	EventRequestRejected
	// EventH3GoAway: an HTTP/3 GOAWAY ended the connection. Event.Boundary is
	// its stream ID when the adapter saw it, Event.Stream ours (RFC 9114
	// §5.2); Event.BoundaryKnown says whether the boundary was observed.
	EventH3GoAway
	// EventAcquireFailed: no connection could be had (dial, TLS handshake,
	// proxy).
	EventAcquireFailed

	eventKindCount // not an event; the size of the alphabet
)

// EventKinds is the number of valid event kinds plus one (the invalid zero).
const EventKinds = int(eventKindCount)

var eventNames = []string{
	"invalid",
	"conn-acquired", "handed-back", "first-byte-written", "body-read",
	"request-written", "first-response-byte", "informational",
	"final-headers", "response-complete", "tick",
	"closed", "reset", "tls-failure", "malformed", "timeout", "canceled",
	"refused-stream", "h2-goaway", "request-rejected", "h3-goaway",
	"acquire-failed",
}

// String returns the value's name, or EventKind(n) for a value outside the enum.
func (k EventKind) String() string { return enumString("EventKind", eventNames, uint8(k)) }

// ParseEventKind is the inverse of EventKind.String.
func ParseEventKind(s string) (EventKind, bool) {
	v, ok := enumParse(eventNames, s)
	return EventKind(v), ok
}

// Failure reports whether the event kind is a failure.
func (k EventKind) Failure() bool { return k >= EventClosed && k < eventKindCount }

// Event is one observation. Only the fields its kind names are read; the
// others should be zero.
type Event struct {
	Kind EventKind
	At   Instant // when it happened, on the caller's monotonic clock

	Reused bool  // EventConnAcquired: the connection served an earlier request
	Proto  Proto // EventConnAcquired: the connection's protocol

	Phase Phase // EventTimeout: the phase that ran out of time

	// Stream is our request's stream ID (EventH2GoAway, EventH3GoAway).
	Stream uint64
	// Boundary is the GOAWAY stream ID: HTTP/2's last stream ID, or
	// HTTP/3's first unprocessed stream ID.
	Boundary uint64
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
