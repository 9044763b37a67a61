//lint:file-ignore SA1019 the h2 and h2c origin serves each connection with x/net/http2's ServeConn, so that the soak holds every TCP connection it injects faults into.

package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/internal/selfsigned"
)

// IDHeader carries a soak request's id; the server counts copies by it.
const IDHeader = "Replaysafe-Soak-Id"

// Fault is one kind of fault the server injects.
type Fault uint8

// Faults. Every one but FaultDelay and FaultStreamReset ends a
// connection.
const (
	// FaultNone: the request is answered normally. The zero value.
	FaultNone Fault = iota
	// FaultIdleFIN: the request is answered, then the connection is closed
	// (FIN, or a QUIC CONNECTION_CLOSE with NO_ERROR) once it carries no
	// request, racing the client's next use of it.
	FaultIdleFIN
	// FaultIdleRST: as FaultIdleFIN, with a TCP RST (SO_LINGER 0), or a
	// QUIC CONNECTION_CLOSE with H3_INTERNAL_ERROR.
	FaultIdleRST
	// FaultCloseBeforeResponse: the request is received whole, then the
	// connection is closed (FIN) before any response byte.
	FaultCloseBeforeResponse
	// FaultResetBeforeResponse: the request is received whole, then the
	// connection is reset (RST) before any response byte.
	FaultResetBeforeResponse
	// FaultResetMidBody: half the request body is read, then the
	// connection is reset; the request is not counted as delivered.
	// Requests without a body get FaultResetBeforeResponse instead.
	FaultResetMidBody
	// FaultCloseMidResponse: the response header and half of its body are
	// sent, then the connection is closed.
	FaultCloseMidResponse
	// FaultStreamReset: over HTTP/2 and HTTP/3 the request's stream is
	// reset (RST_STREAM INTERNAL_ERROR; H3_INTERNAL_ERROR on both
	// directions) after the request is received; over HTTP/1.1, where no
	// stream exists, the handler aborts and net/http closes the
	// connection.
	FaultStreamReset
	// FaultDelay: the answer waits 1 to 20 ms.
	FaultDelay

	// The faults below are the prod model's (ModelProd); it also draws
	// FaultStreamReset, FaultDelay and, over HTTP/1.1, FaultIdleFIN.

	// FaultStreamCancel: as FaultStreamReset with CANCEL (HTTP/3:
	// H3_REQUEST_CANCELLED); over HTTP/1.1 an aborted handler.
	FaultStreamCancel
	// FaultRefused: the stream is refused before the request is read
	// (REFUSED_STREAM; H3_REQUEST_REJECTED): not a delivery. HTTP/1.1 has
	// no such signal: the connection is closed (FIN) unread.
	FaultRefused
	// FaultCutMidResponse: the response header and half its body are
	// sent, then the stream is reset (HTTP/2 INTERNAL_ERROR, HTTP/3
	// H3_INTERNAL_ERROR); over HTTP/1.1 the connection is closed.
	FaultCutMidResponse
	// FaultRetryAfter: the answer is 503 with "Retry-After: 1".
	FaultRetryAfter
	// FaultTooEarly: the answer is 425 Too Early.
	FaultTooEarly
	// FaultGoAway: a graceful end of the connection after its drawn
	// life: HTTP/2 GOAWAY with the last stream ID the server took (x/net,
	// on "Connection: close"), HTTP/3 GOAWAY (quic-go's Shutdown of the
	// connection's own server), HTTP/1.1 "Connection: close".
	FaultGoAway
	// FaultAbruptFIN: the connection is closed (FIN; QUIC
	// CONNECTION_CLOSE H3_NO_ERROR) at a random moment within 20 ms of
	// the request that ends its life: every request in flight dies.
	FaultAbruptFIN
	// FaultAbruptRST: as FaultAbruptFIN with an RST (QUIC
	// H3_INTERNAL_ERROR).
	FaultAbruptRST
	// FaultRestart: a server restart: every connection is reset at once
	// and the listener refuses for RestartRefusal.
	FaultRestart

	faultCount // number of faults; keep last
)

