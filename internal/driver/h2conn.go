package driver

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// h2Conn is one HTTP/2 connection: our own ClientConn (transports/h2),
// which reports each stream's evidence first-hand. Its pool is a
// pool.Mux[*h2Conn]: an attempt takes a stream on the first pooled
// connection whose Reserve succeeds (within the server's
// SETTINGS_MAX_CONCURRENT_STREAMS and the connection's own cap); the
// pool's idle timer closes an idle connection.
type h2Conn struct {
	cc    *h2.ClientConn
	tls   *tls.ConnectionState // nil for h2c
	conn  net.Conn             // what the connection runs over, for GotConn
	state pool.MuxState        // guarded by the pool's lock
	// waiting: Reserve's last refusal was for the server's SETTINGS
	// (guarded by the pool's lock, see Pending).
	waiting bool
	obs     connObs
}

func (c *h2Conn) Mux() *pool.MuxState { return &c.state }

// Reserve takes a stream, except that a connection whose SETTINGS have
// not arrived yet takes only its first attempt: before them the client
// assumes a concurrency limit the server may not have, and a server
// refuses the streams beyond its real one (REFUSED_STREAM), which for a
// resend would be a refusal no further resend may repair (spec/
// choices.md, choice 24). The connection's Reserve reads its state under
// its own lock, which no socket write holds: the pool, which calls it
// under its lock for every route, never waits on I/O.
func (c *h2Conn) Reserve() bool { return c.reserveAt(c.state.Active()) }

// reserveAt is Reserve with active attempts running on the connection.
func (c *h2Conn) reserveAt(active int) bool {
	c.waiting = active > 0 && !c.cc.Settled() && !c.cc.Closed()
	if c.waiting {
		return false
	}
	return c.cc.Reserve()
}

// Pending reports whether Reserve's last refusal was for the server's
// SETTINGS. It does not ask again: SETTINGS arriving in between would
// make a connection with room look full, and the pool dial for room it
// has.
func (c *h2Conn) Pending() bool { return c.waiting }

// Gone reports whether the connection closed or the server sent a
// GOAWAY: it takes no new stream again.
func (c *h2Conn) Gone() bool {
	_, goAway := c.cc.GoAway()
	return goAway || c.cc.Closed()
}

// ReadSince reports whether the connection read a frame after t.
func (c *h2Conn) ReadSince(t time.Time) bool { return c.cc.LastRead().After(t) }

// Close closes the connection gracefully, in the background: a GOAWAY,
// then the close once its streams are done, or after h2DrainTimeout. The
// pool's count of attempts can reach zero while a stream still ends (a
// canceled or abandoned one being reset, a CONNECT tunnel's upload), and
// an abrupt close would fail it.
// closed, when not nil, runs once the socket is closed and the
// connection's goroutines returned, or h2DrainTimeout passed.
func (c *h2Conn) Close(closed func()) {
	_, goAway := c.cc.GoAway()
	c.obs.shut(c.state.Key.Addr, muxCloseReason(goAway, c.cc.Closed(), c.obs.retired.Load()))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), h2DrainTimeout)
		defer cancel()
		c.cc.Shutdown(ctx)
		c.cc.Close()
		if closed == nil {
			return
		}
		// The reader returns once the socket is closed: the connection
		// counts against the limit until then (or the drain's bound).
		select {
		case <-c.cc.Done():
		case <-ctx.Done():
		}
		closed()
	}()
}

// h2DrainTimeout bounds how long a closing HTTP/2 connection waits for
// its last streams.
const h2DrainTimeout = 5 * time.Second
