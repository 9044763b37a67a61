package driver

import (
	"crypto/tls"
	"errors"
	"io"
	"net"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// redialFor returns what an attempt's failed dial means to the pool
// (pool.Mux.Acquire): a dial that found the route not answering leaves
// a displaced request's resend waiting for the route to come back, and
// any other attempt too while the route is restarting; otherwise a
// failed dial is final (RS04, spec/choices.md choices 1 and 23).
func redialFor(start resend) pool.Redialing {
	return pool.Redialing{NotAnswering: notAnswering, Displaced: start.displaced}
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
