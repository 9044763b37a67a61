package soak

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// handleProd answers one request under the prod model: the connection's
// end when this request completes its drawn life, else the request's own
// fault, else 200 with the body's digest.
func (s *server) handleProd(w http.ResponseWriter, r *http.Request, sc *sconn) {
	id := r.Header.Get(IDHeader)
	h1 := s.proto == "h1" || s.proto == "h1tls"
	copyNo := s.arrive(id, r.Method, sc, FaultNone)
	f, delay := prodRequestFault(s.seed, s.faults, id, copyNo)
	end := FaultNone
	if sc != nil && sc.reqs.Add(1) == sc.plan.life {
		// The connection's drawn end wins over the request's fault.
		end, f = sc.plan.end, FaultNone
		s.injected[end].Add(1)
		if !sc.plan.graceful() {
			plan := sc.plan
			time.AfterFunc(plan.after, func() { s.endConn(sc, plan.end) })
		}
	}
	if sc == nil && f != FaultNone && f.endsConn(s.proto) {
		f = FaultNone // no connection to end: should not happen
	}
	if f != FaultNone {
		s.injected[f].Add(1)
		s.setFault(id, copyNo, f)
	}

	if f == FaultRefused {
		// Before the request is read: no application processing.
		if h1 {
			s.endConn(sc, FaultAbruptFIN)
			return
		}
		s.resetStream(w, sc, http2.ErrCodeRefusedStream, http3.ErrCodeRequestRejected)
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, r.Body); err != nil {
		return // the client gave up on the upload, or the connection died: not a delivery
	}
	digest := hex.EncodeToString(h.Sum(nil))
	// A 425 or a 503 answers a request the server did not process: not a
	// delivery (RFC 8470 §5.2 lets any method be resent after a 425).
	if f != FaultTooEarly && f != FaultRetryAfter {
		s.record(id, copyNo, digest, false)
	}

	switch end {
	case FaultGoAway:
		s.endConn(sc, FaultGoAway)
		if sc.q != nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = sc.h3.Shutdown(ctx)
				sc.close(false)
			}()
		} else {
			// net/http closes after this response; x/net sends GOAWAY
			// with the last stream ID it took and closes once idle.
			w.Header().Set("Connection", "close")
		}
	case FaultIdleFIN:
		s.endConn(sc, FaultIdleFIN)
	}

	switch f {
	case FaultStreamReset, FaultStreamCancel:
		if h1 {
			s.endConn(sc, FaultNone)
		}
		if f == FaultStreamReset {
			s.resetStream(w, sc, http2.ErrCodeInternal, http3.ErrCodeInternalError)
		} else {
			s.resetStream(w, sc, http2.ErrCodeCancel, http3.ErrCodeRequestCanceled)
		}
		return
	case FaultDelay:
		time.Sleep(delay)
	case FaultRetryAfter, FaultTooEarly:
		// A whole answer, not a cut: its copy is not marked started, so
		// that a resend after a 425 is judged by its own end.
		if f == FaultRetryAfter {
			w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfterAsked/time.Second)))
			http.Error(w, "soak: try again", http.StatusServiceUnavailable)
		} else {
			http.Error(w, "soak: too early", http.StatusTooEarly)
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(digest)))
	if f == FaultCutMidResponse {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, digest[:len(digest)/2])
		s.flushStarted(w, sc, id, copyNo)
		if h1 {
			s.endConn(sc, FaultAbruptFIN)
			return
		}
		if sc != nil && sc.q != nil {
			// quic-go drops the stream's unsent data on a reset: give
			// the half body a moment to leave first.
			time.Sleep(2 * time.Millisecond)
		}
		s.resetStream(w, sc, http2.ErrCodeInternal, http3.ErrCodeInternalError)
		return
	}
	_, _ = io.WriteString(w, digest)
	s.flushStarted(w, sc, id, copyNo)
	if sc != nil {
		sc.completed.Add(1)
	}
}

// setFault records the request fault drawn for copy copyNo of id.
func (s *server) setFault(id string, copyNo int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.seen[id]; d != nil && copyNo >= 1 && copyNo <= len(d.arrivals) {
		d.arrivals[copyNo-1].fault = f
	}
}

