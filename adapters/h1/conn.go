package h1

import (
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
)

// Sink receives what a Conn observes while an attempt is attached to it.
// Its methods are called with the Conn's lock held, one at a time; they
// must not call back into the Conn. Recorder implements Sink.
type Sink interface {
	// Wrote reports a Write call that put at least one byte on the wire.
	Wrote()
	// WriteFailed reports the error of a failed Write call.
	WriteFailed(err error)
	// Read reports the result of a Read call.
	Read(n int, err error)
}

// WireCounter counts the bytes written to the connection beneath TLS, so
// that a Conn over a *tls.Conn knows whether a Write put anything on the
// wire even when TLS reports zero plaintext bytes written.
type WireCounter struct {
	net.Conn
	written atomic.Int64
}

// NewWireCounter wraps c.
func NewWireCounter(c net.Conn) *WireCounter { return &WireCounter{Conn: c} }

// Write writes to the underlying connection and counts what it accepted.
func (w *WireCounter) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if n > 0 {
		w.written.Add(int64(n))
	}
	return n, err
}

// Written returns the number of bytes written so far.
func (w *WireCounter) Written() int64 { return w.written.Load() }

// ErrStale is wrapped by the error Conn.Attach returns when a read on the
// idle connection returned: the peer closed it, reset it, or sent bytes
// nobody asked for. Such a connection must not carry a request.
var ErrStale = errors.New("h1: connection showed activity while idle")

// Conn is the connection net/http's client connection reads and writes:
// the TCP connection, or a *tls.Conn over a WireCounter. It reports to the
// attached Sink and remembers whether anything was read while no attempt
// was attached.
//
// net/http keeps a read pending on an idle connection, so a peer's close
// or reset of an idle connection ends that read; Conn notices it even
// before net/http has marked the connection closed.
type Conn struct {
	net.Conn
	wire *WireCounter

	mu       sync.Mutex
	sink     Sink
	idleRead bool  // a read returned while no sink was attached
	idleErr  error // its error, if any
	idleN    int   // its byte count

	trace *httptrace.ClientTrace // see ClientTrace
}

// NewConn wraps c. wire is the WireCounter beneath c when c is a TLS
// connection over it, and nil when c is the TCP connection itself.
func NewConn(c net.Conn, wire *WireCounter) *Conn {
	conn := &Conn{Conn: c, wire: wire}
	conn.trace = &httptrace.ClientTrace{
		WroteRequest:         conn.wroteRequest,
		GotFirstResponseByte: conn.gotFirstResponseByte,
		Got1xxResponse:       conn.got1xxResponse,
	}
	return conn
}

// ClientTrace returns the connection's httptrace hooks, made once: each
// feeds the Recorder attached when it runs, as Recorder.ClientTrace's
// would. A request's hooks all run while its attempt is attached: net/http
// calls them before the exchange ends, and a connection is pooled again
// only after a clean exchange, whose request was written (WroteRequest)
// and whose response was read (GotFirstResponseByte, Got1xxResponse).
//
// Install it only on a context that carries no other trace:
// httptrace.WithClientTrace composes the hooks it is given with the
// context's in place, which would change them for every later request.
func (c *Conn) ClientTrace() *httptrace.ClientTrace { return c.trace }

// recorder returns the attached Recorder, if any.
func (c *Conn) recorder() *Recorder {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, _ := c.sink.(*Recorder)
	return r
}

func (c *Conn) wroteRequest(info httptrace.WroteRequestInfo) {
	if r := c.recorder(); r != nil {
		r.wroteRequest(info)
	}
}

func (c *Conn) gotFirstResponseByte() {
	if r := c.recorder(); r != nil {
		r.gotFirstResponseByte()
	}
}

func (c *Conn) got1xxResponse(code int, h textproto.MIMEHeader) error {
	if r := c.recorder(); r != nil {
		return r.got1xxResponse(code, h)
	}
	return nil
}

// Attach makes s the sink for what the connection observes from now on.
// It fails, wrapping ErrStale, when a read returned since the connection
// was last detached (or created), and panics if a sink is attached
// already.
func (c *Conn) Attach(s Sink) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sink != nil {
		panic("h1: Conn.Attach with a sink already attached")
	}
	if c.idleRead {
		if c.idleErr != nil {
			return fmt.Errorf("%w: read failed: %w", ErrStale, c.idleErr)
		}
		return fmt.Errorf("%w: %d unsolicited bytes", ErrStale, c.idleN)
	}
	c.sink = s
	return nil
}

// Detach removes the sink; from now on a read that returns marks the
// connection stale.
func (c *Conn) Detach() {
	c.mu.Lock()
	c.sink = nil
	c.mu.Unlock()
}

// Abort closes the connection at once: beneath its TLS layer when it has
// one (the WireCounter given to NewConn), so that no TLS close_notify
// alert is written first. A peer that stopped reading would hold that
// write for up to the 5 s crypto/tls gives it, and whoever closes the
// TLS connection next (net/http, on the canceled request) would wait
// that long before the round trip returns. A later Close then only
// fails the alert's write on the closed connection.
func (c *Conn) Abort() error {
	if c.wire != nil {
		return c.wire.Close()
	}
	return c.Conn.Close()
}

// Stale reports whether a read returned while no sink was attached.
func (c *Conn) Stale() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idleRead
}

// Read reads from the connection and reports the result. An attached
// Recorder also learns that the read begins, which arms the bound of a
// response header section that one read did not bring whole
// (Recorder.BoundHeaderSections).
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if r, ok := c.sink.(*Recorder); ok {
		r.reading()
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n == 0 && err == nil {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sink == nil {
		if !c.idleRead {
			c.idleRead, c.idleErr, c.idleN = true, err, n
		}
		return n, err
	}
	c.sink.Read(n, err)
	return n, err
}

// Write writes to the connection and reports whether any byte reached the
// wire, and the error.
func (c *Conn) Write(p []byte) (int, error) {
	var before int64
	if c.wire != nil {
		before = c.wire.Written()
	}
	n, err := c.Conn.Write(p)
	wrote := n > 0 || (c.wire != nil && c.wire.Written() > before)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sink != nil {
		if wrote {
			c.sink.Wrote()
		}
		if err != nil {
			c.sink.WriteFailed(err)
		}
	}
	return n, err
}
