package replaysafetest

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Kind,CloseMode,StreamKind,Moment -linecomment -output=enum_string.go

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Kind says what the server does with one request. Every kind except
// KindRespond ends the connection (KindRespond too, if the client asked
// for that with "Connection: close" or HTTP/1.0).
type Kind uint8

// Action kinds. To add one: add a constant at the end with its name as a
// line comment, make kindCount count it, run go generate, add
// a handler in handlers (server.go) and, usually, a constructor.
const (
	// KindRespond writes a response (Status, Header, Body) and keeps the
	// connection open for the next request. The zero Action is a
	// KindRespond with status 200 and an empty body.
	KindRespond Kind = iota // respond
	// KindRespondClose writes a response carrying "Connection: close" and
	// then closes the connection with Close.
	KindRespondClose // respond-close
	// KindRespondThenCloseOnNext writes a response, keeps the connection
	// open, reads (and records) the next request in full and then closes
	// with Close without answering it: a close crossing the request.
	KindRespondThenCloseOnNext // respond-then-close-on-next
	// KindDrop closes the connection with Close without any response.
	KindDrop // drop
	// KindIdleClose writes a response and then closes the idle connection
	// with Close after Delay (zero: at once), or when Signal is closed.
	KindIdleClose // idle-close
	// KindPartialStatus writes Raw (a truncated status line such as
	// "HTTP/1.1 2") and closes with Close.
	KindPartialStatus // partial-status
	// KindInterim writes Raw (one or more 1xx responses, with no final
	// response) and closes with Close.
	KindInterim // interim
	// KindMalformed writes Raw (bytes that are not an HTTP response) and
	// closes with Close.
	KindMalformed // malformed
	// KindRaw writes Raw, whatever it is, and closes with Close.
	KindRaw // raw
	// KindHang never answers: it keeps reading (and recording) whatever
	// the client sends until the client goes away, the server is closed,
	// or Delay (zero: Config.HangTimeout) elapses; then it closes with
	// Close.
	KindHang // hang
	// KindEndlessInterim writes Raw (one 1xx response) again and again,
	// without end: until a write fails (the client went away), the
	// server is closed, or EndlessMaxResponses copies or
	// EndlessMaxDuration is reached; then it closes with Close.
	KindEndlessInterim // endless-interim
)

// kindCount is the number of valid values of Kind.
const kindCount = int(KindEndlessInterim) + 1

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return int(k) < kindCount }

// CloseMode says how the server closes a connection.
type CloseMode uint8

// Close modes. Over plain TCP CloseFIN and CloseFINNoNotify are the same.
const (
	// CloseFIN is an orderly close: over TLS a close_notify alert
	// (tls.Conn.Close), then a TCP FIN. The client reads io.EOF.
	CloseFIN CloseMode = iota // fin
	// CloseFINNoNotify closes the TCP connection (FIN) without sending a
	// TLS close_notify: an abrupt TLS close (truncation).
	CloseFINNoNotify // fin-no-notify
	// CloseRST sets SO_LINGER to 0 and closes, so the kernel sends a TCP
	// RST (and no close_notify). The client reads syscall.ECONNRESET.
	CloseRST // rst
)

// closeModeCount is the number of valid values of CloseMode.
const closeModeCount = int(CloseRST) + 1

// Valid reports whether m is one of the defined modes.
func (m CloseMode) Valid() bool { return int(m) < closeModeCount }

// Action is what the server does with one request on a connection. Build
// one with a constructor (OK, Respond, Drop, ...) and adjust it with the
// With methods; the fields are exported so scripts can also be written as
// literals. Fields a kind does not use are ignored.
type Action struct {
	// Kind selects the behaviour.
	Kind Kind
	// Status is the response status for the responding kinds; 0 means 200.
	Status int
	// Header holds extra response header fields, written in sorted key
	// order. Content-Length is added unless Header sets Content-Length or
	// Transfer-Encoding (or the status forbids a body).
	Header http.Header
	// Body is the response body; it is not sent in answer to HEAD.
	Body []byte
	// Raw is the bytes written by KindPartialStatus, KindInterim,
	// KindMalformed and KindRaw.
	Raw []byte
	// Close is how the connection is closed by the kinds that close it.
	Close CloseMode
	// Delay is the idle delay of KindIdleClose, the duration of
	// KindHang (zero: Config.HangTimeout), and how long KindRespond waits
	// before it writes the response (zero: at once; the server's Close
	// ends the wait).
	Delay time.Duration
	// Signal, if set, makes KindIdleClose close the connection when
	// Signal is closed instead of after Delay (see IdleCloseOn).
	Signal <-chan struct{}
}

