package h2server

import (
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Kind says what the server does with one stream: one of the
// StreamKind kinds it speaks, StreamRespond,
// StreamRefuse (RST_STREAM(REFUSED_STREAM), which promises the client
// that nothing was processed, RFC 9113 §8.7), StreamReset
// (RST_STREAM(Code)), StreamGoAway (GOAWAY(last stream ID, Code), see
// Action.LastStream: with Close the server then closes the connection;
// without it, a stream at or below the last stream ID is answered as
// StreamRespond would, and a stream above it is dropped unanswered),
// StreamClose (close the connection, see Action.CloseMode, without
// answering), StreamPartialHeaders (a HEADERS frame carrying the first
// half of the response's header block without END_HEADERS, then close:
// a response cut off inside its header section) and StreamHang (never
// answer: the server keeps reading, and recording, the connection until
// the client goes away, the server is closed, or Delay, zero meaning
// Config.HangTimeout, elapses; then it closes the connection). The zero
// Action is a StreamRespond with status 200 and an empty body, sent
// once the request is complete.
type Kind = replaysafetest.StreamKind

// CloseMode says how the server closes a connection: the close modes of
// replaysafetest. A FIN close (with or without close_notify) then
// discards what the client still sends for up to Config.DrainTimeout so
// that the kernel does not turn the FIN into an RST; the client reads
// io.EOF. After an RST close the client reads ECONNRESET, unless one of
// its writes meets the reset first: Linux reports a reset once, and the
// next read then returns io.EOF.
type CloseMode = replaysafetest.CloseMode

// Close modes.
const (
	// CloseFIN is an orderly close: over TLS a close_notify alert first,
	// then a TCP FIN (shutdown of the write side). The zero value.
	CloseFIN = replaysafetest.CloseFIN
	// CloseFINNoNotify shuts the write side with a TCP FIN without a TLS
	// close_notify: an abrupt TLS close (truncation).
	CloseFINNoNotify = replaysafetest.CloseFINNoNotify
	// CloseRST sets SO_LINGER to 0 and closes, so the kernel sends a TCP
	// RST and no close_notify.
	CloseRST = replaysafetest.CloseRST
)

// Moment says when in a stream's life the server carries out its action.
type Moment = replaysafetest.Moment

// Moments.
const (
	// AfterBody acts once the request is complete. The zero value.
	AfterBody = replaysafetest.AfterBody
	// OnHeaders acts as soon as the request's HEADERS arrive, before any
	// of its body is read.
	OnHeaders = replaysafetest.OnHeaders
)

// LastStream chooses the last stream ID a GOAWAY carries.
type LastStream struct {
	// Relative makes the ID relative to the stream the action handles:
	// that stream's ID plus Delta, clamped to 0. Otherwise ID is used as
	// it is.
	Relative bool
	// ID is the absolute last stream ID (when Relative is false).
	ID uint32
	// Delta is added to the stream's ID (when Relative is true): -2 names
	// the client stream before it, 0 the stream itself.
	Delta int64
}

// Action is what the server does with one stream. Build one with a
// constructor (OK, Respond, Refuse, ...) and adjust it with the With
// methods; the fields are exported so scripts can also be literals.
// Fields a kind does not use are ignored.
type Action struct {
	// Kind selects the behaviour.
	Kind Kind
	// At says when the action runs; AfterBody (the zero value) waits for
	// the whole request.
	At Moment
	// Status is the response status (StreamRespond, StreamPartialHeaders, and
	// StreamGoAway streams that are still answered); 0 means 200.
	Status int
	// Header holds extra response header fields, written lower-cased in
	// sorted key order. content-length is added unless Header sets it.
	Header http.Header
	// Body is the response body.
	Body []byte
	// Trailer, when non-empty, is sent as a trailing HEADERS frame after
	// the body.
	Trailer http.Header
	// Code is the error code of StreamReset and StreamGoAway (zero:
	// NO_ERROR; for StreamReset choose one, such as http2.ErrCodeInternal).
	Code http2.ErrCode
	// LastStream is the GOAWAY's last stream ID (StreamGoAway).
	LastStream LastStream
	// DebugData is the GOAWAY's debug data (StreamGoAway).
	DebugData []byte
	// Close makes a StreamGoAway close the connection right after the
	// GOAWAY frame.
	Close bool
	// CloseMode is how the connection is closed (StreamGoAway with Close,
	// StreamClose, StreamPartialHeaders, and the end of StreamHang).
	CloseMode CloseMode
	// Delay is how long StreamHang keeps the connection open; zero means
	// Config.HangTimeout.
	Delay time.Duration
	// Informational lists interim responses sent, in order, as soon as
	// the request's HEADERS arrive, before the action runs, whatever the
	// kind.
	Informational []Informational
	// Endless1xx, when non-zero, is a 1xx status the server sends as
	// interim responses on the stream, with Header, without end, as
	// soon as its HEADERS arrive (after Informational), instead of the
	// action: until a write fails (the client went away), the server is
	// closed, or EndlessMaxResponses or EndlessMaxDuration is reached;
	// then the server closes the connection.
	Endless1xx int
}

// Informational is an interim (1xx) response: Status and Header.
type Informational = replaysafetest.Informational

// Bounds of an Endless1xx flood, so that a test always ends.
const (
	// EndlessMaxResponses is the most interim responses one flood sends.
	EndlessMaxResponses = kit.EndlessMaxResponses
	// EndlessMaxDuration is the longest one flood lasts.
	EndlessMaxDuration = kit.EndlessMaxDuration
)

// Endless1xx sends interim responses with status (100 or 103) forever
// (see Action.Endless1xx).
func Endless1xx(status int) Action { return Action{Endless1xx: status} }

// OK answers 200 with body.
func OK(body string) Action { return Action{Kind: replaysafetest.StreamRespond, Body: []byte(body)} }

// Respond answers with status, header and body.
func Respond(status int, header http.Header, body []byte) Action {
	return Action{Kind: replaysafetest.StreamRespond, Status: status, Header: header, Body: body}
}

// Refuse resets the stream with REFUSED_STREAM as soon as its HEADERS
// arrive, before its body is read.
func Refuse() Action { return Action{Kind: replaysafetest.StreamRefuse, At: OnHeaders} }

// RefuseAfterBody reads the whole request, then resets the stream with
// REFUSED_STREAM.
func RefuseAfterBody() Action { return Refuse().WithAt(AfterBody) }

// Reset reads the whole request, then resets the stream with code.
func Reset(code http2.ErrCode) Action { return Action{Kind: replaysafetest.StreamReset, Code: code} }

// GoAway sends GOAWAY(last, NO_ERROR) as soon as the stream's HEADERS
// arrive, and keeps the connection open.
func GoAway(last uint32) Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, LastStream: LastStream{ID: last}}
}

