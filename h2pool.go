package replaysafe

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/internal/adapters/h2"
)

// h2Conn is one HTTP/2 connection: x/net's ClientConn over the observed
// connection whose Wire shows internal/adapters/h2 the frames. Its pool is a
// muxPool[*h2Conn]: an attempt takes a stream on the first pooled
// connection whose ClientConn.ReserveNewRequest succeeds, which respects
// the server's SETTINGS_MAX_CONCURRENT_STREAMS; the pool's idle timer,
// not x/net's IdleConnTimeout, closes an idle connection (see
// newH2Factory).
type h2Conn struct {
	cc   *http2.ClientConn
	wire *h2.Wire
	tls  *tls.ConnectionState // nil for h2c
	conn net.Conn             // the observed connection, for GotConn
	pool muxState             // guarded by the pool's lock
	// waiting: reserve's last refusal was for the server's SETTINGS
	// (guarded by the pool's lock, see pending).
	waiting bool
	// settled: the server's SETTINGS arrived (see unsettled).
	settled atomic.Bool
}

func (c *h2Conn) mux() *muxState { return &c.pool }

// reserve takes a stream, except that a connection whose SETTINGS have
// not arrived yet takes only its first attempt: before them x/net
// assumes a concurrency limit the server may not have, and a server
// refuses the streams beyond its real one (REFUSED_STREAM), which for a
// resend would be a refusal no further resend may repair. Nor does a
// connection take more than h2.MaxConcurrentStreams attempts at once,
// however many streams its server allows, so that its Wire keeps the
// evidence of every one (spec/choices.md, choice 34).
func (c *h2Conn) reserve() bool {
	c.waiting = c.pool.active > 0 && c.unsettled()
	if c.waiting || c.pool.active >= h2.MaxConcurrentStreams {
		return false
	}
	return c.cc.ReserveNewRequest()
}

// pending reports whether reserve's last refusal was for the server's
// SETTINGS. It does not ask again: SETTINGS arriving in between would
// make a connection with room look full, and the pool dial for room it
// has.
func (c *h2Conn) pending() bool { return c.waiting }

// unsettled reports whether the server's SETTINGS have not arrived yet.
// Once they have, it reports false without asking x/net again (see gone
// for the cost of State).
func (c *h2Conn) unsettled() bool {
	if c.settled.Load() {
		return false
	}
	if st := c.cc.State(); st.MaxConcurrentStreams == 0 && !st.Closed && !st.Closing {
		return true
	}
	c.settled.Store(true)
	return false
}

// gone reports whether the connection closed or is closing (a GOAWAY
// arrived, x/net gave up on it). It is asked only after reserve refused:
// State takes x/net's write lock (v0.62 under Go 1.26), which a stream
// writing its frames holds across the system call, while the pool holds
// its own lock, so asking every time serialised every call of the pool
// behind the socket writes of the busiest connection.
func (c *h2Conn) gone() bool {
	st := c.cc.State()
	return st.Closed || st.Closing
}

// close closes the connection gracefully: at once when x/net runs no
// stream on it, else after a GOAWAY once its streams are done, or after
// h2DrainTimeout. The pool's count of attempts can reach zero while
// x/net still finishes a stream (a canceled or abandoned one being
// reset, an upload after its response), and ClientConn.Close would fail
// such a stream with "client connection force closed".
func (c *h2Conn) close() {
	if st := c.cc.State(); st.Closed || st.StreamsActive == 0 && st.StreamsPending == 0 {
		c.cc.Close()
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), h2DrainTimeout)
		defer cancel()
		if c.cc.Shutdown(ctx) != nil {
			c.cc.Close()
		}
	}()
}

// h2DrainTimeout bounds how long a closing HTTP/2 connection waits for
// x/net's last streams.
const h2DrainTimeout = 5 * time.Second
