package connectproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// h2Front serves the proxy's HTTP/2 connections with net/http's
// Server, whose HTTP/2 support answers CONNECT streams (RFC 9113 §8.5):
// the accept loop does TLS itself and hands each connection that
// negotiated h2 to the Server through a listener of its own.
type h2Front struct {
	srv   *http.Server
	ln    *connQueue
	conns sync.Map // *tls.Conn → *h2ConnInfo
}

// h2ConnInfo is what a stream's handler needs of its connection.
type h2ConnInfo struct {
	index int
	sc    Script
	offer []string
	done  chan struct{} // closed when the Server is done with the connection
	once  sync.Once
}

type h2InfoKey struct{}

// startH2 starts the Server that serves h2 connections.
func (s *Server) startH2() {
	f := &h2Front{ln: newConnQueue(s.ln.Addr())}
	f.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, _ := r.Context().Value(h2InfoKey{}).(*h2ConnInfo)
			if info == nil {
				panic(http.ErrAbortHandler)
			}
			s.wg.Add(1) // the connection's handle goroutine runs: the count is not zero
			defer s.wg.Done()
			s.handleH2Stream(w, r, info.index, info.sc, info.offer)
		}),
		Protocols:   new(http.Protocols),
		HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: int(s.cfg.H2MaxStreams)},
		IdleTimeout: DefaultTunnelIdle,
		ErrorLog:    log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if v, ok := f.conns.Load(c); ok {
				return context.WithValue(ctx, h2InfoKey{}, v)
			}
			return ctx
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateClosed && st != http.StateHijacked {
				return
			}
			if v, ok := f.conns.LoadAndDelete(c); ok {
				info := v.(*h2ConnInfo)
				info.once.Do(func() { close(info.done) })
			}
		},
	}
	f.srv.Protocols.SetHTTP1(true)
	f.srv.Protocols.SetHTTP2(true)
	s.h2 = f
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f.srv.Serve(f.ln)
	}()
}

// serveH2 hands a connection that negotiated h2 to the Server and waits
// until the Server is done with it or the proxy closes.
func (s *Server) serveH2(conn *tls.Conn, index int, sc Script, offer []string) {
	s.mu.Lock()
	s.h2Conns++
	s.mu.Unlock()
	info := &h2ConnInfo{index: index, sc: sc, offer: offer, done: make(chan struct{})}
	s.h2.conns.Store(conn, info)
	if !s.h2.ln.push(conn) {
		s.h2.conns.Delete(conn)
		return
	}
	select {
	case <-info.done:
	case <-s.ctx.Done():
	}
}

// closeH2 stops the Server: its listener and every connection.
func (s *Server) closeH2() {
	if s.h2 != nil {
		s.h2.srv.Close()
	}
}

// connQueue is a net.Listener whose connections are pushed to it.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// push hands c to Accept; false once the queue is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// handleH2Stream answers one request of an HTTP/2 proxy connection.
func (s *Server) handleH2Stream(w http.ResponseWriter, r *http.Request, index int, sc Script, offer []string) {
	i := s.record(Request{
		Conn: index, Method: r.Method, Target: r.Host, Proto: r.Proto,
		Host: r.Host, Header: r.Header.Clone(), ALPN: offer,
	})
	if sc.Stall == StallAfterRequest && !s.stall(sc.StallFor) {
		return
	}
	status := sc.Status
	if status == 0 {
		status = http.StatusOK
	}
	challenge := false
	switch {
	case r.Method != http.MethodConnect:
		status = http.StatusMethodNotAllowed
	case s.cfg.RequireAuth != nil && r.Header.Get("Proxy-Authorization") != s.cfg.RequireAuth.basic():
		status, challenge = http.StatusProxyAuthRequired, true
	}
	for k, vv := range sc.Header {
		w.Header()[k] = append([]string(nil), vv...)
	}
	if status < 200 || status > 299 {
		if challenge {
			v := `Basic realm="connectproxy"`
			if s.cfg.ChallengeSize > 0 {
				v = challengeOf(s.cfg.ChallengeSize)
			}
			w.Header().Set("Proxy-Authenticate", v)
		}
		s.answered(i, status)
		w.WriteHeader(status)
		return
	}
	target, err := s.dial(r.Host)
	if err != nil {
		s.log("conn %d: dial %s: %v", index, r.Host, err)
		code := http.StatusBadGateway
		if errors.Is(err, errNotLoopback) {
			code = http.StatusForbidden
		}
		s.answered(i, code)
		w.WriteHeader(code)
		return
	}
	s.tunnelOpened()
	s.answered(i, status)
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	if sc.Extra != nil {
		w.Write(sc.Extra)
	}
	if rc.Flush() != nil {
		s.release(target)
		return
	}
	st := &h2Stream{w: w, rc: rc, body: r.Body, target: target, conn: index}
	s.mu.Lock()
	s.h2Streams[st] = struct{}{}
	s.mu.Unlock()
	s.relay(st, nil, target)
	s.mu.Lock()
	delete(s.h2Streams, st)
	s.mu.Unlock()
	if st.reset.Load() {
		panic(http.ErrAbortHandler) // x/net's server resets the stream
	}
}

// ResetTunnels resets every HTTP/2 tunnel open now (RST_STREAM): the
// proxy closes its connection to the target and aborts the stream, as a
// proxy does when the target's connection fails (RFC 9113 §8.5). It
// returns how many it reset. HTTP/1.1 tunnels are left alone.
func (s *Server) ResetTunnels() int {
	s.mu.Lock()
	var all []*h2Stream
	for st := range s.h2Streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	for _, st := range all {
		st.reset.Store(true)
		st.target.Close()
	}
	return len(all)
}

// H2Conns returns the number of proxy connections that negotiated
// HTTP/2.
func (s *Server) H2Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h2Conns
}

// TunnelsPerConn returns, per proxy connection index (accept order),
// the number of tunnels it opened (requests answered 2xx).
func (s *Server) TunnelsPerConn() map[int]int {
	out := map[int]int{}
	for _, r := range s.Requests() {
		if r.Status >= 200 && r.Status <= 299 {
			out[r.Conn]++
		}
	}
	return out
}

// h2Stream is a CONNECT stream as the relay's client connection: the
// request body is what the client sends, the response what it reads.
type h2Stream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	body interface {
		Read([]byte) (int, error)
		Close() error
	}
	target net.Conn
	conn   int
	reset  atomic.Bool
	once   sync.Once
}

func (c *h2Stream) Read(p []byte) (int, error) { return c.body.Read(p) }

func (c *h2Stream) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err == nil {
		err = c.rc.Flush()
	}
	return n, err
}

// Close ends the client's upstream half as far as the relay goes.
func (c *h2Stream) Close() error {
	c.once.Do(func() { c.body.Close() })
	return nil
}

func (c *h2Stream) LocalAddr() net.Addr                { return nil }
func (c *h2Stream) RemoteAddr() net.Addr               { return nil }
func (c *h2Stream) SetDeadline(t time.Time) error      { return c.rc.SetWriteDeadline(t) }
func (c *h2Stream) SetReadDeadline(t time.Time) error  { return nil }
func (c *h2Stream) SetWriteDeadline(t time.Time) error { return c.rc.SetWriteDeadline(t) }
