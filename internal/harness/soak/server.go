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

	faultCount // number of faults; keep last
)

var faultNames = [faultCount]string{"none", "idle-fin", "idle-rst", "close-before-response",
	"reset-before-response", "reset-mid-body", "close-mid-response", "stream-reset", "delay"}

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
	case FaultNone, FaultDelay:
		return false
	case FaultStreamReset:
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
}

// server is the in-process faulty origin. It counts accepted
// connections and whole copies of every request id.
type server struct {
	proto  string
	faults float64

	rngMu sync.Mutex
	rng   *rand.Rand

	tcp     net.Listener
	h1      *http.Server
	h2      *http2.Server
	udp     net.PacketConn
	quicLn  *quic.Listener
	h3      *http3.Server
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
	cut    map[string]bool // ids whose response was cut after it started
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
}

type connKey struct{}

// close ends the connection: gracefully (FIN, NO_ERROR) or not (RST,
// H3_INTERNAL_ERROR).
func (c *sconn) close(reset bool) {
	c.once.Do(func() {
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

func startServer(proto string, faults float64, seed uint64) (*server, error) {
	s := &server{
		proto:  proto,
		faults: faults,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		seen:   map[string]*delivery{},
		cut:    map[string]bool{},
		conns:  map[*sconn]struct{}{},
		quics:  map[*quic.Conn]*sconn{},
		done:   make(chan struct{}),
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
	switch proto {
	case "h1", "h1tls":
		return s, s.startH1()
	case "h2", "h2c":
		return s, s.startH2()
	case "h3":
		return s, s.startH3()
	}
	return nil, fmt.Errorf("soak: unknown protocol %q (want h1, h1tls, h2, h2c or h3)", proto)
}

// URL is the base URL of the server.
func (s *server) URL() string {
	switch s.proto {
	case "h1", "h2c":
		return "http://" + s.tcp.Addr().String()
	case "h3":
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("soak: listen: %w", err)
	}
	s.tcp = ln
	var l net.Listener = trackedListener{ln, s}
	if s.tlsConf != nil {
		c := s.tlsConf.Clone()
		c.NextProtos = []string{"http/1.1"}
		l = tls.NewListener(l, c)
	}
	s.h1 = &http.Server{
		Handler:  http.HandlerFunc(s.handle),
		ErrorLog: log.New(acceptErrCounter{s}, "", 0),
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("soak: listen: %w", err)
	}
	s.tcp = ln
	s.h2 = &http2.Server{MaxConcurrentStreams: 250}
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
				ctx := context.WithValue(context.Background(), connKey{}, sc)
				s.h2.ServeConn(conn, &http2.ServeConnOpts{Context: ctx, Handler: http.HandlerFunc(s.handle)})
			}()
		}
	}()
	return nil
}

func (s *server) startH3() error {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("soak: listen: %w", err)
	}
	s.udp = udp
	tlsConf := http3.ConfigureTLSConfig(s.tlsConf.Clone())
	ln, err := quic.Listen(udp, tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, MaxIncomingStreams: 250})
	if err != nil {
		udp.Close()
		return fmt.Errorf("soak: quic listen: %w", err)
	}
	s.quicLn = ln
	s.h3 = &http3.Server{
		Handler: http.HandlerFunc(s.handle),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			s.mu.Lock()
			sc := s.quics[c]
			s.mu.Unlock()
			return context.WithValue(ctx, connKey{}, sc)
		},
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			sc := &sconn{q: c}
			if !s.addConn(sc) {
				_ = c.CloseWithError(0, "closed")
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.dropConn(sc)
				_ = s.h3.ServeQUICConn(c)
			}()
		}
	}()
	return nil
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

// handle answers one request: it reads the body whole, records the copy
// and answers 200 with the body's digest, unless a fault hits it.
func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	sc, _ := r.Context().Value(connKey{}).(*sconn)
	if sc != nil {
		sc.active.Add(1)
		defer s.released(sc)
	}
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

	h := sha256.New()
	if f == FaultResetMidBody {
		half := r.ContentLength / 2
		if r.ContentLength < 0 {
			half = 1
		}
		_, _ = io.CopyN(h, r.Body, half)
		s.record(id, r.Method, "", true)
		sc.close(true)
		return
	}
	if _, err := io.Copy(h, r.Body); err != nil {
		return // the client gave up on the upload: not a delivery
	}
	digest := hex.EncodeToString(h.Sum(nil))
	s.record(id, r.Method, digest, false)

	switch f {
	case FaultCloseBeforeResponse, FaultResetBeforeResponse:
		sc.close(f == FaultResetBeforeResponse)
		return
	case FaultStreamReset:
		s.resetStream(w)
		return
	case FaultDelay:
		time.Sleep(delay)
	case FaultIdleFIN, FaultIdleRST:
		sc.idle.Store(uint32(f))
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(digest)))
	if f == FaultCloseMidResponse {
		s.markCut(id)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, digest[:len(digest)/2])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		sc.close(false)
		return
	}
	_, _ = io.WriteString(w, digest)
}

// resetStream resets the request's stream (HTTP/2, HTTP/3) or aborts the
// handler (HTTP/1.1: net/http closes the connection).
func (s *server) resetStream(w http.ResponseWriter) {
	if hs, ok := w.(http3.HTTPStreamer); ok {
		if str, err := hs.HTTPStream(); err == nil {
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeInternalError))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeInternalError))
			return
		}
	}
	panic(http.ErrAbortHandler)
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

// markCut records that a response to id was cut after it started: no
// client can recover that call by itself.
func (s *server) markCut(id string) {
	s.mu.Lock()
	if s.cut != nil { // nil once forgotten: a handler the close outran
		s.cut[id] = true
	}
	s.mu.Unlock()
}

// wasCut reports whether a response to id was cut after it started.
func (s *server) wasCut(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut[id]
}

// record counts one copy of request id.
func (s *server) record(id, method, digest string, partial bool) {
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
		d = &delivery{method: method}
		s.seen[id] = d
	}
	if partial {
		d.partial++
		return
	}
	d.copies++
	if d.copies == 1 {
		d.digest = digest
	} else if d.digest != digest {
		d.differ = true
	}
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
	s.seen, s.cut = nil, nil
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
	close(s.done)
	var err error
	if s.tcp != nil {
		err = s.tcp.Close()
	}
	if s.h1 != nil {
		_ = s.h1.Close()
	}
	if s.h3 != nil {
		_ = s.h3.Close()
	}
	if s.quicLn != nil {
		_ = s.quicLn.Close()
	}
	for _, c := range conns {
		c.close(true)
	}
	if s.udp != nil {
		_ = s.udp.Close()
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
