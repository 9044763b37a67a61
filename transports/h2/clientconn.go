package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// closeFlushTimeout bounds the last writes (GOAWAY, final frames) of a
// connection that is ending, so that a peer that reads nothing cannot
// hold it open.
const closeFlushTimeout = time.Second

// readBufferSize is the size of the connection's read buffer.
const readBufferSize = 4 << 10

// ClientConn is one HTTP/2 client connection (RFC 9113) over a net.Conn
// the caller dialed: TLS with ALPN "h2" (the caller does the handshake)
// or cleartext with prior knowledge (h2c). It reports the evidence of
// every exchange (StreamEvents, typed errors) so that a caller can tell
// exactly whether a failed request may be sent again.
//
// Around the protocol state it runs exactly one reader goroutine and one
// writer goroutine; a request with a body gets one more, which reads
// the body, while it uploads. No lock is held across a socket write or
// read: Reserve, State and the other getters never wait on I/O.
//
// Duties of the caller:
//
//  1. Dial, complete TLS if any, and call NewClientConn once.
//  2. Before each request, call Reserve. If it returns true you own one
//     stream slot: pass it to exactly one RoundTrip, or give it back
//     with Unreserve. If it returns false, use another connection.
//  3. Call RoundTrip with the request and, if you want the evidence, a
//     StreamEvents (see its duties). Do not change the request while the
//     exchange runs.
//  4. Read the response body to io.EOF or Close it; either releases the
//     stream's buffers. Cancelling the request's context resets the
//     stream.
//  5. End the connection with Shutdown (graceful) or Close (at once).
//     Done is closed once its goroutines have returned; Err says why it
//     ended.
type ClientConn struct {
	nc       net.Conn
	fr       *http2.Framer
	src      frameSource
	tlsState *tls.ConnectionState
	cfg      config

	mu        sync.Mutex // guards m, the streams' state, and the fields below
	m         *machine
	writing   bool      // the writer is inside nc.Write
	timerAt   time.Time // when timer fires; zero when not armed
	closing   bool      // nc is being closed
	flushOnce bool      // the final-flush write deadline is set

	kick    chan struct{} // wakes the writer
	timer   *time.Timer
	ncOnce  sync.Once
	finalDL atomic.Bool // the final-flush deadline replaces WriteByteTimeout
	exits   atomic.Int32
	done    chan struct{}
	wbatch  outBuf // the writer's batch (writer goroutine only)
}

// NewClientConn starts an HTTP/2 connection on c: it queues the client
// preface, our SETTINGS (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE,
// MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE) and the connection
// WINDOW_UPDATE, and starts the reader and writer goroutines. It does
// not wait for the server. A TLS connection whose completed handshake
// negotiated a protocol other than "h2" is refused.
func NewClientConn(c net.Conn, cfg Config) (*ClientConn, error) {
	if c == nil {
		return nil, errors.New("h2: NewClientConn with a nil net.Conn")
	}
	cc := &ClientConn{
		nc:   c,
		cfg:  cfg.normalize(),
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if tc, ok := c.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		if cs.HandshakeComplete && cs.NegotiatedProtocol != "" && cs.NegotiatedProtocol != http2.NextProtoTLS {
			return nil, errors.New("h2: TLS negotiated protocol " + cs.NegotiatedProtocol + ", not h2")
		}
		if cs.HandshakeComplete {
			cc.tlsState = &cs
		}
	}
	cc.src.r = bufio.NewReaderSize(c, readBufferSize)
	cc.fr = http2.NewFramer(nil, &cc.src)
	cc.fr.SetMaxReadFrameSize(cc.cfg.maxReadFrame)
	cc.fr.SetReuseFrames()
	cc.m = newMachine(cc.cfg, time.Now())
	cc.timer = time.AfterFunc(time.Hour, cc.onTimer)
	cc.timer.Stop()
	cc.mu.Lock()
	cc.unlock()
	go cc.readLoop()
	go cc.writeLoop()
	return cc, nil
}

