package kit

import "time"

// Defaults the scripted servers share; replaysafetest exports them.
const (
	// HandshakeTimeout bounds a handshake (TLS or QUIC) and, over
	// HTTP/2, the client preface.
	HandshakeTimeout = 5 * time.Second
	// IdleTimeout is how long a connection may stay silent.
	IdleTimeout = 30 * time.Second
	// WriteTimeout bounds each write of a stream server.
	WriteTimeout = 5 * time.Second
	// MaxBodyBytes bounds the body recorded for one stream.
	MaxBodyBytes = 1 << 20
	// HangTimeout bounds Hang actions that set no duration.
	HangTimeout = 30 * time.Second
	// WaitTimeout bounds the Wait methods when their context has no
	// deadline.
	WaitTimeout = 10 * time.Second
	// Lifetime is how long a stream server runs before it closes itself.
	Lifetime = 2 * time.Minute
)

// StreamLimits points at the Config fields that h2server and h3server
// fill with the same defaults.
type StreamLimits struct {
	Handshake, Idle, Write, Hang, Wait, Lifetime *time.Duration
	MaxBody                                      *int
}

// Fill sets every zero (or negative) field l points at to its default.
func (l StreamLimits) Fill() {
	Default(l.Handshake, HandshakeTimeout)
	Default(l.Idle, IdleTimeout)
	Default(l.Write, WriteTimeout)
	Default(l.Hang, HangTimeout)
	Default(l.Wait, WaitTimeout)
	Default(l.Lifetime, Lifetime)
	Default(l.MaxBody, MaxBodyBytes)
}
