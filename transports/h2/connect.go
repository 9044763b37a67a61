package h2

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"
)

// tunnelBuffer bounds the bytes a tunnel holds in each direction between
// its caller and its stream: written by the caller and not yet taken by
// the upload, or received and not yet read by the caller. Past it the
// writer waits (and, downstream, the stream's window closes).
const tunnelBuffer = 64 << 10

// Tunnel opens a CONNECT tunnel (RFC 9113 §8.5) to target ("host:port")
// on a new stream and returns it as a net.Conn once the server answered
// 2xx. It uses one reservation made by Reserve, as RoundTrip does.
// header holds extra request fields (Proxy-Authorization, say); ctx
// bounds only the wait for the answer: once Tunnel has returned, the
// tunnel lives until it is closed or the stream ends.
//
// The response is returned in every case where one arrived. When its
// status is not 2xx the tunnel is nil, the error is nil and the stream
// has been closed: the caller reports the refusal. A failure before the
// answer (RoundTrip's errors: a reset or GOAWAY of the stream, the
// connection's end, ctx) means no tunnel was opened, so nothing sent
// through it reached the target.
func (cc *ClientConn) Tunnel(ctx context.Context, target string, header http.Header) (*TunnelConn, *http.Response, error) {
	tctx, cancel := context.WithCancelCause(context.Background())
	t := &TunnelConn{cc: cc, target: target, cancel: cancel, pumped: make(chan struct{})}
	t.up.init()
	t.down.init()
	req := &http.Request{
		Method:        http.MethodConnect,
		URL:           &url.URL{Host: target},
		Host:          target,
		Header:        header.Clone(),
		Body:          tunnelUpload{t},
		ContentLength: -1,
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req = req.WithContext(tctx)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	res, err := cc.RoundTrip(req, nil)
	if !stop() {
		// ctx ended: whatever RoundTrip returned, the stream is being
		// reset, and ctx's end is the reason.
		if err == nil {
			res.Body.Close()
		}
		t.up.closeRead(net.ErrClosed)
		return nil, nil, ctx.Err()
	}
	if err != nil {
		cancel(err)
		t.up.closeRead(net.ErrClosed)
		return nil, nil, err
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		res.Body.Close()
		cancel(errRefused)
		t.up.closeRead(net.ErrClosed)
		return nil, res, nil
	}
	t.body = res.Body
	go t.pump()
	return t, res, nil
}

var errRefused = errors.New("h2: CONNECT refused")

// TunnelConn is a CONNECT tunnel on one stream of a ClientConn: what the
// caller writes goes upstream as the request's DATA, the response's DATA
// is what it reads. It is a net.Conn with deadlines; CloseWrite ends the
// upstream (END_STREAM), Close resets the stream if it has not ended.
//
// Its errors are those of a TCP connection, so that a protocol on top
// (TLS, HTTP/1.1) and a classifier see a tunnel as they see a
// connection: io.EOF when the server ended the stream cleanly (the
// target closed); a *TunnelError, which matches syscall.ECONNRESET, when
// the stream was reset or the connection under it failed; net.ErrClosed
// after Close; os.ErrDeadlineExceeded past a deadline.
type TunnelConn struct {
	cc     *ClientConn
	target string
	cancel context.CancelCauseFunc // ends the stream's context: a reset
	body   io.ReadCloser           // the response body: downstream
	up     tunnelPipe              // caller → upload
	down   tunnelPipe              // pump → caller
	pumped chan struct{}           // closed when pump returns
	once   sync.Once
}

// TunnelError reports a tunnel that ended abnormally: its stream reset
// (by the proxy, for instance CONNECT_ERROR when the target's TCP
// connection failed) or its HTTP/2 connection lost. It matches
// syscall.ECONNRESET, as a reset TCP connection's error does.
type TunnelError struct {
	Target string
	Err    error
}

// Error names the target and the cause.
func (e *TunnelError) Error() string {
	return "h2: CONNECT tunnel to " + e.Target + " broken: " + errString(e.Err)
}

// Unwrap returns the cause and syscall.ECONNRESET.
func (e *TunnelError) Unwrap() []error { return []error{e.Err, syscall.ECONNRESET} }

// pump moves the response body into down until it ends, then closes it.
func (t *TunnelConn) pump() {
	defer close(t.pumped)
	defer t.body.Close()
	buf := make([]byte, 16<<10)
	for { // each pass moves one read
		n, err := t.body.Read(buf)
		if n > 0 {
			if _, werr := t.down.write(buf[:n], false); werr != nil {
				return // the caller closed the tunnel
			}
		}
		if err != nil {
			if err != io.EOF {
				err = &TunnelError{Target: t.target, Err: err}
				t.up.closeRead(err) // the stream is over: writes fail alike
			}
			t.down.closeWrite(err)
			return
		}
	}
}

// Read reads what the target sent through the tunnel.
func (t *TunnelConn) Read(p []byte) (int, error) { return t.down.read(p, true) }

// Write sends p to the target through the tunnel. It returns once p is
// queued for the stream, or fails when the stream can no longer carry
// it.
func (t *TunnelConn) Write(p []byte) (int, error) { return t.up.write(p, true) }

// CloseWrite ends the upstream half (END_STREAM once the queued bytes
// are sent); reading goes on.
func (t *TunnelConn) CloseWrite() error {
	t.up.closeWrite(io.EOF)
	return nil
}

// Close closes the tunnel: the stream is reset with CANCEL unless both
// halves already ended. It does not wait for the stream's end.
func (t *TunnelConn) Close() error {
	t.once.Do(func() {
		t.up.closeWrite(net.ErrClosed)
		t.down.closeRead(net.ErrClosed)
		t.cancel(net.ErrClosed)
	})
	return nil
}

// Done returns a channel closed once the tunnel's stream has stopped
// delivering: the response ended, failed, or the tunnel was closed.
func (t *TunnelConn) Done() <-chan struct{} { return t.pumped }

// Buffered returns how many bytes the server sent through the tunnel
// that the caller has not read yet and the tunnel holds.
func (t *TunnelConn) Buffered() int {
	t.down.mu.Lock()
	defer t.down.mu.Unlock()
	return t.down.w - t.down.r
}

// Target returns the "host:port" the tunnel was opened to.
func (t *TunnelConn) Target() string { return t.target }

// LocalAddr returns the local address of the HTTP/2 connection.
func (t *TunnelConn) LocalAddr() net.Addr { return t.cc.nc.LocalAddr() }

// RemoteAddr returns the tunnel's target as a "tcp" address.
func (t *TunnelConn) RemoteAddr() net.Addr { return tunnelAddr(t.target) }

// SetDeadline sets both deadlines.
func (t *TunnelConn) SetDeadline(d time.Time) error {
	t.down.setDeadline(d)
	t.up.setDeadline(d)
	return nil
}

// SetReadDeadline sets the deadline of Read.
func (t *TunnelConn) SetReadDeadline(d time.Time) error {
	t.down.setDeadline(d)
	return nil
}

// SetWriteDeadline sets the deadline of Write.
func (t *TunnelConn) SetWriteDeadline(d time.Time) error {
	t.up.setDeadline(d)
	return nil
}

type tunnelAddr string

func (a tunnelAddr) Network() string { return "tcp" }
func (a tunnelAddr) String() string  { return string(a) }

// tunnelUpload is the CONNECT request's body: the upstream half.
type tunnelUpload struct{ t *TunnelConn }

func (u tunnelUpload) Read(p []byte) (int, error) { return u.t.up.read(p, false) }

// Close is called when the upload ends; if it ended before the caller
// closed the upstream, the stream is over: writes fail as a reset TCP
// connection's do.
func (u tunnelUpload) Close() error {
	u.t.up.closeRead(&TunnelError{Target: u.t.target, Err: errUploadEnded})
	return nil
}

var errUploadEnded = errors.New("the stream stopped taking data")

// tunnelPipe is a bounded buffer between a writer and a reader, each of
// which can end it, with a deadline for the side the TunnelConn's caller
// is on.
type tunnelPipe struct {
	mu       sync.Mutex
	store    []byte    // capacity tunnelBuffer, allocated on first write
	r, w     int       // unread bytes are store[r:w]
	werr     error     // the writing side ended: reads return it once drained
	rerr     error     // the reading side ended: writes return it
	deadline time.Time // of the caller's side
	rwake    chan struct{}
	wwake    chan struct{}
}

func (p *tunnelPipe) init() {
	p.rwake = make(chan struct{}, 1)
	p.wwake = make(chan struct{}, 1)
}

// read reads what is buffered, waiting for bytes, the writer's end or
// (when timed) the deadline.
func (p *tunnelPipe) read(b []byte, timed bool) (int, error) {
	p.mu.Lock()
	for { // each pass reads, fails, or waits for a change
		switch {
		case p.rerr != nil:
			err := p.rerr
			p.mu.Unlock()
			return 0, err
		case p.w > p.r:
			n := copy(b, p.store[p.r:p.w])
			p.r += n
			if p.r == p.w {
				p.r, p.w = 0, 0
			}
			p.mu.Unlock()
			wake(p.wwake)
			return n, nil
		case p.werr != nil:
			err := p.werr
			p.mu.Unlock()
			return 0, err
		}
		var dl time.Time
		if timed {
			dl = p.deadline
		}
		p.mu.Unlock()
		if !waitUntil(p.rwake, dl) {
			return 0, os.ErrDeadlineExceeded
		}
		p.mu.Lock()
	}
}

// write buffers all of b, waiting for room, the reader's end or (when
// timed) the deadline.
func (p *tunnelPipe) write(b []byte, timed bool) (int, error) {
	n := 0
	p.mu.Lock()
	for len(b) > 0 { // each pass buffers what fits, fails, or waits
		switch {
		case p.werr != nil:
			p.mu.Unlock()
			return n, net.ErrClosed
		case p.rerr != nil:
			err := p.rerr
			p.mu.Unlock()
			return n, err
		}
		if p.store == nil {
			p.store = make([]byte, tunnelBuffer)
		}
		if p.w == len(p.store) && p.r > 0 {
			p.w = copy(p.store, p.store[p.r:p.w])
			p.r = 0
		}
		if k := copy(p.store[p.w:], b); k > 0 {
			p.w += k
			n += k
			b = b[k:]
			wake(p.rwake)
			continue
		}
		var dl time.Time
		if timed {
			dl = p.deadline
		}
		p.mu.Unlock()
		if !waitUntil(p.wwake, dl) {
			return n, os.ErrDeadlineExceeded
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return n, nil
}

// closeWrite ends the writing side: reads return err once drained.
func (p *tunnelPipe) closeWrite(err error) {
	p.mu.Lock()
	if p.werr == nil {
		p.werr = err
	}
	p.mu.Unlock()
	wake(p.rwake)
	wake(p.wwake)
}

// closeRead ends the reading side: buffered bytes are dropped and writes
// return err.
func (p *tunnelPipe) closeRead(err error) {
	p.mu.Lock()
	if p.rerr == nil {
		p.rerr = err
	}
	p.store, p.r, p.w = nil, 0, 0
	p.mu.Unlock()
	wake(p.rwake)
	wake(p.wwake)
}

func (p *tunnelPipe) setDeadline(d time.Time) {
	p.mu.Lock()
	p.deadline = d
	p.mu.Unlock()
	wake(p.rwake)
	wake(p.wwake)
}

// waitUntil waits for a wake on c; it reports false if the deadline
// (none when zero) passed first or had passed already.
func waitUntil(c chan struct{}, deadline time.Time) bool {
	if deadline.IsZero() {
		<-c
		return true
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	}
}
