package h3server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Kind says what the server does with one request stream: one of the
// StreamKind kinds it speaks. StreamRespond answers with
// Status, Header and Body, then Trailer if set, and ends the stream with
// a FIN; run OnHeaders it is an early response, and the server goes on
// reading the request until its FIN. StreamRefuse resets the stream in
// both directions (RESET_STREAM and STOP_SENDING) with
// H3_REQUEST_REJECTED, which promises the client that nothing was
// processed (RFC 9114 §4.1.1). StreamReset resets the stream with Code:
// RESET_STREAM, and STOP_SENDING too when the request is still arriving;
// unlike H3_REQUEST_REJECTED, no code but that one tells the client that
// the request was not processed. StreamGoAway sends a GOAWAY frame on
// the server's control stream carrying the first request stream ID the
// server will not process (RFC 9114 §5.2; see Action.GoAwayID): with
// Close the server then closes the connection; without it, streams at
// or above the ID are rejected with H3_REQUEST_REJECTED (or, with Drop,
// never answered), and a stream below it is answered as StreamRespond
// would, once its request is complete. StreamClose closes the
// connection with CONNECTION_CLOSE(Code) without answering: the close
// crosses the request. StreamStopSending sends the response (Status,
// Header, Body, Trailer) and then STOP_SENDING(Code), telling the client
// to stop uploading the request body (RFC 9114 §4.1: a server that does
// not need the rest of the request may abort reading it); with
// NoResponse the server sends STOP_SENDING only and then never answers:
// after Delay (zero: Config.HangTimeout) it closes the connection with
// H3_NO_ERROR. Run it OnHeaders: once the request is complete there is
// nothing left to stop. StreamHang never answers the stream: the server
// keeps reading (and recording) the request until it ends, the client
// goes away, the server is closed, or Delay (zero: Config.HangTimeout)
// elapses; then it closes the connection with CONNECTION_CLOSE(Code).
// The zero Action is a StreamRespond with status 200 and an empty body,
// sent once the request is complete.
type Kind = replaysafetest.StreamKind

// GoAwayID chooses the stream ID a GOAWAY carries. From a server that ID
// is the first client-initiated bidirectional stream the server will not
// process: requests on lower IDs might have been processed, requests on
// it and above were not (RFC 9114 §5.2). Client request stream IDs are
// 0, 4, 8, ...
type GoAwayID struct {
	// Relative makes the ID relative to the stream the action handles:
	// that stream's ID plus Delta, clamped to 0. Otherwise ID is used as
	// it is, even when it names no client request stream.
	Relative bool
	// ID is the absolute stream ID (when Relative is false).
	ID uint64
	// Delta is added to the stream's ID (when Relative is true): 0 marks
	// this stream as not processed, 4 lets this stream be processed and
	// refuses the next one.
	Delta int64
}

// resolve returns the ID for a GOAWAY sent while handling stream id.
func (g GoAwayID) resolve(id uint64) uint64 {
	if !g.Relative {
		return min(g.ID, quicvarint.Max)
	}
	return kit.Offset(id, g.Delta, quicvarint.Max)
}

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

// Informational is an interim (1xx) response: Status and Header.
type Informational = replaysafetest.Informational