// Wire bytes used by the constructors.
const (
	// PartialStatusBytes is what PartialStatus writes.
	PartialStatusBytes = "HTTP/1.1 2"
	// ContinueBytes is what Interim100 writes.
	ContinueBytes = "HTTP/1.1 100 Continue\r\n\r\n"
	// EarlyHintsBytes is what EarlyHints writes.
	EarlyHintsBytes = "HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
	// MalformedBytes is what Malformed writes.
	MalformedBytes = "garbage\r\n\r\n"
)

// OK answers 200 with body "ok" and keeps the connection open. It is the
// action for requests beyond a script's list when the script has no
// Default.
func OK() Action { return Respond(http.StatusOK, "ok") }

// WithBody returns a copy of a with the response body set.
func (a Action) WithBody(body string) Action {
	a.Body = []byte(body)
	return a
}

// Respond answers with status and body and keeps the connection open.
func Respond(status int, body string) Action {
	return Action{Kind: KindRespond, Status: status, Body: []byte(body)}
}

// WithStatus returns a copy of a with the response status set.
func (a Action) WithStatus(status int) Action {
	a.Status = status
	return a
}

// WithHeader returns a copy of a with value added to response field key.
// The receiver's Header is not modified.
func (a Action) WithHeader(key, value string) Action {
	a.Header = kit.WithField(a.Header, key, value)
	return a
}

// RespondClose answers 200 "ok" with "Connection: close", then closes the
// connection with mode.
func RespondClose(mode CloseMode) Action {
	a := OK()
	a.Kind, a.Close = KindRespondClose, mode
	return a
}

// RespondThenCloseOnNext answers 200 "ok" and keeps the connection open;
// when the next request arrives it reads it in full, records it, and
// closes the connection with mode without answering. The action consumes
// one entry of the script but handles two requests.
func RespondThenCloseOnNext(mode CloseMode) Action {
	a := OK()
	a.Kind, a.Close = KindRespondThenCloseOnNext, mode
	return a
}

// Drop reads the request (it is recorded, as every request is) and closes
// the connection with mode without answering.
func Drop(mode CloseMode) Action { return Action{Kind: KindDrop, Close: mode} }

// IdleClose answers 200 "ok" and then closes the kept-alive connection
// with mode after delay (zero: as soon as the response is written). Use
// Server.WaitConnClosed to wait for the close. If a request arrives within
// delay it is read, recorded and not answered; the close then happens at
// once.
func IdleClose(delay time.Duration, mode CloseMode) Action {
	a := OK()
	a.Kind, a.Close, a.Delay = KindIdleClose, mode, delay
	return a
}

// IdleCloseOn answers 200 "ok" and then closes the kept-alive connection
// with mode when signal is closed, so that a test decides exactly when an
// idle connection goes away. The wait is bounded by the connection's idle
// timeout and ends when the server is closed. The server does not read
// while it waits: a request that arrives before the signal stays unread
// in the kernel and is not recorded, and the close becomes an RST.
func IdleCloseOn(signal <-chan struct{}, mode CloseMode) Action {
	a := OK()
	a.Kind, a.Close, a.Signal = KindIdleClose, mode, signal
	return a
}

// PartialStatus writes PartialStatusBytes, a truncated status line, and
// closes the connection with mode.
func PartialStatus(mode CloseMode) Action {
	return Action{Kind: KindPartialStatus, Raw: []byte(PartialStatusBytes), Close: mode}
}

// Interim100 writes ContinueBytes, a lone 100 Continue, and closes the
// connection with mode.
func Interim100(mode CloseMode) Action {
	return Action{Kind: KindInterim, Raw: []byte(ContinueBytes), Close: mode}
}

// EarlyHints writes EarlyHintsBytes, a lone 103 Early Hints, and closes
// the connection with mode.
func EarlyHints(mode CloseMode) Action {
	return Action{Kind: KindInterim, Raw: []byte(EarlyHintsBytes), Close: mode}
}

// Bounds of a KindEndlessInterim flood, so that a test always ends.
const (
	// EndlessMaxResponses is the most interim responses one flood sends.
	EndlessMaxResponses = kit.EndlessMaxResponses
	// EndlessMaxDuration is the longest one flood lasts.
	EndlessMaxDuration = kit.EndlessMaxDuration
)