var faultNames = [faultCount]string{"none", "idle-fin", "idle-rst", "close-before-response",
	"reset-before-response", "reset-mid-body", "close-mid-response", "stream-reset", "delay",
	"stream-cancel", "refused", "cut-mid-response", "503-retry-after", "425-too-early",
	"goaway", "abrupt-fin", "abrupt-rst", "restart"}

// String returns the fault's name, such as idle-fin.
func (f Fault) String() string {
	if f < faultCount {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", uint8(f))
}

// endsConn reports whether f ends the connection it hits.
func (f Fault) endsConn(proto string) bool {
	switch f {
	case FaultNone, FaultDelay, FaultRetryAfter, FaultTooEarly, FaultRestart:
		return false
	case FaultStreamReset, FaultStreamCancel, FaultRefused, FaultCutMidResponse:
		return proto == "h1" || proto == "h1tls"
	}
	return true
}

// delivery is what the server saw of one request id.
type delivery struct {
	method  string
	copies  int    // copies received whole
	partial int    // copies whose body was cut by FaultResetMidBody
	digest  string // digest of the first whole copy
	differ  bool   // a later whole copy had another digest
	// arrivals is every copy that reached the handler, in order.
	arrivals []copyRecord
}

// copyRecord is what the server saw of one copy of a request.
type copyRecord struct {
	// fault is the request fault drawn for the copy.
	fault Fault
	// whole reports that the request was received whole.
	whole bool
	// started reports that a response byte left the server (the
	// handler's flush of the response header returned on a connection
	// the server had not closed) before the copy died.
	started bool
	// fresh reports that the copy arrived on a connection on which no
	// response had been completed yet.
	fresh bool
}

// server is the in-process faulty origin. It counts accepted
// connections and whole copies of every request id.
type server struct {
	proto  string
	faults float64
	model  Model
	seed   uint64
	// connLife is the prod model's mean connection life in requests.
	connLife int
	// connSeq numbers the accepted connections, for their drawn plans.
	connSeq atomic.Uint64
	// connEnds counts the connections the fault model ended (closed,
	// GOAWAY, "Connection: close"), once each; restarts apart.
	connEnds atomic.Int64
	// restarts counts the server restarts made.
	restarts atomic.Int64
	// rl is the TCP listener a restart closes and opens again.
	rl *restartListener
	// lnMu guards quicLn and udp, which a restart replaces; lnCond
	// signals a new QUIC listener.
	lnMu   sync.Mutex
	lnCond *sync.Cond

	rngMu sync.Mutex
	rng   *rand.Rand

	tcp     net.Listener
	h1      *http.Server
	h2      *http2.Server
	udp     net.PacketConn
	quicLn  *quic.Listener
	tlsConf *tls.Config
	roots   *x509.CertPool

	accepted atomic.Int64
	// acceptErrs counts failed accepts (EMFILE: too many open files).
	acceptErrs atomic.Int64
	peakOpen   int // most connections open at once; under mu
	injected   [faultCount]atomic.Int64
	busyIdle   atomic.Int64 // idle closes that found the connection still busy

	mu     sync.Mutex
	seen   map[string]*delivery
	conns  map[*sconn]struct{}
	quics  map[*quic.Conn]*sconn
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
}

// sconn is one server connection: TCP (raw) or QUIC (q).
type sconn struct {
	raw    net.Conn
	q      *quic.Conn
	active atomic.Int32
	// idle is the idle close asked for: FaultIdleFIN or FaultIdleRST.
	idle atomic.Uint32
	once sync.Once
	// dead is set once the server closed the connection.
	dead atomic.Bool
	// plan is the prod model's end of the connection.
	plan connPlan
	// reqs counts the requests that arrived; completed the responses
	// flushed whole.
	reqs, completed atomic.Int64
	// ended is set once the fault model ended the connection.
	ended atomic.Bool
	// h3 is the connection's own HTTP/3 server, so that a GOAWAY
	// (its Shutdown) reaches this connection only.
	h3 *http3.Server
	// h2w rewrites the code of the RST_STREAM frames the HTTP/2 server
	// writes on this connection (nil on other protocols).
	h2w *h2Writer
}

type connKey struct{}

// close ends the connection: gracefully (FIN, NO_ERROR) or not (RST,
// H3_INTERNAL_ERROR).
func (c *sconn) close(reset bool) {
	c.once.Do(func() {
		c.dead.Store(true)
		if c.q != nil {
			code := http3.ErrCodeNoError
			if reset {
				code = http3.ErrCodeInternalError
			}
			_ = c.q.CloseWithError(quic.ApplicationErrorCode(code), "soak fault")
			return
		}
		if tc, ok := c.raw.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = c.raw.Close()
	})
}

func startServer(cfg Config) (*server, error) {
	proto, seed := cfg.Proto, cfg.Seed
	s := &server{
		proto:    proto,
		faults:   cfg.Faults,
		model:    cfg.Model,
		seed:     seed,
		connLife: cfg.ConnLife,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		seen:     map[string]*delivery{},
		conns:    map[*sconn]struct{}{},
		quics:    map[*quic.Conn]*sconn{},
		done:     make(chan struct{}),
	}
	s.lnCond = sync.NewCond(&s.lnMu)
	if s.connLife == 0 {
		s.connLife = DefaultConnLife
	}
	if proto != "h1" && proto != "h2c" {
		cert, leaf, err := selfsigned.New("replaysafe soak")
		if err != nil {
			return nil, fmt.Errorf("soak: certificate: %w", err)
		}
		s.roots = x509.NewCertPool()
		s.roots.AddCert(leaf)
		s.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	var err error
	switch proto {
	case "h1", "h1tls":
		err = s.startH1()
	case "h2", "h2c":
		err = s.startH2()
	case "h3":
		err = s.startH3()
	default:
		return nil, fmt.Errorf("soak: unknown protocol %q (want h1, h1tls, h2, h2c or h3)", proto)
	}
	if err == nil && s.model == ModelProd && cfg.Restarts > 0 {
		s.wg.Add(1)
		go s.restartEvery(cfg.Restarts)
	}
	return s, err
}

// URL is the base URL of the server.
func (s *server) URL() string {
	switch s.proto {
	case "h1", "h2c":
		return "http://" + s.tcp.Addr().String()
	case "h3":
		s.lnMu.Lock()
		defer s.lnMu.Unlock()
		return "https://" + s.udp.LocalAddr().String()
	}
	return "https://" + s.tcp.Addr().String()
}

func (s *server) addConn(c *sconn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.peakOpen = max(s.peakOpen, len(s.conns))
	if s.model == ModelProd {
		c.plan = prodConnPlan(s.seed, s.connSeq.Add(1)-1, s.connLife, s.proto)
	}
	if c.q != nil {
		s.quics[c.q] = c
	}
	s.accepted.Add(1)
	return true
}

func (s *server) dropConn(c *sconn) {
	s.mu.Lock()
	delete(s.conns, c)
	if c.q != nil {
		delete(s.quics, c.q)
	}
	s.mu.Unlock()
}

// trackedListener registers every accepted TCP connection.
type trackedListener struct {
	net.Listener
	s *server
}

// trackedConn is an accepted TCP connection that leaves the server's
// table when closed.
type trackedConn struct {
	net.Conn
	sc *sconn
	s  *server
}

func (c *trackedConn) Close() error {
	c.s.dropConn(c.sc)
	return c.Conn.Close()
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &sconn{raw: c}
	if !l.s.addConn(sc) {
		c.Close()
		return nil, net.ErrClosed
	}
	return &trackedConn{Conn: c, sc: sc, s: l.s}, nil
}

func (s *server) startH1() error {
	ln, err := listenRestartable()
	if err != nil {
		return err
	}
	s.tcp, s.rl = ln, ln
	var l net.Listener = trackedListener{ln, s}
	if s.tlsConf != nil {
		c := s.tlsConf.Clone()
		c.NextProtos = []string{"http/1.1"}
		l = tls.NewListener(l, c)
	}
	s.h1 = &http.Server{
		Handler:  http.HandlerFunc(s.handle),
		ErrorLog: log.New(acceptErrCounter{s}, "", 0),
		// The prod model's "Connection: close" and aborted handlers end
		// connections; keep-alives stay on.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, sconnOf(c))
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateIdle {
				return
			}
			if sc := sconnOf(c); sc != nil {
				if f := Fault(sc.idle.Load()); f != FaultNone {
					sc.close(f == FaultIdleRST)
				}
			}
		},
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.h1.Serve(l)
	}()
	return nil
}

// acceptErrCounter counts the accept errors net/http's Serve logs (it
// retries them itself).
type acceptErrCounter struct{ s *server }

func (w acceptErrCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("Accept error")) {
		w.s.acceptErrs.Add(1)
	}
	return len(p), nil
}

