package driver

import (
	"net/http"
	"sync/atomic"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// AttemptStart describes a wire attempt as it begins (the face's
// AttemptStart, field for field).
type AttemptStart struct {
	Request *http.Request
	Number  int
	Facts   fsm.Request
	Hedge   bool
}

// ConnEventKind says what happened to a connection (the face's
// ConnEventKind, value for value).
type ConnEventKind uint8

// Connection events.
const (
	ConnEventNone ConnEventKind = iota // the zero value, never reported
	ConnDialed                         // a new connection is ready for its first request
	ConnReused                         // an attempt took a pooled connection
	ConnClosed                         // a connection reported dialed closed
)

// CloseReason says why a connection closed (the face's ConnCloseReason,
// value for value).
type CloseReason uint8

// Close reasons.
const (
	CloseNone      CloseReason = iota // the zero value: not a close
	CloseIdle                         // the pool closed it idle
	CloseDiscarded                    // an attempt ended it, or retired it from the pool
	CloseGoAway                       // the server sent GOAWAY
	CloseBroken                       // it was found closed or failed
	CloseTakenOver                    // a 101 response handed it to the caller
)

// ConnEvent is one connection event (the face's ConnEvent, field for
// field).
type ConnEvent struct {
	Kind   ConnEventKind
	Addr   string
	Proto  fsm.Proto
	Reason CloseReason
}

// connObs is a connection's part in Config.OnConn: nil hook, nothing
// reported. The close is reported once, and only for a connection whose
// dial was. Its reports name the address of the connection's pool key,
// which the caller passes: the connection holds it already.
type connObs struct {
	on      func(ConnEvent)
	proto   fsm.Proto
	retired atomic.Bool // an attempt took it out of the pool (HTTP/2, HTTP/3)
	closed  atomic.Bool
}

// opened reports the dial of a connection for key.
func (t *Transport) opened(o *connObs, key pool.Key, proto fsm.Proto) {
	if t.cfg.OnConn == nil {
		return
	}
	o.on, o.proto = t.cfg.OnConn, proto
	o.on(ConnEvent{Kind: ConnDialed, Addr: key.Addr, Proto: o.proto})
}

// reused reports an attempt that took the pooled connection to addr.
func (o *connObs) reused(addr string) {
	if o.on != nil {
		o.on(ConnEvent{Kind: ConnReused, Addr: addr, Proto: o.proto})
	}
}

// shut reports the close of the connection to addr, once.
func (o *connObs) shut(addr string, why CloseReason) {
	if o.on != nil && o.closed.CompareAndSwap(false, true) {
		o.on(ConnEvent{Kind: ConnClosed, Addr: addr, Proto: o.proto, Reason: why})
	}
}

// muxCloseReason is why a multiplexed connection the pool closes is
// closing: the server's GOAWAY, a failed connection, an attempt that
// retired it, or else the pool's idle handling.
func muxCloseReason(goAway, failed, retired bool) CloseReason {
	switch {
	case goAway:
		return CloseGoAway
	case failed:
		return CloseBroken
	case retired:
		return CloseDiscarded
	}
	return CloseIdle
}