// endConn ends sc as the fault model asks (FaultAbruptFIN, FaultAbruptRST
// close it now; FaultIdleFIN once idle; FaultGoAway and FaultNone leave
// the closing to the caller) and counts the end once per connection.
func (s *server) endConn(sc *sconn, how Fault) {
	if sc == nil {
		return
	}
	if sc.ended.CompareAndSwap(false, true) {
		s.connEnds.Add(1)
	}
	switch how {
	case FaultAbruptFIN:
		sc.close(false)
	case FaultAbruptRST:
		sc.close(true)
	case FaultIdleFIN:
		sc.idle.Store(uint32(FaultIdleFIN))
	}
}

// resetStream resets the request's stream with code h2code (HTTP/2) or
// h3code (HTTP/3, both directions); over HTTP/1.1, where no stream
// exists, the handler aborts and net/http closes the connection. It
// returns only over HTTP/3.
func (s *server) resetStream(w http.ResponseWriter, sc *sconn, h2code http2.ErrCode, h3code http3.ErrCode) {
	if hs, ok := w.(http3.HTTPStreamer); ok {
		if str, err := hs.HTTPStream(); err == nil {
			str.CancelRead(quic.StreamErrorCode(h3code))
			str.CancelWrite(quic.StreamErrorCode(h3code))
			return
		}
	}
	if sc != nil && sc.h2w != nil && h2code != http2.ErrCodeInternal {
		if id, ok := h2StreamID(w); ok {
			sc.h2w.rewrite(id, h2code)
		}
	}
	// x/net answers a handler's ErrAbortHandler with RST_STREAM
	// INTERNAL_ERROR, which h2Writer rewrites to the code asked for.
	panic(http.ErrAbortHandler)
}

// h2StreamID returns the stream ID of an x/net/http2 server's response
// writer, which the package does not export, by reflection.
func h2StreamID(w http.ResponseWriter) (uint32, bool) {
	v := reflect.ValueOf(w)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	rws := v.Elem().FieldByName("rws")
	if !rws.IsValid() || rws.Kind() != reflect.Pointer || rws.IsNil() {
		return 0, false
	}
	st := rws.Elem().FieldByName("stream")
	if !st.IsValid() || st.Kind() != reflect.Pointer || st.IsNil() {
		return 0, false
	}
	id := st.Elem().FieldByName("id")
	if !id.IsValid() || id.Kind() != reflect.Uint32 {
		return 0, false
	}
	return uint32(id.Uint()), true
}

// h2Writer is an HTTP/2 server connection whose writes are parsed frame
// by frame, so that the code of an RST_STREAM frame on a stream asked for
// is rewritten: x/net's server resets a stream only with INTERNAL_ERROR.
type h2Writer struct {
	net.Conn

	mu    sync.Mutex
	codes map[uint32]http2.ErrCode // stream → code to write
	watch map[uint32]func(bool)    // stream → told when its HEADERS frame is written (true) or fails (false)
	hdr   [9]byte                  // the frame header being read
	hdrN  int                      // bytes of hdr filled
	left  int                      // payload bytes of the current frame still to pass
	off   int                      // payload bytes of the current frame passed
	patch bool                     // the current frame is an RST_STREAM to rewrite
	code  [4]byte                  // its new code
}