func sconnOf(c net.Conn) *sconn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*trackedConn); ok {
		return tc.sc
	}
	return nil
}

func (s *server) startH2() error {
	ln, err := listenRestartable()
	if err != nil {
		return err
	}
	s.tcp, s.rl = ln, ln
	s.h2 = &http2.Server{MaxConcurrentStreams: StreamLimit}
	var tlsConf *tls.Config
	if s.tlsConf != nil {
		tlsConf = s.tlsConf.Clone()
		tlsConf.NextProtos = []string{"h2"}
	}
	l := trackedListener{ln, s}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		backoff := time.Duration(0)
		for {
			c, err := l.Accept()
			if err != nil {
				// Out of file descriptors (EMFILE) and the like: count,
				// back off and go on, as net/http's Serve does.
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Temporary() {
					return
				}
				s.acceptErrs.Add(1)
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-s.done:
					return
				}
				continue
			}
			backoff = 0
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				sc := c.(*trackedConn).sc
				conn := c
				if tlsConf != nil {
					tc := tls.Server(c, tlsConf)
					_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
					if err := tc.Handshake(); err != nil {
						return
					}
					_ = tc.SetDeadline(time.Time{})
					conn = tc
				}
				sc.h2w = &h2Writer{Conn: conn}
				conn = sc.h2w
				ctx := context.WithValue(context.Background(), connKey{}, sc)
				s.h2.ServeConn(conn, &http2.ServeConnOpts{Context: ctx, Handler: http.HandlerFunc(s.handle)})
			}()
		}
	}()
	return nil
}

