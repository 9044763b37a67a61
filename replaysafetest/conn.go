package replaysafetest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// conn is one accepted connection, owned by its serve goroutine.
type conn struct {
	s      *Server
	idx    int
	raw    *net.TCPConn
	nc     net.Conn  // raw, or tc over TLS
	tc     *tls.Conn // nil without TLS
	script *ConnScript
	idle   time.Duration
	buf    []byte // received and not yet consumed
	rbuf   []byte // read scratch
	rerr   error  // read error that came with the last data
	seq    int    // next request's Seq
	closed bool   // closeWith has run
}

func (c *conn) logf(format string, args ...any) {
	c.s.core.Logf("conn %d: "+format, append([]any{c.idx}, args...)...)
}

func (c *conn) serve() {
	defer c.s.core.WG.Done()
	defer c.finish()
	c.logf("accepted from %v", c.raw.RemoteAddr())
	if c.tc != nil {
		c.tc.SetDeadline(time.Now().Add(c.s.cfg.ReadTimeout))
		if err := c.tc.Handshake(); err != nil {
			c.logf("tls handshake: %v", err)
			c.closeWith(CloseFINNoNotify)
			return
		}
		c.tc.SetDeadline(time.Time{})
		c.logf("tls %s alpn %q", tls.VersionName(c.tc.ConnectionState().Version), c.tc.ConnectionState().NegotiatedProtocol)
	}
	for i := 0; ; i++ {
		req, err := c.readRequest(c.idle, time.Time{})
		if err != nil {
			c.readFailed(req, err)
			return
		}
		a := c.script.action(i)
		c.logf("request %d: action %v", req.Seq, a)
		if !handlers[a.Kind](c, &a, req) {
			return
		}
	}
}

// readFailed ends the connection after readRequest failed in the main loop.
func (c *conn) readFailed(req *Received, err error) {
	var pe *parseError
	switch {
	case errors.As(err, &pe):
		c.write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		c.closeWith(CloseFIN)
	case req == nil && kit.IsTimeout(err):
		c.logf("idle timeout")
		c.closeWith(c.script.IdleClose)
	default:
		c.closeWith(CloseFIN)
	}
}

func (c *conn) finish() {
	c.raw.Close()
	c.s.markClosed(c)
	c.s.core.Update(func() { delete(c.s.active, c) })
}

// closeWith records whatever is buffered and closes the connection.
func (c *conn) closeWith(mode CloseMode) {
	if c.closed {
		return
	}
	c.closed = true
	c.drainBuffered()
	switch {
	case mode == CloseRST:
		c.raw.SetLinger(0)
		c.raw.Close()
	case mode == CloseFIN && c.tc != nil:
		c.tc.Close() // close_notify, then close
	default:
		c.raw.Close()
	}
	c.logf("closed (%v)", mode)
	c.s.markClosed(c)
}

// drainBuffered records the requests already read from the socket but not
// handled (pipelined behind a closing action), so none is lost.
func (c *conn) drainBuffered() {
	for len(c.buf) > 0 {
		p := newParser(c.s.cfg.MaxRequestBytes)
		done, err := p.step(c.buf)
		if err == nil && done {
			c.record(&p, nil)
			continue
		}
		if err == nil {
			err = errUnread
		}
		c.record(&p, err)
	}
}

var errUnread = errors.New("incomplete when the server closed the connection")

// readRequest reads and records one request. Until its first byte the wait
// is bounded by idle, then by Config.ReadTimeout; never beyond hard if set.
// It returns the complete request and nil; or nil and the read error when
// no byte arrived; or the recorded partial request and the error.
func (c *conn) readRequest(idle time.Duration, hard time.Time) (*Received, error) {
	p := newParser(c.s.cfg.MaxRequestBytes)
	deadline := time.Now().Add(idle)
	started := false
	for {
		if len(c.buf) > 0 {
			done, err := p.step(c.buf)
			if err != nil {
				return c.record(&p, err), err
			}
			if done {
				return c.record(&p, nil), nil
			}
			if !started {
				started = true
				deadline = time.Now().Add(c.s.cfg.ReadTimeout)
			}
		}
		dl := deadline
		if !hard.IsZero() && hard.Before(dl) {
			dl = hard
		}
		if err := c.fill(dl); err != nil {
			if len(c.buf) == 0 {
				return nil, err
			}
			return c.record(&p, err), err
		}
	}
}

