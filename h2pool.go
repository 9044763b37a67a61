package replaysafe

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"crypto/tls"
	"net"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/internal/adapters/h2"
)

// h2Conn is one HTTP/2 connection: x/net's ClientConn over the observed
// connection whose Wire shows internal/adapters/h2 the frames. Its pool is a
// muxPool[*h2Conn]: an attempt takes a stream on the first pooled
// connection whose ClientConn.ReserveNewRequest succeeds, which respects
// the server's SETTINGS_MAX_CONCURRENT_STREAMS; x/net closes idle
// connections itself (its IdleConnTimeout).
type h2Conn struct {
	cc   *http2.ClientConn
	wire *h2.Wire
	tls  *tls.ConnectionState // nil for h2c
	conn net.Conn             // the observed connection, for GotConn
	pool muxState             // guarded by the pool's lock
}

func (c *h2Conn) mux() *muxState { return &c.pool }

func (c *h2Conn) reserve() bool { return c.cc.ReserveNewRequest() }

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

func (c *h2Conn) close() { c.cc.Close() }