// unlock carries out what the machine asked for while the lock was held
// (wake the writer, close request bodies, arm the timer, close the
// connection), then releases the lock.
func (cc *ClientConn) unlock() {
	m := cc.m
	if len(m.out.buf) > 0 || m.finished {
		wake(cc.kick)
	}
	closes := m.bodyCloses
	m.bodyCloses = nil
	closeNC := m.finished && m.closeNow && cc.writing && !cc.closing
	if closeNC {
		cc.closing = true
	}
	flushDL := m.finished && !m.closeNow && !cc.flushOnce
	if flushDL {
		cc.flushOnce = true
	}
	if d, ok := m.deadline(); ok && (cc.timerAt.IsZero() || d.Before(cc.timerAt)) {
		cc.timerAt = d
		cc.timer.Reset(time.Until(d))
	}
	cc.mu.Unlock()
	for _, st := range closes {
		go st.req.Body.Close() // unblocks an upload stuck in Read; its error is the body's business
	}
	if closeNC {
		cc.closeNC() // breaks the writer's Write (a TLS Close then skips close_notify)
	}
	if flushDL {
		cc.finalDL.Store(true)
		_ = cc.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
	}
}

func (cc *ClientConn) closeNC() { cc.ncOnce.Do(func() { cc.nc.Close() }) }

// onTimer runs the machine's timers.
func (cc *ClientConn) onTimer() {
	cc.mu.Lock()
	cc.timerAt = time.Time{}
	cc.m.tick(time.Now())
	cc.unlock()
}

// exit is called by each of the two goroutines as it returns.
func (cc *ClientConn) exit() {
	if cc.exits.Add(1) == 2 {
		cc.timer.Stop()
		close(cc.done)
	}
}

// readLoop reads frames and feeds them to the machine until the
// connection ends.
func (cc *ClientConn) readLoop() {
	defer cc.exit()
	for { // each pass reads one frame; a read error or the end of the machine stops it
		fh, f, err := readFrame(cc.fr, &cc.src)
		now := time.Now()
		cc.mu.Lock()
		if err != nil {
			cc.m.framerError(now, fh, err, cc.fr.ErrorDetail())
		} else {
			cc.m.frame(now, f)
		}
		closed := cc.m.closed
		cc.unlock()
		if closed {
			return
		}
	}
}

// writeLoop writes what the machine queues, one batch per write, until
// the connection ends; then it closes the connection.
func (cc *ClientConn) writeLoop() {
	defer cc.exit()
	defer cc.closeNC()
	b := &cc.wbatch
	for { // each pass writes one batch
		cc.mu.Lock()
		for !cc.m.take(b) {
			if cc.m.finished {
				cc.mu.Unlock()
				return
			}
			cc.mu.Unlock()
			<-cc.kick
			cc.mu.Lock()
		}
		cc.writing = true
		cc.mu.Unlock()
		n, err := cc.write(b.buf)
		now := time.Now()
		cc.mu.Lock()
		cc.writing = false
		cc.m.written(now, b, n, err)
		b.reset(len(cc.m.out.buf) > 0 || cc.m.active > 0)
		cc.unlock()
		if err != nil {
			return
		}
	}
}

