package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/internal/selfsigned"
)

// QuicGoHTTP3 is the name of quic-go's own http3.Transport (its
// RoundTrip, with its connection cache and its one retry) as an HTTP/3
// peer.
const QuicGoHTTP3 = "quic-go-http3"

// newReplaysafeH3 is replaysafe speaking HTTP/3 only.
func newReplaysafeH3(e Env) RoundTripper {
	return replaysafe.New(replaysafe.Options{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle, Protocol: replaysafe.ProtocolHTTP3})
}

// newQuicGoHTTP3 is quic-go's http3.Transport with its defaults. It keeps
// one connection per origin over one UDP socket of its own; Release
// closes it (Close), which also closes the connections its cache dropped
// after an error without closing them.
func newQuicGoHTTP3(e Env) RoundTripper {
	return &http3.Transport{TLSClientConfig: e.TLS}
}

// serverLifetime is how long a benchmark server runs before it closes
// itself, should its Close never come.
const serverLifetime = time.Hour

// testCert is the benchmark servers' certificate and the pool trusting
// it, made once per process: ECDSA P-256, self-signed, valid for
// 127.0.0.1 (internal/selfsigned, as for the scripted servers).
var testCert = sync.OnceValues(func() (tls.Certificate, error) {
	cert, _, err := selfsigned.New("replaysafe bench")
	return cert, err
})

// h3Server is the HTTP/3 benchmark server: quic-go's http3.Server, with a
// handler that reads the request body and answers 200 "ok", over one
// UDP socket on 127.0.0.1 per origin.
type h3Server struct {
	hs        *http3.Server
	socks     []*net.UDPConn
	qts       []*quic.Transport
	lns       []*quic.Listener
	addrs     []string
	clientTLS *tls.Config
	gate      atomic.Pointer[Gate]
	ready     atomic.Int64
	done      chan struct{}
	cancel    context.CancelFunc
	stop      *time.Timer
	closeOnce sync.Once

	mu     sync.Mutex
	closed bool
	conns  map[*quic.Conn]struct{}
	wg     sync.WaitGroup
}

// The response's header values, shared by every response: a Date of nil
// makes quic-go send none, so that the server does not format a time per
// request.
var (
	h3ContentLength = []string{"2"}
	h3ContentType   = []string{"text/plain"}
)

// StartH3 starts the HTTP/3 server with one origin (UDP port) per
// origins, each allowing maxStreams concurrent request streams per
// connection (QUIC MAX_STREAMS; 0: 1000). quic-go's http3.Server runs a
// goroutine per request and allocates a few dozen objects for each, the
// same for every client.
func StartH3(maxStreams uint32, origins int) (Server, error) {
	cert, err := testCert()
	if err != nil {
		return nil, err
	}
	if maxStreams == 0 {
		maxStreams = 1000
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	ctx, cancel := context.WithCancel(context.Background())
	s := &h3Server{
		clientTLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13, NextProtos: []string{http3.NextProtoH3}},
		done:      make(chan struct{}),
		cancel:    cancel,
		conns:     map[*quic.Conn]struct{}{},
	}
	s.hs = &http3.Server{Handler: s}
	tlsConf := http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	quicConf := &quic.Config{MaxIncomingStreams: int64(maxStreams)}
	for range max(origins, 1) {
		sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.socks = append(s.socks, sock)
		qt := &quic.Transport{Conn: sock}
		s.qts = append(s.qts, qt)
		ln, err := qt.Listen(tlsConf, quicConf)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.lns = append(s.lns, ln)
		s.addrs = append(s.addrs, sock.LocalAddr().String())
		s.wg.Add(1)
		go s.accept(ctx, ln)
	}
	s.stop = time.AfterFunc(serverLifetime, func() { s.Close() })
	return s, nil
}

// accept serves every connection ln accepts until the server closes.
func (s *h3Server) accept(ctx context.Context, ln *quic.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.ready.Add(1)
		go func() {
			defer s.wg.Done()
			s.hs.ServeQUICConn(c) // returns once the connection is over and its handlers returned
			s.ready.Add(-1)
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// ServeHTTP reads the request body, waits at the gate, and answers 200
// "ok".
func (s *h3Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
	}
	if g := s.gate.Load(); g != nil {
		g.arrived.Add(1)
		select {
		case <-g.open:
		case <-s.done:
			return
		}
	}
	h := w.Header()
	h["Content-Length"], h["Content-Type"], h["Date"] = h3ContentLength, h3ContentType, nil
	w.WriteHeader(http.StatusOK)
	w.Write(h2Body)
}

func (s *h3Server) URL() string            { return "https://" + s.Addr() }
func (s *h3Server) Addr() string           { return s.addrs[0] }
func (s *h3Server) Addrs() []string        { return s.addrs }
func (s *h3Server) ClientTLS() *tls.Config { return s.clientTLS.Clone() }
func (s *h3Server) SetGate(g *Gate)        { s.gate.Store(g) }
func (s *h3Server) Ready() int             { return int(s.ready.Load()) }

// Close closes every connection, stops listening and waits for the
// server's goroutines.
func (s *h3Server) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.stop.Stop()
		}
		s.mu.Lock()
		s.closed = true
		close(s.done)
		conns := make([]*quic.Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		s.cancel()
		for _, ln := range s.lns {
			ln.Close()
		}
		for _, c := range conns {
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		}
		s.wg.Wait()
		s.hs.Close()
		for _, qt := range s.qts {
			qt.Close()
		}
		for _, sock := range s.socks {
			sock.Close()
		}
	})
	return nil
}

// bareQUIC is n bare HTTP/3 client connections over one UDP socket.
type bareQUIC struct {
	sock  *net.UDPConn
	qt    *quic.Transport
	conns []*quic.Conn
}

// bareH3 opens n connections to the origins of srv, spread over them,
// doing the least an HTTP/3 client must to hold one open: the QUIC
// handshake (TLS 1.3, ALPN h3) over one shared UDP socket, and a control
// stream carrying an empty SETTINGS frame (RFC 9114 §6.2.1). A QUIC
// connection holds tens of KiB in the process, on the client side too,
// so the memory baseline of HTTP/3 subtracts a bare client connection's
// QUIC state along with the server's.
func bareH3(srv Server, n int) (io.Closer, error) {
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	b := &bareQUIC{sock: sock, qt: &quic.Transport{Conn: sock}}
	addrs := srv.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	for i := range n {
		addr, err := net.ResolveUDPAddr("udp", addrs[i%len(addrs)])
		if err != nil {
			b.Close()
			return nil, err
		}
		c, err := b.qt.Dial(ctx, addr, srv.ClientTLS(), &quic.Config{})
		if err != nil {
			b.Close()
			return nil, err
		}
		b.conns = append(b.conns, c)
		st, err := c.OpenUniStream()
		if err == nil {
			_, err = st.Write([]byte{0x00, 0x04, 0x00}) // control stream type, SETTINGS, length 0
		}
		if err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

func (b *bareQUIC) Close() error {
	for _, c := range b.conns {
		c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
	return errors.Join(b.qt.Close(), b.sock.Close())
}
