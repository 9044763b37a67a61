package replaysafetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Defaults for the zero fields of Config. The hang and wait defaults
// are those of every scripted server.
const (
	// DefaultReadTimeout bounds the reading of one request once its first
	// byte has arrived, and the TLS handshake.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds each write.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultHangTimeout bounds Hang actions that set no duration.
	DefaultHangTimeout = kit.HangTimeout
	// DefaultWaitTimeout bounds the Wait methods when their context has no
	// deadline.
	DefaultWaitTimeout = kit.WaitTimeout
	// DefaultMaxRequestBytes bounds the size of one request as received.
	DefaultMaxRequestBytes = 1 << 20
)

// Defaults the stream servers, h2server and h3server, give the zero
// fields of their Config; they share DefaultHangTimeout and
// DefaultWaitTimeout too.
const (
	// DefaultStreamHandshakeTimeout bounds the TLS handshake and the
	// arrival of the HTTP/2 client preface, or the QUIC handshake.
	DefaultStreamHandshakeTimeout = kit.HandshakeTimeout
	// DefaultStreamIdleTimeout is how long a connection may go without a
	// frame from the client (HTTP/2), or the QUIC idle timeout and how
	// long a request stream may go without a byte from the client while
	// the server reads it (HTTP/3).
	DefaultStreamIdleTimeout = kit.IdleTimeout
	// DefaultStreamWriteTimeout bounds each frame or stream write.
	DefaultStreamWriteTimeout = kit.WriteTimeout
	// DefaultStreamLifetime is how long a stream server runs before it
	// closes itself.
	DefaultStreamLifetime = kit.Lifetime
	// DefaultStreamMaxBodyBytes bounds the body recorded for one stream.
	DefaultStreamMaxBodyBytes = kit.MaxBodyBytes
)

// ErrClosed is returned by the Wait methods when the server has been
// closed and the awaited condition can no longer become true.
var ErrClosed = errors.New("scripted: server closed")

// Config configures a Server. The zero Config is a plain-TCP server that
// answers every request with 200 "ok".
type Config struct {
	// TLS makes the server speak TLS with a fresh self-signed certificate
	// (see Server.ClientTLSConfig). ALPN offers only "http/1.1".
	TLS bool
	// Conns scripts connections in accept order: Conns[i] drives
	// connection i. Connections beyond the list use Default, or else the
	// last entry, or else an empty script (every request gets OK()).
	Conns []ConnScript
	// Default scripts the connections beyond Conns; nil means the last
	// entry of Conns.
	Default *ConnScript
	// ReadTimeout bounds reading one request from its first byte and the
	// TLS handshake; zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// IdleTimeout is how long a connection may wait for the first byte of
	// a request before the server closes it (see ConnScript.IdleClose);
	// zero means ReadTimeout.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write; zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// HangTimeout bounds Hang actions without a duration; zero means
	// DefaultHangTimeout.
	HangTimeout time.Duration
	// WaitTimeout bounds the Wait methods when their context has no
	// deadline; zero means DefaultWaitTimeout.
	WaitTimeout time.Duration
	// MaxRequestBytes bounds the raw size of one request; a larger one is
	// answered 400 and recorded as partial. Zero means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// Logf, if set, receives a line per connection event (for t.Logf).
	Logf func(format string, args ...any)
}

// Received is one request as the server received it.
type Received struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Seq is the request's position on its connection, from 0. Complete
	// and partial requests share the numbering.
	Seq int
	// Method, Target and Proto are the request line's three parts; empty
	// in a partial request that ended before them.
	Method, Target, Proto string
	// Header holds the parsed header fields (canonical keys).
	Header http.Header
	// Trailer holds the trailer fields of a chunked body, or nil.
	Trailer http.Header
	// Body is the body with any chunked coding removed.
	Body []byte
	// Raw is the request exactly as received, framing and all. For a
	// partial request it is everything received from its first byte.
	Raw []byte
	// Partial marks a request that never completed: the connection
	// closed or timed out mid-request, the request was malformed or too
	// large, or the server closed the connection with it unread.
	Partial bool
	// Err says why a partial request is partial; empty when complete.
	Err string
}

func (r Received) clone() Received {
	r.Header = r.Header.Clone()
	r.Trailer = r.Trailer.Clone()
	r.Body = bytes.Clone(r.Body)
	r.Raw = bytes.Clone(r.Raw)
	return r
}