func (s *server) startH3() error {
	udp, ln, err := s.listenQUIC("127.0.0.1:0")
	if err != nil {
		return err
	}
	s.udp, s.quicLn = udp, ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			ln := s.currentQUIC()
			if ln == nil {
				return // closed
			}
			c, err := ln.Accept(context.Background())
			if err != nil {
				if s.quicSwapped(ln) {
					continue // a restart replaced the listener
				}
				return
			}
			sc := &sconn{q: c}
			if !s.addConn(sc) {
				_ = c.CloseWithError(0, "closed")
				return
			}
			sc.h3 = &http3.Server{
				Handler: http.HandlerFunc(s.handle),
				ConnContext: func(ctx context.Context, _ *quic.Conn) context.Context {
					return context.WithValue(ctx, connKey{}, sc)
				},
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.dropConn(sc)
				_ = sc.h3.ServeQUICConn(c)
			}()
		}
	}()
	return nil
}

// listenQUIC opens a UDP socket on addr and a QUIC listener on it.
func (s *server) listenQUIC(addr string) (net.PacketConn, *quic.Listener, error) {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("soak: listen: %w", err)
	}
	tlsConf := http3.ConfigureTLSConfig(s.tlsConf.Clone())
	ln, err := quic.Listen(udp, tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, MaxIncomingStreams: StreamLimit})
	if err != nil {
		udp.Close()
		return nil, nil, fmt.Errorf("soak: quic listen: %w", err)
	}
	return udp, ln, nil
}

