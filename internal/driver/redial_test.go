package driver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/replaysafe/replaysafe/internal/selfsigned"
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
		{"TLS alert received over TCP", remoteAlert(t), false},
	} {
		if got := notAnswering(c.err); got != c.want {
			t.Errorf("%s: notAnswering(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// remoteAlert returns the error a real TLS client handshake gets when the
// server answers with an alert (it speaks TLS 1.3 only, the client 1.2
// at most): over TCP crypto/tls reports it as a *net.OpError of Op
// "remote error", not as a tls.AlertError.
func remoteAlert(t *testing.T) error {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	go func() {
		defer s.Close()
		cert, _, err := selfsigned.New("127.0.0.1")
		if err != nil {
			return
		}
		tls.Server(s, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}).Handshake()
	}()
	err := tls.Client(c, &tls.Config{MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true}).Handshake()
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		t.Fatalf("handshake: %v, want a remote error", err)
	}
	return err
}