// Action is what the server does with one request stream. Build one with
// a constructor (OK, Respond, Reject, ...) and adjust it with the With
// methods; the fields are exported so scripts can also be literals.
// Fields a kind does not use are ignored.
//
// Whatever the kind, the server first sends the Informational responses
// as soon as the request's HEADERS arrive, then runs an OnHeaders action,
// then pauses Stall before reading the body, reads the body and runs an
// AfterBody action.
type Action struct {
	// Kind selects the behaviour.
	Kind Kind
	// At says when the action runs; AfterBody (the zero value) waits for
	// the whole request.
	At Moment
	// Stall is how long the server stops reading the request after its
	// HEADERS (and after an OnHeaders action), whatever the kind, before
	// it reads the body: an upload larger than Config.StreamReceiveWindow
	// blocks on QUIC flow control meanwhile.
	Stall time.Duration
	// Status is the final response status (StreamRespond, StreamStopSending,
	// and StreamGoAway streams that are still answered); 0 means 200.
	Status int
	// Header holds extra response header fields, written lower-cased in
	// sorted key order. content-length is added unless Header sets it.
	Header http.Header
	// Body is the response body, sent in DATA frames of up to 16 KiB.
	Body []byte
	// Trailer, when non-empty, is sent as a trailing HEADERS frame after
	// the body.
	Trailer http.Header
	// Informational lists interim responses sent, in order, as soon as
	// the request's HEADERS arrive, whatever the kind.
	Informational []Informational
	// Endless1xx, when non-zero, is a 1xx status the server sends as
	// interim responses on the stream, with Header, without end, as soon
	// as its HEADERS arrive (after Informational), instead of the action:
	// until a write fails (the client reset the stream or went away), the
	// server is closed, or EndlessMaxResponses or EndlessMaxDuration is
	// reached; then the server closes the connection with H3_NO_ERROR.
	Endless1xx int
	// Code is the error code of StreamReset (RESET_STREAM), StreamStopSending
	// (STOP_SENDING), and of the CONNECTION_CLOSE of StreamClose, of
	// StreamGoAway with Close and at the end of StreamHang. Zero means
	// H3_NO_ERROR (0x100): HTTP/3 defines no code 0.
	Code http3.ErrCode
	// GoAwayID is the stream ID the GOAWAY carries (StreamGoAway).
	GoAwayID GoAwayID
	// Close makes a StreamGoAway close the connection with
	// CONNECTION_CLOSE(Code) after the GOAWAY (see Delay).
	Close bool
	// Drop makes a StreamGoAway without Close leave the streams at or above
	// its ID unanswered and unread, instead of rejecting them with
	// H3_REQUEST_REJECTED as RFC 9114 §5.2 says a server SHOULD.
	Drop bool
	// NoResponse makes a StreamStopSending send STOP_SENDING only, and then
	// hang (see StreamHang) instead of answering.
	NoResponse bool
	// Delay is how long StreamHang (and StreamStopSending with NoResponse)
	// keeps the connection open, zero meaning Config.HangTimeout; and how
	// long StreamGoAway with Close waits between the GOAWAY and the
	// CONNECTION_CLOSE, zero meaning DefaultGoAwayCloseDelay and a
	// negative Delay closing at once. QUIC discards stream data still
	// unsent when a connection closes, so closing at once usually loses
	// the GOAWAY.
	Delay time.Duration
}

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

// WithInformational returns a copy of a that sends an interim response
// with status (1xx) and header as soon as the request's HEADERS arrive,
// after those already listed.
func (a Action) WithInformational(status int, header http.Header) Action {
	a.Informational = kit.AppendCopy(a.Informational, Informational{Status: status, Header: header})
	return a
}

// OK answers 200 with body once the request is complete.
func OK(body string) Action { return Action{Kind: replaysafetest.StreamRespond, Body: []byte(body)} }

// Respond answers with status, header and body once the request is
// complete.
func Respond(status int, header http.Header, body []byte) Action {
	return Action{Kind: replaysafetest.StreamRespond, Status: status, Header: header, Body: body}
}

// WithHeader returns a copy of a with the response header field key set
// to value (added to a copy of Header).
func (a Action) WithHeader(key, value string) Action {
	a.Header = kit.WithField(a.Header, key, value)
	return a
}

// WithTrailer returns a copy of a that sends trailer after the body.
func (a Action) WithTrailer(trailer http.Header) Action {
	a.Trailer = trailer
	return a
}

// EarlyResponse sends the complete response (HEADERS, DATA, FIN) as soon
// as the request's HEADERS arrive, then goes on reading and recording the
// upload until its FIN (RFC 9114 §4.1).
func EarlyResponse(status int, header http.Header, body []byte) Action {
	return Action{Kind: replaysafetest.StreamRespond, At: OnHeaders, Status: status, Header: header, Body: body}
}

// WithResponse returns a copy of a with the final response status and
// body.
func (a Action) WithResponse(status int, body []byte) Action {
	a.Status = status
	a.Body = body
	return a
}

// WithAt returns a copy of a that runs at moment m.
func (a Action) WithAt(m Moment) Action {
	a.At = m
	return a
}

// Reject resets the stream in both directions with H3_REQUEST_REJECTED as
// soon as its HEADERS arrive, before its body is read.
func Reject() Action { return Action{Kind: replaysafetest.StreamRefuse, At: OnHeaders} }

// RejectAfterBody reads the whole request, then resets the stream with
// H3_REQUEST_REJECTED.
func RejectAfterBody() Action { return Reject().WithAt(AfterBody) }

// Reset reads the whole request, then resets the stream with code, such as
// http3.ErrCodeInternalError or http3.ErrCodeRequestCanceled.
func Reset(code http3.ErrCode) Action { return Action{Kind: replaysafetest.StreamReset, Code: code} }

// WithCode returns a copy of a with error code c.
func (a Action) WithCode(c http3.ErrCode) Action {
	a.Code = c
	return a
}

// GoAway sends, on the stream's HEADERS, a GOAWAY carrying id, and keeps
// the connection open.
func GoAway(id uint64) Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, GoAwayID: GoAwayID{ID: id}}
}

// WithClose returns a copy of a StreamGoAway that closes the connection
// with CONNECTION_CLOSE(Code) after the GOAWAY.
func (a Action) WithClose() Action {
	a.Close = true
	return a
}

// WithDrop returns a copy of a StreamGoAway that leaves the streams at or
// above its ID unanswered instead of rejecting them.
func (a Action) WithDrop() Action {
	a.Drop = true
	return a
}