// currentQUIC returns the QUIC listener, waiting through a restart, or
// nil once the server is closed.
func (s *server) currentQUIC() *quic.Listener {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	for s.quicLn == nil && !s.isClosed() {
		s.lnCond.Wait()
	}
	if s.isClosed() {
		return nil
	}
	return s.quicLn
}

// quicSwapped reports whether a restart replaced ln (and the server is
// still open).
func (s *server) quicSwapped(ln *quic.Listener) bool {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.quicLn != ln && !s.isClosed()
}

func (s *server) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// draw picks the fault for one request, and the delay of FaultDelay.
func (s *server) draw() (Fault, time.Duration) {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	if s.faults <= 0 || s.rng.Float64() >= s.faults {
		return FaultNone, 0
	}
	f := Fault(1 + s.rng.IntN(int(faultCount)-1))
	return f, time.Duration(1+s.rng.IntN(20)) * time.Millisecond
}

// handle answers one request under the server's model.
func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	sc, _ := r.Context().Value(connKey{}).(*sconn)
	if sc != nil {
		sc.active.Add(1)
		defer s.released(sc)
	}
	if s.model == ModelProd {
		s.handleProd(w, r, sc)
		return
	}
	s.handleHarsh(w, r, sc)
}

// handleHarsh answers one request under the harsh model: it reads the
// body whole, records the copy and answers 200 with the body's digest,
// unless a fault hits it.
func (s *server) handleHarsh(w http.ResponseWriter, r *http.Request, sc *sconn) {
	id := r.Header.Get(IDHeader)
	f, delay := s.draw()
	hasBody := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	if f == FaultResetMidBody && !hasBody {
		f = FaultResetBeforeResponse
	}
	if f == FaultStreamReset && sc == nil {
		f = FaultResetBeforeResponse
	}
	if sc == nil && f.endsConn(s.proto) {
		f = FaultNone // no connection to end: should not happen
	}
	s.injected[f].Add(1)
	copyNo := s.arrive(id, r.Method, sc, f)

	h := sha256.New()
	if f == FaultResetMidBody {
		half := r.ContentLength / 2
		if r.ContentLength < 0 {
			half = 1
		}
		_, _ = io.CopyN(h, r.Body, half)
		s.record(id, copyNo, "", true)
		sc.close(true)
		return
	}
	if _, err := io.Copy(h, r.Body); err != nil {
		return // the client gave up on the upload: not a delivery
	}
	digest := hex.EncodeToString(h.Sum(nil))
	s.record(id, copyNo, digest, false)

	switch f {
	case FaultCloseBeforeResponse, FaultResetBeforeResponse:
		sc.close(f == FaultResetBeforeResponse)
		return
	case FaultStreamReset:
		s.resetStream(w, sc, http2.ErrCodeInternal, http3.ErrCodeInternalError)
		return
	case FaultDelay:
		time.Sleep(delay)
	case FaultIdleFIN, FaultIdleRST:
		sc.idle.Store(uint32(f))
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(digest)))
	if f == FaultCloseMidResponse {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, digest[:len(digest)/2])
		s.flushStarted(w, sc, id, copyNo)
		sc.close(false)
		return
	}
	_, _ = io.WriteString(w, digest)
	s.flushStarted(w, sc, id, copyNo)
	sc.completed.Add(1)
}