// fill reads more bytes into c.buf, waiting until dl at most.
func (c *conn) fill(dl time.Time) error {
	if c.rerr != nil {
		return c.rerr
	}
	if err := c.nc.SetReadDeadline(dl); err != nil {
		return err
	}
	for range 1000 { // a TLS record may yield no data; bounded anyway by dl
		n, err := c.nc.Read(c.rbuf)
		c.buf = append(c.buf, c.rbuf[:n]...)
		if n > 0 {
			c.rerr = err
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// record records the request p has parsed from c.buf — complete if err is
// nil, else partial with everything buffered — and consumes its bytes.
func (c *conn) record(p *parser, err error) *Received {
	r := p.rec
	n := p.pos
	if err != nil {
		n = len(c.buf)
		r.Partial = true
		r.Err = c.describe(err)
	}
	r.Conn, r.Seq = c.idx, c.seq
	c.seq++
	r.Raw = bytes.Clone(c.buf[:n])
	c.buf = c.buf[:copy(c.buf, c.buf[n:])]
	c.s.record(r)
	if r.Partial {
		c.logf("recorded partial request %d (%s): %q", r.Seq, r.Err, r.Raw)
	} else {
		c.logf("recorded request %d: %s %s (%d bytes)", r.Seq, r.Method, r.Target, len(r.Raw))
	}
	return &r
}

func (c *conn) describe(err error) string {
	var pe *parseError
	select {
	case <-c.s.done:
		return "server closed"
	default:
	}
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return kit.ReadFailure(err)
}

func (c *conn) write(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(b)
	if err != nil {
		c.logf("write: %v", err)
	}
	return err
}

// A handler runs an action for req and reports whether the connection
// stays open for the next request. A handler that returns false has closed
// the connection (closeWith).
type handler func(c *conn, a *Action, req *Received) bool

var handlers = [kindCount]handler{
	KindRespond:                (*conn).respond,
	KindRespondClose:           (*conn).respondClose,
	KindRespondThenCloseOnNext: (*conn).respondThenCloseOnNext,
	KindDrop:                   (*conn).drop,
	KindIdleClose:              (*conn).idleClose,
	KindPartialStatus:          (*conn).writeThenClose,
	KindInterim:                (*conn).writeThenClose,
	KindMalformed:              (*conn).writeThenClose,
	KindRaw:                    (*conn).writeThenClose,
	KindHang:                   (*conn).hang,
	KindEndlessInterim:         (*conn).endlessInterim,
}

// respond answers and keeps the connection open unless the client asked
// for it to close.
func (c *conn) respond(a *Action, req *Received) bool {
	if a.Kind == KindRespond && a.Delay > 0 {
		// A late answer (Respond(...).WithDelay): the server closing ends
		// the wait, and a client that closed meanwhile finds the write
		// failing.
		t := time.NewTimer(a.Delay)
		select {
		case <-t.C:
		case <-c.s.done:
			t.Stop()
			c.closeWith(CloseFIN)
			return false
		}
	}
	closing := wantsClose(req)
	if c.write(response(a, req, closing)) != nil || closing {
		c.closeWith(CloseFIN)
		return false
	}
	return true
}

func (c *conn) respondClose(a *Action, req *Received) bool {
	c.write(response(a, req, true))
	c.closeWith(a.Close)
	return false
}

func (c *conn) respondThenCloseOnNext(a *Action, req *Received) bool {
	if !c.respond(a, req) {
		return false
	}
	next, err := c.readRequest(c.idle, time.Time{})
	if next == nil && kit.IsTimeout(err) {
		c.logf("idle timeout")
		c.closeWith(c.script.IdleClose)
		return false
	}
	c.closeWith(a.Close)
	return false
}

func (c *conn) drop(a *Action, _ *Received) bool {
	c.closeWith(a.Close)
	return false
}

func (c *conn) idleClose(a *Action, req *Received) bool {
	if !c.respond(a, req) {
		return false
	}
	switch {
	case a.Signal != nil:
		c.waitSignal(a.Signal)
	case a.Delay > 0:
		c.readRequest(a.Delay, time.Now().Add(a.Delay))
	}
	c.closeWith(a.Close)
	return false
}

// waitSignal waits until signal is closed, the idle timeout passes or the
// server is closed.
func (c *conn) waitSignal(signal <-chan struct{}) {
	t := time.NewTimer(c.idle)
	defer t.Stop()
	select {
	case <-signal:
	case <-t.C:
		c.logf("idle timeout waiting for the close signal")
	case <-c.s.done:
	}
}

func (c *conn) writeThenClose(a *Action, _ *Received) bool {
	c.write(a.Raw)
	c.closeWith(a.Close)
	return false
}

// endlessInterim writes a.Raw again and again, floodBatch copies per
// write, within the bounds of KindEndlessInterim, then closes.
func (c *conn) endlessInterim(a *Action, _ *Received) bool {
	const floodBatch = 64
	batch := bytes.Repeat(a.Raw, floodBatch)
	deadline := time.Now().Add(EndlessMaxDuration)
	sent := 0
	for sent < EndlessMaxResponses && time.Now().Before(deadline) {
		select {
		case <-c.s.done:
			c.closeWith(CloseRST)
			return false
		default:
		}
		if c.write(batch) != nil {
			break
		}
		sent += floodBatch
	}
	c.logf("wrote %d interim responses", sent)
	c.closeWith(a.Close)
	return false
}

func (c *conn) hang(a *Action, _ *Received) bool {
	d := a.Delay
	if d == 0 {
		d = c.s.cfg.HangTimeout
	}
	end := time.Now().Add(d)
	for {
		if _, err := c.readRequest(time.Until(end), end); err != nil {
			break
		}
	}
	c.closeWith(a.Close)
	return false
}

// wantsClose reports whether the client asked to close after the response.
func wantsClose(req *Received) bool {
	conn := req.Header["Connection"]
	if req.Proto == "HTTP/1.0" {
		return !hasToken(conn, "keep-alive")
	}
	return hasToken(conn, "close")
}

// response renders a's response to req.
func response(a *Action, req *Received, closing bool) []byte {
	status := a.status()
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(status))
	b.WriteString("\r\n")
	h := a.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	bodyAllowed := status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
	if bodyAllowed && h.Get("Content-Length") == "" && len(h.Values("Transfer-Encoding")) == 0 {
		h.Set("Content-Length", strconv.Itoa(len(a.Body)))
	}
	switch {
	case closing && !hasToken(h.Values("Connection"), "close"):
		h.Add("Connection", "close")
	case !closing && req.Proto == "HTTP/1.0" && !hasToken(h.Values("Connection"), "keep-alive"):
		h.Add("Connection", "keep-alive")
	}
	for k, v := range kit.SortedFields(h) {
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(v)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	if bodyAllowed && req.Method != http.MethodHead {
		b.Write(a.Body)
	}
	return b.Bytes()
}
