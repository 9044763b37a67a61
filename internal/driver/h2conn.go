package driver

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// h2Conn is one HTTP/2 connection: x/net's ClientConn over the observed
// connection whose Wire shows adapters/h2 the frames. Its pool is a
// pool.Mux[*h2Conn]: an attempt takes a stream on the first pooled
// connection whose ClientConn.ReserveNewRequest succeeds, which respects
// the server's SETTINGS_MAX_CONCURRENT_STREAMS; the pool's idle timer,
// not x/net's IdleConnTimeout, closes an idle connection (see
// newH2Factory).
type h2Conn struct {
	cc    *http2.ClientConn
	wire  *h2.Wire
	tls   *tls.ConnectionState // nil for h2c
	conn  net.Conn             // the observed connection, for GotConn
	state pool.MuxState        // guarded by the pool's lock
	// waiting: reserve's last refusal was for the server's SETTINGS
	// (guarded by the pool's lock, see pending).
	waiting bool
}

func (c *h2Conn) Mux() *pool.MuxState { return &c.state }

// Reserve takes a stream, except that a connection whose SETTINGS have
// not arrived yet takes only its first attempt: before them x/net
// assumes a concurrency limit the server may not have, and a server
// refuses the streams beyond its real one (REFUSED_STREAM), which for a
// resend would be a refusal no further resend may repair. Nor does a
// connection take more than h2.MaxConcurrentStreams attempts at once,
// however many streams its server allows, so that its Wire keeps the
// evidence of every one (spec/choices.md, choice 34).
//
// The pool calls reserve, pending and gone under its lock, for every
// route: none of them asks x/net's ClientConn.State, which takes x/net's
// write lock, held across each socket write. A server that stopped
// reading would hold it for as long as it stops, and the whole pool with
// it. The Wire answers instead.
func (c *h2Conn) Reserve() bool { return c.reserveAt(c.state.Active()) }

// reserveAt is Reserve with active attempts running on the connection.
func (c *h2Conn) reserveAt(active int) bool {
	c.waiting = active > 0 && !c.wire.Settled() && !c.wire.Closed()
	if c.waiting || active >= h2.MaxConcurrentStreams {
		return false
	}
	return c.cc.ReserveNewRequest()
}

// Pending reports whether reserve's last refusal was for the server's
// SETTINGS. It does not ask again: SETTINGS arriving in between would
// make a connection with room look full, and the pool dial for room it
// has.
func (c *h2Conn) Pending() bool { return c.waiting }

// Gone reports whether the connection closed or the server sent a
// GOAWAY. A connection x/net stopped using for another reason (an error
// that left it unfit for reuse) looks full instead: attempts dial
// around it, and it closes once idle.
func (c *h2Conn) Gone() bool {
	_, goAway := c.wire.GoAway()
	return goAway || c.wire.Closed()
}

// Close closes the connection gracefully, in the background: a GOAWAY,
// then the close once x/net's streams are done, or after h2DrainTimeout.
// The pool's count of attempts can reach zero while x/net still finishes
// a stream (a canceled or abandoned one being reset, an upload after its
// response), and ClientConn.Close would fail such a stream with "client
// connection force closed". Nothing waits here for x/net's write lock,
// which a write to a server that stopped reading holds: the GOAWAY waits
// for it in the background, and the timeout's ClientConn.Close, which
// does not take it, ends that write.
func (c *h2Conn) Close() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), h2DrainTimeout)
		defer cancel()
		stop := context.AfterFunc(ctx, func() { c.cc.Close() })
		defer stop()
		if c.cc.Shutdown(ctx) != nil {
			c.cc.Close()
		}
	}()
}

// h2DrainTimeout bounds how long a closing HTTP/2 connection waits for
// x/net's last streams.
const h2DrainTimeout = 5 * time.Second
