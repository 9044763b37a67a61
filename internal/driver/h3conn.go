package driver

import (
	"crypto/tls"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// h3Conn is one HTTP/3 connection: quic-go's ClientConn over a QUIC
// connection that an adapters/h3 Watch observes. Its pool is a
// pool.Mux[*h3Conn]: QUIC multiplexes requests, and quic-go makes a request
// wait for stream credit when the server's MAX_STREAMS is reached, so one
// open connection per route takes every attempt, and the pool closes it
// after IdleConnTimeout without one.
type h3Conn struct {
	qc    *quic.Conn
	cc    *http3.ClientConn
	watch *h3.Watch
	tls   *tls.ConnectionState // the handshake's, shared by the responses h3.Attempt.RoundTrip returns
	state pool.MuxState        // guarded by the pool's lock
	obs   connObs
}

func (c *h3Conn) Mux() *pool.MuxState { return &c.state }

// Reserve reports whether c can take a new request: the connection is
// alive and the server sent no GOAWAY (RFC 9114 §5.2: no new requests
// after one). quic-go needs no reservation.
func (c *h3Conn) Reserve() bool {
	if c.qc.Context().Err() != nil {
		return false
	}
	_, goAway := c.watch.GoAway()
	return !goAway
}

// Pending reports false: quic-go makes a request wait for stream credit
// instead of the server refusing it.
func (c *h3Conn) Pending() bool { return false }

// Gone reports whether the connection ended or the server sent a
// GOAWAY: what makes Reserve refuse, for good.
func (c *h3Conn) Gone() bool { return !c.Reserve() }

// ReadSince reports false: quic-go does not say when a connection last
// received a packet, so a displaced request's resend never takes an
// HTTP/3 connection older than the failure (choice 23).
func (c *h3Conn) ReadSince(time.Time) bool { return false }

// Close closes the QUIC connection with H3_NO_ERROR.
func (c *h3Conn) Close() {
	_, goAway := c.watch.GoAway()
	c.obs.shut(muxCloseReason(goAway, c.qc.Context().Err() != nil, c.obs.retired.Load()))
	c.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
}