// Server is a running scripted origin. Its methods are safe for
// concurrent use.
type Server struct {
	cfg      Config
	listener net.Listener
	tlsCfg   *tls.Config
	cert     kit.Cert
	done     chan struct{} // closed when Close starts
	closeErr error         // what closing the listener returned

	core    kit.Core[Received, connState] // complete requests, connections, waiters, Close
	active  map[*conn]struct{}            // guarded by core.Mu
	partial []*Received                   // guarded by core.Mu
}

// connState is the server's record of one connection, guarded by
// core.Mu.
type connState struct {
	closed bool // the server has closed its side
}

// Start starts a server on 127.0.0.1 with a kernel-chosen port.
func Start(cfg Config) (*Server, error) {
	if err := normalize(&cfg); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, done: make(chan struct{}), active: map[*conn]struct{}{}}
	s.core.Init(kit.CoreSpec[Received, connState]{
		Name: "scripted", WaitTimeout: cfg.WaitTimeout, Logf: cfg.Logf, ErrClosed: ErrClosed,
		Clone:  func(r *Received) Received { return r.clone() },
		ConnOf: func(r *Received) int { return r.Conn },
		Closed: func(c *connState) bool { return c.closed },
	})
	if cfg.TLS {
		var err error
		if s.tlsCfg, s.cert, err = kit.NewCert("replaysafe scripted test server", []string{"http/1.1"}, tls.VersionTLS12); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("scripted: listen: %w", err)
	}
	s.listener = ln
	s.core.Go(s.acceptLoop)
	return s, nil
}

// normalize validates cfg, fills in defaults and copies the scripts so the
// caller may reuse its values.
func normalize(cfg *Config) error {
	if cfg.ReadTimeout < 0 || cfg.IdleTimeout < 0 || cfg.WriteTimeout < 0 ||
		cfg.HangTimeout < 0 || cfg.WaitTimeout < 0 || cfg.MaxRequestBytes < 0 {
		return errors.New("scripted: negative timeout or size in Config")
	}
	kit.Default(&cfg.ReadTimeout, DefaultReadTimeout)
	kit.Default(&cfg.IdleTimeout, cfg.ReadTimeout)
	kit.Default(&cfg.WriteTimeout, DefaultWriteTimeout)
	kit.Default(&cfg.HangTimeout, DefaultHangTimeout)
	kit.Default(&cfg.WaitTimeout, DefaultWaitTimeout)
	kit.Default(&cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	conns := make([]ConnScript, len(cfg.Conns))
	for i := range cfg.Conns {
		if err := cfg.Conns[i].validate(); err != nil {
			return fmt.Errorf("scripted: Conns[%d]: %w", i, err)
		}
		conns[i] = cloneScript(cfg.Conns[i])
	}
	cfg.Conns = conns
	if cfg.Default != nil {
		if err := cfg.Default.validate(); err != nil {
			return fmt.Errorf("scripted: Default: %w", err)
		}
		d := cloneScript(*cfg.Default)
		cfg.Default = &d
	}
	return nil
}

func cloneAction(a Action) Action {
	a.Header = a.Header.Clone()
	a.Body = bytes.Clone(a.Body)
	a.Raw = bytes.Clone(a.Raw)
	return a
}

func cloneScript(cs ConnScript) ConnScript {
	acts := make([]Action, len(cs.Actions))
	for i, a := range cs.Actions {
		acts[i] = cloneAction(a)
	}
	cs.Actions = acts
	if cs.Default != nil {
		d := cloneAction(*cs.Default)
		cs.Default = &d
	}
	return cs
}

var emptyScript ConnScript

// script returns the script of connection i.
func (s *Server) script(i int) *ConnScript {
	switch {
	case i < len(s.cfg.Conns):
		return &s.cfg.Conns[i]
	case s.cfg.Default != nil:
		return s.cfg.Default
	case len(s.cfg.Conns) > 0:
		return &s.cfg.Conns[len(s.cfg.Conns)-1]
	}
	return &emptyScript
}

// Close stops the listener, closes every connection (abruptly, without
// close_notify) and waits for all of the server's goroutines to exit. It
// is safe to call more than once.
func (s *Server) Close() error {
	s.core.Close(func() func() {
		close(s.done)
		conns := kit.Keys(s.active)
		return func() {
			if err := s.listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				s.closeErr = err
			}
			for _, c := range conns {
				c.raw.Close()
			}
		}
	}, nil)
	return s.closeErr
}