// GoAwayRejecting sends, on the stream's HEADERS, a GOAWAY carrying this
// stream's own ID: proof for the client that this stream, and every later
// one, was not processed (RFC 9114 §5.2). The stream is then rejected
// with H3_REQUEST_REJECTED, unless WithClose or WithDrop says otherwise.
func GoAwayRejecting() Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, GoAwayID: GoAwayID{Relative: true}}
}

// GoAwayAfter sends, on the stream's HEADERS, a GOAWAY carrying the next
// client request stream ID (this one plus 4): this stream may have been
// processed, and is answered 200 once its request is complete; later ones
// are not processed (RFC 9114 §5.2).
func GoAwayAfter() Action {
	return Action{Kind: replaysafetest.StreamGoAway, At: OnHeaders, GoAwayID: GoAwayID{Relative: true, Delta: 4}}
}

// CloseConn closes the connection with CONNECTION_CLOSE(H3_NO_ERROR) as
// soon as the stream's HEADERS arrive, before its body is read.
func CloseConn() Action { return Action{Kind: replaysafetest.StreamClose, At: OnHeaders} }

// CloseConnAfterBody reads the whole request, then closes the connection
// with CONNECTION_CLOSE(H3_NO_ERROR) without answering.
func CloseConnAfterBody() Action { return CloseConn().WithAt(AfterBody) }

// StopSending answers 200 with an empty body as soon as the stream's
// HEADERS arrive, then sends STOP_SENDING(code) so that the client's
// upload fails with a stream error; zero code means H3_NO_ERROR, the code
// RFC 9114 §4.1 asks for when the response is complete.
func StopSending(code http3.ErrCode) Action {
	return Action{Kind: replaysafetest.StreamStopSending, At: OnHeaders, Code: code}
}

// WithoutResponse returns a copy of a StreamStopSending that sends no
// response, only STOP_SENDING, and then hangs for Delay.
func (a Action) WithoutResponse() Action {
	a.NoResponse = true
	return a
}

// StallRead reads the stream's HEADERS, stops reading for d, then reads
// the rest of the request and answers 200 with an empty body.
func StallRead(d time.Duration) Action { return Action{Kind: replaysafetest.StreamRespond, Stall: d} }

// WithStall returns a copy of a that stops reading the request for d
// after its HEADERS.
func (a Action) WithStall(d time.Duration) Action {
	a.Stall = d
	return a
}

// Hang never answers; the connection is closed after d (zero:
// Config.HangTimeout) unless the client or Server.Close ends it first.
func Hang(d time.Duration) Action { return Action{Kind: replaysafetest.StreamHang, Delay: d} }

// WithDelay returns a copy of a with Delay d.
func (a Action) WithDelay(d time.Duration) Action {
	a.Delay = d
	return a
}

// String describes the action briefly, for logs.
func (a Action) String() string {
	s := a.Kind.String() + "@" + a.At.String()
	switch a.Kind {
	case replaysafetest.StreamRespond:
		s += " status=" + strconv.Itoa(a.status())
	case replaysafetest.StreamReset:
		s += " code=" + a.code().String()
	case replaysafetest.StreamGoAway:
		if a.GoAwayID.Relative {
			sign := ""
			if a.GoAwayID.Delta >= 0 {
				sign = "+"
			}
			s += " id=stream" + sign + strconv.FormatInt(a.GoAwayID.Delta, 10)
		} else {
			s += " id=" + strconv.FormatUint(a.GoAwayID.ID, 10)
		}
		switch {
		case a.Close:
			s += " close=" + a.code().String()
		case a.Drop:
			s += " drop"
		}
	case replaysafetest.StreamClose:
		s += " code=" + a.code().String()
	case replaysafetest.StreamStopSending:
		s += " code=" + a.code().String()
		if a.NoResponse {
			s += " no-response"
		} else {
			s += " status=" + strconv.Itoa(a.status())
		}
	case replaysafetest.StreamHang:
		if a.Delay > 0 {
			s += " delay=" + a.Delay.String()
		}
	}
	for _, i := range a.Informational {
		s += " informational=" + strconv.Itoa(i.Status)
	}
	if a.Stall > 0 {
		s += " stall=" + a.Stall.String()
	}
	return s
}

func (a Action) status() int { return kit.OrOK(a.Status) }

func (a Action) code() http3.ErrCode {
	if a.Code == 0 {
		return http3.ErrCodeNoError
	}
	return a.Code
}

// ConnScript scripts one connection: Streams[j] handles the j-th
// request stream the client opens on it, Default every one after the list
// (replaysafetest.StreamScript).
type ConnScript = replaysafetest.StreamScript[Action]

// Every returns a script that applies a to every stream of a connection.
// Config{Default: Every(Reject())} is a server that rejects everything.
func Every(a Action) *ConnScript { return &ConnScript{Default: &a} }