// EndlessInterim writes interim responses with status (100 or 103)
// without end (see KindEndlessInterim), then closes the connection with
// mode.
func EndlessInterim(status int, mode CloseMode) Action {
	raw := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n"
	if status == http.StatusEarlyHints {
		raw += "Link: </x>; rel=preload\r\n"
	}
	return Action{Kind: KindEndlessInterim, Raw: []byte(raw + "\r\n"), Close: mode}
}

// Malformed writes MalformedBytes, which is not an HTTP response, and
// closes the connection with mode.
func Malformed(mode CloseMode) Action {
	return Action{Kind: KindMalformed, Raw: []byte(MalformedBytes), Close: mode}
}

// RawThenClose writes raw and closes the connection with mode.
func RawThenClose(raw string, mode CloseMode) Action {
	return Action{Kind: KindRaw, Raw: []byte(raw), Close: mode}
}

// WithClose returns a copy of a with the close mode set.
func (a Action) WithClose(mode CloseMode) Action {
	a.Close = mode
	return a
}

// Hang never answers the request. Requests that follow on the connection
// are recorded and not answered either. It ends after d (zero:
// Config.HangTimeout), when the client closes, or when the server is
// closed, and then closes the connection with CloseFIN (see WithClose).
func Hang(d time.Duration) Action { return Action{Kind: KindHang, Delay: d} }

// WithDelay returns a copy of a with Delay set.
func (a Action) WithDelay(d time.Duration) Action {
	a.Delay = d
	return a
}

// String describes the action briefly, e.g. "respond(200)" or "drop(rst)".
func (a Action) String() string {
	switch a.Kind {
	case KindRespond:
		return fmt.Sprintf("%v(%d)", a.Kind, a.status())
	case KindRespondClose, KindRespondThenCloseOnNext:
		return fmt.Sprintf("%v(%d,%v)", a.Kind, a.status(), a.Close)
	case KindIdleClose, KindHang:
		if a.Signal != nil {
			return fmt.Sprintf("%v(on-signal,%v)", a.Kind, a.Close)
		}
		return fmt.Sprintf("%v(%v,%v)", a.Kind, a.Delay, a.Close)
	}
	return fmt.Sprintf("%v(%v)", a.Kind, a.Close)
}

func (a *Action) status() int { return kit.OrOK(a.Status) }

func (a *Action) validate() error {
	if !a.Kind.Valid() {
		return fmt.Errorf("invalid kind %v", a.Kind)
	}
	if !a.Close.Valid() {
		return fmt.Errorf("%v: invalid close mode %v", a.Kind, a.Close)
	}
	if a.Status != 0 && (a.Status < 100 || a.Status > 999) {
		return fmt.Errorf("%v: invalid status %d", a.Kind, a.Status)
	}
	if a.Delay < 0 {
		return fmt.Errorf("%v: negative delay %v", a.Kind, a.Delay)
	}
	return nil
}

// ConnScript scripts one connection: request j is handled by Actions[j]
// (RespondThenCloseOnNext handles two requests with one entry). Requests
// beyond the list use Default, or OK() if Default is nil.
type ConnScript struct {
	// Actions are used in order, one per request.
	Actions []Action
	// Default handles requests beyond Actions; nil means OK().
	Default *Action
	// IdleTimeout is how long the connection may wait for the first byte
	// of a request before the server closes it; zero means
	// Config.IdleTimeout.
	IdleTimeout time.Duration
	// IdleClose is how the connection is closed when IdleTimeout fires.
	IdleClose CloseMode
}

// Script returns a ConnScript running actions in order.
func Script(actions ...Action) ConnScript { return ConnScript{Actions: actions} }

func (cs *ConnScript) action(i int) Action {
	if i < len(cs.Actions) {
		return cs.Actions[i]
	}
	if cs.Default != nil {
		return *cs.Default
	}
	return OK()
}

func (cs *ConnScript) validate() error {
	for i := range cs.Actions {
		if err := cs.Actions[i].validate(); err != nil {
			return fmt.Errorf("action %d: %w", i, err)
		}
	}
	if cs.Default != nil {
		if err := cs.Default.validate(); err != nil {
			return fmt.Errorf("default action: %w", err)
		}
	}
	if !cs.IdleClose.Valid() {
		return fmt.Errorf("invalid idle close mode %v", cs.IdleClose)
	}
	if cs.IdleTimeout < 0 {
		return fmt.Errorf("negative idle timeout %v", cs.IdleTimeout)
	}
	return nil
}