// GoAwayBelow sends, on the stream's HEADERS, a GOAWAY whose last stream
// ID is the client stream before this one (its ID minus 2, at least 0):
// proof for the client that this stream was not processed.
func GoAwayBelow() Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, LastStream: LastStream{Relative: true, Delta: -2}}
}

// GoAwayAt sends, on the stream's HEADERS, a GOAWAY whose last stream ID
// is this stream's own: the server may have processed it.
func GoAwayAt() Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, LastStream: LastStream{Relative: true}}
}

// CloseConn closes the connection with a FIN as soon as the stream's
// HEADERS arrive, before its body is read.
func CloseConn() Action { return Action{Kind: replaysafetest.StreamClose, At: OnHeaders} }

// CloseConnAfterBody reads the whole request, then closes the connection
// with a FIN without answering.
func CloseConnAfterBody() Action { return CloseConn().WithAt(AfterBody) }

// PartialHeaders reads the whole request, sends half a response header
// block in a HEADERS frame without END_HEADERS, and closes with a FIN.
func PartialHeaders() Action { return Action{Kind: replaysafetest.StreamPartialHeaders} }

// Hang never answers; the connection is closed after d (zero:
// Config.HangTimeout) unless the client or Server.Close ends it first.
func Hang(d time.Duration) Action { return Action{Kind: replaysafetest.StreamHang, Delay: d} }

// WithAt returns a copy of a that runs at moment m.
func (a Action) WithAt(m Moment) Action {
	a.At = m
	return a
}

// WithCode returns a copy of a with error code c.
func (a Action) WithCode(c http2.ErrCode) Action {
	a.Code = c
	return a
}

// WithClose returns a copy of a that closes the connection with mode
// after its frames (for StreamGoAway it sets Close).
func (a Action) WithClose(mode CloseMode) Action {
	a.Close = true
	a.CloseMode = mode
	return a
}

// WithTrailer returns a copy of a that sends trailer after the body.
func (a Action) WithTrailer(trailer http.Header) Action {
	a.Trailer = trailer
	return a
}

// WithHeader returns a copy of a with the response header field key set
// to value (added to a copy of Header).
func (a Action) WithHeader(key, value string) Action {
	a.Header = kit.WithField(a.Header, key, value)
	return a
}

// WithInformational returns a copy of a that sends an interim response
// with status (1xx) and header as soon as the request's HEADERS arrive,
// after those already listed.
func (a Action) WithInformational(status int, header http.Header) Action {
	a.Informational = kit.AppendCopy(a.Informational, Informational{Status: status, Header: header})
	return a
}

// String describes the action briefly, for logs.
func (a Action) String() string {
	if a.Endless1xx != 0 {
		return "endless-" + strconv.Itoa(a.Endless1xx)
	}
	s := a.Kind.String() + "@" + a.At.String()
	for _, inf := range a.Informational {
		s = strconv.Itoa(inf.Status) + "," + s
	}
	switch a.Kind {
	case replaysafetest.StreamRespond:
		s += " status=" + strconv.Itoa(a.status())
	case replaysafetest.StreamReset:
		s += " code=" + a.Code.String()
	case replaysafetest.StreamGoAway:
		if a.LastStream.Relative {
			s += " last=stream" + strconv.FormatInt(a.LastStream.Delta, 10)
		} else {
			s += " last=" + strconv.FormatUint(uint64(a.LastStream.ID), 10)
		}
		s += " code=" + a.Code.String()
		if a.Close {
			s += " close=" + a.CloseMode.String()
		}
	case replaysafetest.StreamClose, replaysafetest.StreamPartialHeaders:
		s += " close=" + a.CloseMode.String()
	}
	return s
}

func (a Action) status() int { return kit.OrOK(a.Status) }

// ConnScript scripts one connection: Streams[j] handles the j-th
// stream the client opens on it, Default every one after the list
// (replaysafetest.StreamScript).
type ConnScript = replaysafetest.StreamScript[Action]

// Every returns a script that applies a to every stream of a connection.
// Config{Default: Every(Refuse())} is a server that refuses everything.
func Every(a Action) *ConnScript { return &ConnScript{Default: &a} }