// write writes a batch, piece by piece; it returns the bytes accepted
// before an error.
func (cc *ClientConn) write(p []byte) (int, error) {
	n := 0
	for n < len(p) { // each pass writes one piece, so that the server can start on the first requests
		k, err := cc.writePiece(p[n:min(len(p), n+writePiece)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writePiece is the most one socket write takes from a batch: a large
// batch goes out in pieces, so that the server starts on its first
// frames sooner (measured: a few percent of throughput over h2c).
const writePiece = 16 << 10

// writePiece writes p, under WriteByteTimeout if set: the deadline is
// pushed back as long as the write makes progress.
func (cc *ClientConn) writePiece(p []byte) (int, error) {
	wbt := cc.cfg.writeByteTimeout
	if wbt <= 0 {
		return cc.nc.Write(p)
	}
	n := 0
	for { // each pass makes progress or returns
		if !cc.finalDL.Load() {
			_ = cc.nc.SetWriteDeadline(time.Now().Add(wbt))
		}
		k, err := cc.nc.Write(p[n:])
		n += k
		if err == nil || k == 0 || cc.finalDL.Load() {
			return n, err
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return n, err
		}
	}
}

// Reserve reserves one stream slot if the connection can take a new
// stream now: it is open, no GOAWAY was received or sent, fewer streams
// are open or reserved than min(the server's
// SETTINGS_MAX_CONCURRENT_STREAMS, Config.MaxConcurrentStreams), and
// stream identifiers remain. Until the server's SETTINGS arrive (see
// Settled) the server's limit is assumed to be 100. Reserve never
// blocks on I/O. Each true result must be followed by exactly one
// RoundTrip or Unreserve.
func (cc *ClientConn) Reserve() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.reserve()
}

// Unreserve gives back a slot taken by Reserve and not used.
func (cc *ClientConn) Unreserve() {
	cc.mu.Lock()
	cc.m.unreserve(time.Now())
	cc.unlock()
}

// Settled reports whether the server's first SETTINGS frame has been
// received and applied (and its acknowledgement queued). Before, the
// server's limits are assumed (100 streams, default windows), and
// request bodies and extended CONNECT requests wait.
func (cc *ClientConn) Settled() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.settled
}

// GoAway returns the GOAWAY the server sent (the latest, with the
// lowest last stream ID), if any. Its StreamID is zero.
func (cc *ClientConn) GoAway() (GoAwayError, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.goAway, cc.m.goAwayRecv
}

// LastRead returns when the connection last read a frame from the
// server (the connection's start before the first one): a pool can tell
// from it that the connection was alive after a moment, such as another
// connection's failure.
func (cc *ClientConn) LastRead() time.Time {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.lastRead
}

// Closed reports whether the connection has ended: no stream can go on
// (its goroutines may still be finishing; see Done).
func (cc *ClientConn) Closed() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.closed
}

// Done returns a channel closed once the connection has ended and its
// reader and writer goroutines have returned.
func (cc *ClientConn) Done() <-chan struct{} { return cc.done }

// Err returns why the connection ended, or nil while it runs: ErrClosed
// (Close), ErrShutdown (Shutdown completed), a *GoAwayError (the server
// sent GOAWAY and every stream finished), a *ConnectionError (a
// protocol error of the server's), a *ReadError, a *WriteError or a
// *TimeoutError.
func (cc *ClientConn) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.m.err
}

// ConnState is a snapshot of a connection's counts.
type ConnState struct {
	// ActiveStreams is the number of open streams.
	ActiveStreams int
	// Reserved is the number of reservations not yet used.
	Reserved int
	// MaxConcurrentStreams is the current limit on open streams:
	// min(the server's setting, or 100 before it, and
	// Config.MaxConcurrentStreams).
	MaxConcurrentStreams int
	// IdleSince is when the last stream ended (or the connection
	// started); zero while a stream is open.
	IdleSince time.Time
	// Settled reports that the server's SETTINGS were applied.
	Settled bool
	// GoAwayReceived reports that the server sent GOAWAY.
	GoAwayReceived bool
	// Closed reports that the connection has ended.
	Closed bool
}

// State returns a snapshot of the connection's counts. It never waits
// on I/O.
func (cc *ClientConn) State() ConnState {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	m := cc.m
	return ConnState{
		ActiveStreams:        m.active,
		Reserved:             m.reserved,
		MaxConcurrentStreams: m.limit(),
		IdleSince:            m.idleSince,
		Settled:              m.settled,
		GoAwayReceived:       m.goAwayRecv,
		Closed:               m.closed,
	}
}

// Shutdown closes the connection gracefully: it sends GOAWAY(NO_ERROR),
// takes no new stream, waits for the open streams to finish, then
// closes. If ctx ends first, it closes at once (Close) and returns the
// context's error.
func (cc *ClientConn) Shutdown(ctx context.Context) error {
	cc.mu.Lock()
	cc.m.shutdown(time.Now())
	cc.unlock()
	select {
	case <-cc.done:
		return nil
	case <-ctx.Done():
		cc.Close()
		return ctx.Err()
	}
}

// Close ends the connection at once: every stream not finished fails
// (with an *UnsentError wrapping ErrClosed if its HEADERS never reached
// the socket, ErrClosed otherwise). It never blocks on a stuck write:
// a write in progress is broken by closing the net.Conn. Close returns
// nil; Done reports when the goroutines have returned.
func (cc *ClientConn) Close() error {
	cc.mu.Lock()
	cc.m.close(time.Now(), ErrClosed)
	cc.unlock()
	return nil
}

// Ping sends a PING and waits for its acknowledgement, the end of the
// connection (its error), or the end of ctx.
func (cc *ClientConn) Ping(ctx context.Context) error {
	cc.mu.Lock()
	p, err := cc.m.ping()
	cc.unlock()
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if !p.acked {
			return cc.m.err
		}
		return nil
	case <-ctx.Done():
		cc.mu.Lock()
		cc.m.forgetPing(p)
		cc.unlock()
		return ctx.Err()
	}
}
