package replaysafe

import (
	"net/http"
	"strconv"

	"github.com/replaysafe/replaysafe/fsm"
)

// AttemptStart describes a wire attempt as it begins (Observer's
// OnAttemptStart).
type AttemptStart struct {
	// Request is the caller's request.
	Request *http.Request
	// Number counts the call's wire attempts from 1, as AttemptReport's
	// Number does.
	Number int
	// Facts are the request facts the attempt will be decided on: their
	// Attempt says whether it is the automatic resend.
	Facts fsm.Request
	// Hedge reports a hedge (Retry.Hedge): a copy sent while another
	// copy of the call is in flight, from a goroutine of its own.
	Hedge bool
}

// ConnEventKind says what happened to a connection.
type ConnEventKind uint8

// Connection events.
const (
	// connEventNone is the zero value: never reported.
	connEventNone ConnEventKind = iota
	// ConnDialed: a new connection is ready for its first request.
	ConnDialed
	// ConnReused: an attempt took a pooled connection that carried an
	// earlier request.
	ConnReused
	// ConnClosed: a connection reported dialed closed (Reason says why).
	ConnClosed
)

var connEventNames = [...]string{"none", "dialed", "reused", "closed"}

// String returns "dialed", "reused", "closed", "none", or
// ConnEventKind(n) for an invalid value.
func (k ConnEventKind) String() string {
	if int(k) < len(connEventNames) {
		return connEventNames[k]
	}
	return "ConnEventKind(" + strconv.Itoa(int(k)) + ")"
}

// ConnCloseReason says why a connection closed.
type ConnCloseReason uint8

// Close reasons.
const (
	// connCloseNone is the zero value: not a close.
	connCloseNone ConnCloseReason = iota
	// ConnCloseIdle: the pool closed it while it carried no request
	// (CloseIdleConnections, IdleConnTimeout, MaxIdleConnsPerHost or
	// MaxIdleConns).
	ConnCloseIdle
	// ConnCloseDiscarded: an attempt ended it: its exchange failed
	// (fsm.ConnDiscard), or asked for a close (Connection: close,
	// DisableKeepAlives), or a resend took it out of the pool.
	ConnCloseDiscarded
	// ConnCloseGoAway: the server sent GOAWAY (HTTP/2, HTTP/3).
	ConnCloseGoAway
	// ConnCloseBroken: it was found closed or failed (by the peer or the
	// network) when it was to be used or closed.
	ConnCloseBroken
	// ConnCloseTakenOver: a 101 Switching Protocols response handed it
	// to the caller (HTTP/1.1): no longer the Transport's.
	ConnCloseTakenOver
)

var connCloseNames = [...]string{"none", "idle", "discarded", "goaway", "broken", "taken-over"}

// String returns the reason's name ("idle", "discarded", "goaway",
// "broken", "taken-over", "none"), or ConnCloseReason(n) for an invalid
// value.
func (r ConnCloseReason) String() string {
	if int(r) < len(connCloseNames) {
		return connCloseNames[r]
	}
	return "ConnCloseReason(" + strconv.Itoa(int(r)) + ")"
}

// ConnEvent is one event of a connection's life (Observer's OnConn).
type ConnEvent struct {
	Kind ConnEventKind
	// Addr is the origin's host:port the connection is for (through
	// proxies too).
	Addr string
	// Proto is the connection's protocol.
	Proto fsm.Proto
	// Reason is why a ConnClosed connection closed.
	Reason ConnCloseReason
}