// Addr returns the listening address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.listener.Addr().String() }

// URL returns "http://127.0.0.1:port", or "https://..." with TLS.
func (s *Server) URL() string { return kit.BaseURL(s.cfg.TLS, s.Addr()) }

// Requests returns copies of the complete requests received so far, in
// the order they were completed.
func (s *Server) Requests() []Received { return s.core.Requests() }

// RequestsOn returns copies of the complete requests received on
// connection conn, in order.
func (s *Server) RequestsOn(conn int) []Received { return s.core.RequestsOn(conn) }

// Partial returns copies of the partial requests recorded so far (see
// Received.Partial), in order.
func (s *Server) Partial() []Received {
	return kit.Snapshot(&s.core.Mu, func() []*Received { return s.partial }, nil, (*Received).clone)
}

// Count returns the number of complete requests received.
func (s *Server) Count() int { return s.core.Count() }

// Conns returns the number of connections accepted.
func (s *Server) Conns() int { return s.core.Accepted() }

// ConnClosed reports whether the server has closed its side of
// connection i (for any reason).
func (s *Server) ConnClosed(i int) bool {
	return kit.Locked(&s.core.Mu, func() bool { return i >= 0 && i < len(s.core.Conns) && s.core.Conns[i].closed })
}

// Wait blocks until cond returns true, re-evaluating it whenever the
// server records a request or accepts or closes a connection. It returns
// ctx's error if ctx ends first (a ctx without deadline is bounded by
// Config.WaitTimeout), and ErrClosed if the server has been closed and
// cond is still false. cond must not block; it may call the server's
// methods.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	return s.core.WaitOutside(ctx, cond)
}

// WaitRequests waits until at least n complete requests have been
// received; see Wait. The error wraps ctx's error or ErrClosed.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	if err := s.Wait(ctx, func() bool { return s.Count() >= n }); err != nil {
		return fmt.Errorf("scripted: waiting for %d requests, have %d: %w", n, s.Count(), err)
	}
	return nil
}

// WaitConns waits until at least n connections have been accepted; see
// Wait.
func (s *Server) WaitConns(ctx context.Context, n int) error {
	if err := s.Wait(ctx, func() bool { return s.Conns() >= n }); err != nil {
		return fmt.Errorf("scripted: waiting for %d connections, have %d: %w", n, s.Conns(), err)
	}
	return nil
}

// WaitConnClosed waits until connection i (0-based, in accept order) has
// been accepted and the server has closed its side of it; see Wait.
func (s *Server) WaitConnClosed(ctx context.Context, i int) error {
	if err := s.Wait(ctx, func() bool { return s.ConnClosed(i) }); err != nil {
		return fmt.Errorf("scripted: waiting for connection %d to close: %w", i, err)
	}
	return nil
}

func (s *Server) record(r Received) {
	s.core.Update(func() {
		if r.Partial {
			s.partial = append(s.partial, &r)
		} else {
			s.core.Reqs = append(s.core.Reqs, &r)
		}
	})
}

func (s *Server) markClosed(c *conn) {
	s.core.Mu.Lock()
	defer s.core.Mu.Unlock()
	if st := s.core.Conns[c.idx]; !st.closed {
		st.closed = true
		s.core.NotifyLocked()
	}
}

func (s *Server) acceptLoop() {
	for {
		nc, err := s.listener.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. out of descriptors): back off briefly.
			s.core.Logf("accept: %v", err)
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-s.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		s.startConn(nc.(*net.TCPConn))
	}
}

func (s *Server) startConn(raw *net.TCPConn) {
	admitted := s.core.Admit(func(idx int) (*connState, func()) {
		c := &conn{s: s, idx: idx, raw: raw, nc: raw, rbuf: make([]byte, 16<<10)}
		c.script = s.script(idx)
		c.idle = c.script.IdleTimeout
		if c.idle == 0 {
			c.idle = s.cfg.IdleTimeout
		}
		if s.tlsCfg != nil {
			c.tc = tls.Server(raw, s.tlsCfg)
			c.nc = c.tc
		}
		s.active[c] = struct{}{}
		return &connState{}, c.serve
	})
	if !admitted {
		raw.Close()
	}
}

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
