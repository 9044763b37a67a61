package driver

import (
	"crypto/tls"
	"errors"
	"io"
	"net"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe/transports/proxy"
)

// redialFor returns, for the start of a displaced request's resend, which
// dial errors leave it waiting for its route to come back
// (pool.Mux.Acquire's redial); nil for any other attempt, whose failed
// dial is final (RS04, spec/choices.md choice 1).
func redialFor(start resend) func(error) bool {
	if !start.displaced {
		return nil
	}
	return notAnswering
}

// notAnswering reports whether a dial that failed with err found the
// route not answering yet, as a restarting server or a path coming back
// does: the port refused or reset the connection, the handshake was cut
// or timed out, or a QUIC server refused the connection during its
// handshake (CONNECTION_REFUSED, RFC 9000 §20.1: quic-go's answer while
// its listener closes or its accept queue is full; the QUIC dial returns
// only after the handshake, so no request went out). Such a dial sent
// nothing, and the next may succeed. An
// answer that says no (ALPN without h2, a certificate or a TLS alert, a
// proxy refusing the CONNECT) is not waited out: it would say the same
// again.
func notAnswering(err error) bool {
	var (
		cert    *tls.CertificateVerificationError
		alert   tls.AlertError
		connect *proxy.ConnectError
	)
	switch {
	case errors.Is(err, errFallbackH1), errors.Is(err, errNotH2),
		errors.As(err, &cert), errors.As(err, &alert), errors.As(err, &connect):
		return false
	}
	var op *net.OpError
	var ne net.Error
	var qe *quic.TransportError
	if errors.As(err, &op) && op.Op == "remote error" {
		return false // crypto/tls reports a received alert so over TCP
	}
	return errors.As(err, &op) || errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &qe) && qe.Remote && qe.ErrorCode == quic.ConnectionRefused
}