// watchHeaders asks for f(true) just before the next HEADERS frame on
// stream id is written to the connection, and f(false) if that write
// then fails without writing a byte.
func (c *h2Writer) watchHeaders(id uint32, f func(bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch == nil {
		c.watch = map[uint32]func(bool){}
	}
	c.watch[id] = f
}

// rewrite asks for the next RST_STREAM on stream id to carry code.
func (c *h2Writer) rewrite(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.codes == nil {
		c.codes = map[uint32]http2.ErrCode{}
	}
	c.codes[id] = code
}

func (c *h2Writer) Write(p []byte) (int, error) {
	c.mu.Lock()
	out := p
	copied := false
	var told []func(bool)
	for i := 0; i < len(p); {
		if c.left == 0 && c.hdrN < 9 {
			n := copy(c.hdr[c.hdrN:], p[i:])
			c.hdrN += n
			i += n
			if c.hdrN < 9 {
				break
			}
			length := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			stream := binary.BigEndian.Uint32(c.hdr[5:9]) & 0x7fffffff
			c.left, c.off, c.patch = length, 0, false
			if http2.FrameType(c.hdr[3]) == http2.FrameHeaders {
				if f, ok := c.watch[stream]; ok {
					delete(c.watch, stream)
					told = append(told, f)
				}
			}
			if http2.FrameType(c.hdr[3]) == http2.FrameRSTStream && length == 4 {
				if code, ok := c.codes[stream]; ok {
					delete(c.codes, stream)
					c.patch = true
					binary.BigEndian.PutUint32(c.code[:], uint32(code))
				}
			}
			if c.left == 0 {
				c.hdrN = 0
			}
			continue
		}
		n := min(c.left, len(p)-i)
		if c.patch {
			if !copied {
				out = append([]byte(nil), p...)
				copied = true
			}
			for k := 0; k < n; k++ {
				out[i+k] = c.code[c.off+k]
			}
		}
		c.left -= n
		c.off += n
		i += n
		if c.left == 0 {
			c.hdrN = 0
		}
	}
	c.mu.Unlock()
	for _, f := range told {
		f(true)
	}
	n, err := c.Conn.Write(out)
	if n == 0 && err != nil {
		for _, f := range told {
			f(false)
		}
	}
	return n, err
}

// restartListener is a TCP listener that a server restart closes and
// opens again on the same address; Accept waits through the gap.
type restartListener struct {
	addr   net.Addr
	mu     sync.Mutex
	cond   *sync.Cond
	cur    net.Listener // nil while restarting
	closed bool
}

func listenRestartable() (*restartListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("soak: listen: %w", err)
	}
	l := &restartListener{addr: ln.Addr(), cur: ln}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

func (l *restartListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		for l.cur == nil && !l.closed {
			l.cond.Wait()
		}
		cur, closed := l.cur, l.closed
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		c, err := cur.Accept()
		if err == nil {
			return c, nil
		}
		l.mu.Lock()
		swapped := l.cur != cur && !l.closed
		l.mu.Unlock()
		if !swapped {
			return nil, err
		}
	}
}

// pause closes the listener: connections to its port are refused.
func (l *restartListener) pause() {
	l.mu.Lock()
	cur := l.cur
	l.cur = nil
	l.mu.Unlock()
	if cur != nil {
		_ = cur.Close()
	}
}

// resume listens on the address again.
func (l *restartListener) resume() error {
	var ln net.Listener
	var err error
	for range 50 { // the port may take a moment to free
		if ln, err = net.Listen("tcp", l.addr.String()); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("soak: listen again after a restart: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ln.Close()
	}
	l.cur = ln
	l.cond.Broadcast()
	return nil
}

func (l *restartListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.cond.Broadcast()
	if l.cur != nil {
		return l.cur.Close()
	}
	return nil
}

func (l *restartListener) Addr() net.Addr { return l.addr }

// restartEvery restarts the server every period until it closes.
func (s *server) restartEvery(period time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.restart()
		}
	}
}

// restart is a server restart: the listener closes, every connection is
// reset at once (QUIC: CONNECTION_CLOSE with H3_INTERNAL_ERROR), and
// after RestartRefusal the server listens on the same port again.
func (s *server) restart() {
	s.restarts.Add(1)
	s.injected[FaultRestart].Add(1)
	var udp net.PacketConn
	if s.rl != nil {
		s.rl.pause()
	} else {
		s.lnMu.Lock()
		ln := s.quicLn
		udp = s.udp
		s.quicLn = nil
		s.lnMu.Unlock()
		if ln != nil {
			_ = ln.Close()
		}
	}
	s.mu.Lock()
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
	if udp != nil {
		_ = udp.Close()
	}
	select {
	case <-time.After(RestartRefusal):
	case <-s.done:
		return
	}
	if s.rl != nil {
		if err := s.rl.resume(); err != nil {
			s.acceptErrs.Add(1)
		}
		return
	}
	for range 50 {
		u, ln, err := s.listenQUIC(udp.LocalAddr().String())
		if err == nil {
			s.lnMu.Lock()
			if s.isClosed() {
				s.lnMu.Unlock()
				_ = ln.Close()
				_ = u.Close()
				return
			}
			s.udp, s.quicLn = u, ln
			s.lnCond.Broadcast()
			s.lnMu.Unlock()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.acceptErrs.Add(1)
}