// flushStarted flushes the response written so far and records whether
// a response byte of copy copyNo of id left the server. Over HTTP/2 the
// connection's writer marks it as the response's HEADERS frame goes to
// the socket; elsewhere it is marked once the flush returned, unless the
// server had closed the connection before it (over HTTP/1.1 the flush
// writes to the socket; over HTTP/3 into the QUIC stream, whose packets
// may still be lost with the connection: a call counted cut there may
// have been recoverable, never the other way).
func (s *server) flushStarted(w http.ResponseWriter, sc *sconn, id string, copyNo int) {
	if sc != nil && sc.h2w != nil {
		if sid, ok := h2StreamID(w); ok {
			sc.h2w.watchHeaders(sid, func(started bool) { s.setStarted(id, copyNo, started) })
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
			return
		}
	}
	if sc != nil && sc.dead.Load() {
		return
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	s.setStarted(id, copyNo, true)
}

// setStarted records whether a response byte of copy copyNo of id left
// the server.
func (s *server) setStarted(id string, copyNo int, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.seen[id]; d != nil && copyNo >= 1 && copyNo <= len(d.arrivals) {
		d.arrivals[copyNo-1].started = started
	}
}

// released ends a request on sc; the last one out runs an idle close
// asked for, over HTTP/2 and HTTP/3 (HTTP/1.1 closes on StateIdle).
func (s *server) released(sc *sconn) {
	if sc.active.Add(-1) != 0 || sc.raw == nil && sc.q == nil {
		return
	}
	if s.proto == "h1" || s.proto == "h1tls" {
		return
	}
	f := Fault(sc.idle.Load())
	if f == FaultNone {
		return
	}
	// Let the response leave first; then close if still idle, or after
	// 50 ms whatever the connection carries.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for i := 0; i < 50; i++ {
			select {
			case <-time.After(time.Millisecond):
			case <-s.done:
				return
			}
			if sc.active.Load() == 0 {
				sc.close(f == FaultIdleRST)
				return
			}
		}
		s.busyIdle.Add(1)
		sc.close(f == FaultIdleRST)
	}()
}

// arrive records that a copy of request id reached the handler, with the
// fault drawn for it, and returns its number, from 1.
func (s *server) arrive(id, method string, sc *sconn, f Fault) int {
	if id == "" {
		return 0
	}
	fresh := sc == nil || sc.completed.Load() == 0
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil { // forgotten: a handler the close outran
		return 0
	}
	d := s.seen[id]
	if d == nil {
		d = &delivery{method: method}
		s.seen[id] = d
	}
	d.arrivals = append(d.arrivals, copyRecord{fault: f, fresh: fresh})
	return len(d.arrivals)
}

// record counts copy copyNo of request id: received whole with digest,
// or cut in its body (partial).
func (s *server) record(id string, copyNo int, digest string, partial bool) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil { // forgotten: a handler the close outran
		return
	}
	d := s.seen[id]
	if d == nil {
		return
	}
	if partial {
		d.partial++
		return
	}
	if copyNo >= 1 && copyNo <= len(d.arrivals) {
		d.arrivals[copyNo-1].whole = true
	}
	d.copies++
	if d.copies == 1 {
		d.digest = digest
	} else if d.digest != digest {
		d.differ = true
	}
}

// copiesOf returns what the server saw of the copies of id.
func (s *server) copiesOf(id string) []copyRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.seen[id]; d != nil {
		return append([]copyRecord(nil), d.arrivals...)
	}
	return nil
}

// deliveries returns a snapshot of the copies of every id seen.
func (s *server) deliveries() map[string]delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]delivery, len(s.seen))
	for id, d := range s.seen {
		out[id] = *d
	}
	return out
}

// forget releases the server's record of every request id, once it has
// been tallied, so that the heap read after it is the client's.
func (s *server) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = nil
}

// openConns returns the number of connections open at the server.
func (s *server) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// peak returns the most connections open at the server at once.
func (s *server) peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakOpen
}

// Close stops the server, closes every connection and waits (bounded)
// for the server's goroutines.
func (s *server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.lnMu.Lock()
	close(s.done)
	s.lnCond.Broadcast()
	quicLn, udp := s.quicLn, s.udp
	s.lnMu.Unlock()
	var err error
	if s.tcp != nil {
		err = s.tcp.Close()
	}
	if s.h1 != nil {
		_ = s.h1.Close()
	}
	if quicLn != nil {
		_ = quicLn.Close()
	}
	for _, c := range conns {
		c.close(true)
	}
	if udp != nil {
		_ = udp.Close()
	}
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		return errors.Join(err, errors.New("soak: server goroutines still running 10s after Close"))
	}
	return err
}
