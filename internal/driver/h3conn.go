package driver

import (
	"context"
	"crypto/tls"
	"sync/atomic"
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
	tls   atomic.Pointer[tls.ConnectionState] // the handshake's, shared by the responses h3.Attempt.RoundTrip returns
	state pool.MuxState                       // guarded by the pool's lock
	obs   connObs

	// early is set when quic-go's DialEarly returned before the
	// handshake completed: the connection resumes a session and may carry
	// early data until then. rejected is set once the handshake completed
	// without the server accepting that early data (Used0RTT false):
	// quic-go then refuses every new stream (quic.Err0RTTRejected), so
	// the connection takes no more requests.
	early    bool
	rejected atomic.Bool
}

// handshook reports whether the connection's handshake completed.
func (c *h3Conn) handshook() bool {
	select {
	case <-c.qc.HandshakeComplete():
		return true
	default:
		return false
	}
}

// awaitHandshake waits for the connection's handshake to complete, for a
// request that may not go as early data; it returns the connection's
// error when it ends first, or ctx's.
func (c *h3Conn) awaitHandshake(ctx context.Context) error {
	select {
	case <-c.qc.HandshakeComplete():
		cs := c.qc.ConnectionState()
		if c.early && !cs.Used0RTT {
			c.rejected.Store(true) // settle may not have run yet
			return quic.Err0RTTRejected
		}
		c.tls.Store(&cs.TLS) // as settle does, before the request's response can take it
		return nil
	case <-c.qc.Context().Done():
		return context.Cause(c.qc.Context())
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// handshakeState returns the TLS state of the completed handshake, for a
// response to early data: a response came, so the handshake completes
// (quic-go may report it a moment after the response); nil if the
// connection ends first.
func (c *h3Conn) handshakeState() *tls.ConnectionState {
	select {
	case <-c.qc.HandshakeComplete():
	case <-c.qc.Context().Done():
		return c.tls.Load()
	}
	cs := c.qc.ConnectionState().TLS
	return &cs
}

// settle runs, for a connection dialed in its handshake, until the
// handshake ends or the connection does: it records the TLS state the
// responses carry and whether the server rejected the early data.
func (c *h3Conn) settle() {
	select {
	case <-c.qc.HandshakeComplete():
		cs := c.qc.ConnectionState()
		if !cs.Used0RTT {
			c.rejected.Store(true)
		}
		c.tls.Store(&cs.TLS)
	case <-c.qc.Context().Done():
	}
}

func (c *h3Conn) Mux() *pool.MuxState { return &c.state }

// Reserve reports whether c can take a new request: the connection is
// alive, the server sent no GOAWAY (RFC 9114 §5.2: no new requests
// after one), and it is not a connection dialed for early data whose
// handshake is still running (only the attempt that dialed it uses it
// then, so that no other request waits on it and sees its early data
// rejected) or ended in a rejection. quic-go needs no reservation.
func (c *h3Conn) Reserve() bool {
	return !c.Gone() && (!c.early || c.handshook())
}

// Pending reports false: quic-go makes a request wait for stream credit
// instead of the server refusing it.
func (c *h3Conn) Pending() bool { return false }

// Gone reports whether the connection ended, the server sent a GOAWAY,
// or the server rejected its early data: what makes Reserve refuse, for
// good.
func (c *h3Conn) Gone() bool {
	if c.qc.Context().Err() != nil || c.rejected.Load() {
		return true
	}
	_, goAway := c.watch.GoAway()
	return goAway
}

// ReadSince reports false: quic-go does not say when a connection last
// received a packet, so a displaced request's resend never takes an
// HTTP/3 connection older than the failure (choice 23).
func (c *h3Conn) ReadSince(time.Time) bool { return false }

// Close closes the QUIC connection with H3_NO_ERROR, then calls closed,
// when not nil.
func (c *h3Conn) Close(closed func()) {
	_, goAway := c.watch.GoAway()
	c.obs.shut(c.state.Key.Addr, muxCloseReason(goAway, c.qc.Context().Err() != nil, c.obs.retired.Load()))
	c.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	if closed != nil {
		closed()
	}
}
