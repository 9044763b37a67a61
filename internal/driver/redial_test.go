package driver

import (
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/quic-go/quic-go"
)

// TestNotAnswering: the dial errors a displaced resend waits out (the
// route does not answer yet) and those that end its wait (the route
// answered no), spec/choices.md choice 23.
func TestNotAnswering(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("replaysafe: QUIC handshake with 127.0.0.1:1: %w", err) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"TCP refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"QUIC handshake timeout", wrap(&quic.HandshakeTimeoutError{}), true},
		{"QUIC CONNECTION_REFUSED from the server", wrap(&quic.TransportError{ErrorCode: quic.ConnectionRefused, Remote: true}), true},
		{"QUIC CONNECTION_REFUSED of our own", wrap(&quic.TransportError{ErrorCode: quic.ConnectionRefused}), false},
		{"QUIC PROTOCOL_VIOLATION", wrap(&quic.TransportError{ErrorCode: quic.ProtocolViolation, Remote: true}), false},
		{"TLS alert", wrap(tls.AlertError(40)), false},
	} {
		if got := notAnswering(c.err); got != c.want {
			t.Errorf("%s: notAnswering(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
