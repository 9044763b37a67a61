// Package h3server is a scripted HTTP/3 test origin that records every
// request stream it receives and misbehaves on cue.
//
// It speaks HTTP/3 (RFC 9114) itself over raw quic-go streams — frame by
// frame, with QPACK from github.com/quic-go/qpack using the static table
// only — not through http3.Server, so that it can do what a well-behaved
// server never does, at a chosen moment of a chosen stream: reject a
// request with H3_REQUEST_REJECTED, reset it with another code, send a
// GOAWAY carrying a chosen stream ID, close the connection while a request
// is in flight, answer early while the upload goes on, stop the upload
// with STOP_SENDING, stall reading so that the upload blocks on QUIC flow
// control, or never answer. It listens on UDP 127.0.0.1 only, with TLS
// 1.3, ALPN "h3" and a self-signed certificate made in memory
// (Server.ClientTLSConfig). Its SETTINGS advertise a QPACK dynamic table
// of zero bytes and zero blocked streams, so neither side needs QPACK
// encoder or decoder streams.
//
// Every request stream is recorded as a Received — connection index, QUIC
// stream ID, decoded header fields, body bytes, request trailers, whether
// the FIN arrived and when — from the moment its HEADERS frame arrives,
// so a test can count how many copies of a request the origin saw and
// compare them byte for byte, even when the server then rejects or drops
// them. (A stream whose HEADERS never arrive, and a connection whose
// handshake fails, leave no record.) Conns reports each connection: the
// client's SETTINGS, the GOAWAY frames either side sent, and how the
// connection ended.
//
// Behaviour is scripted per connection and per stream: Config.Conns[i]
// drives the i-th accepted QUIC connection, and within it
// ConnScript.Streams[j] handles the j-th request stream the client opens.
// Actions run either when the request's HEADERS arrive (OnHeaders) or once
// the whole request has been read (AfterBody).
//
// QUIC discards what a reset or a close overtakes: a RESET_STREAM lets the
// client drop response bytes it has not read yet (an interim response
// sent just before a Reset, say), and a CONNECTION_CLOSE drops stream data
// the server has not sent yet. That is why a GOAWAY with Close waits
// DefaultGoAwayCloseDelay before closing.
//
// Kill and Listen restart the server as a process restarts: every QUIC
// connection dies at once (with CONNECTION_CLOSE, or silently as in a
// crash: KillMode), the UDP port is closed meanwhile, and the server
// listens again on the same address with the same certificate and
// configuration; connection indexes and records carry on. Restart does
// both with a pause between.
//
// Every wait is bounded: the QUIC handshake by Config.HandshakeTimeout, a
// silent connection by the QUIC idle timeout, each request stream read by
// Config.IdleTimeout and each write by Config.WriteTimeout; hanging
// streams close their connection, the whole server closes itself after
// Config.Lifetime, and Close ends every goroutine it started.
package h3server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// DefaultGoAwayCloseDelay is how long a GOAWAY with Close waits before
// closing the connection (Action.Delay zero), so that the GOAWAY reaches
// the client first. The defaults of Config are replaysafetest's
// (DefaultStreamHandshakeTimeout and the like), which h2server shares.
const DefaultGoAwayCloseDelay = 50 * time.Millisecond

// ErrClosed is returned by the Wait methods when the server has been
// closed and the awaited condition can no longer become true.
var ErrClosed = errors.New("h3server: server closed")

// Setting is one HTTP/3 SETTINGS parameter (RFC 9114 §7.2.4.1).
type Setting struct {
	ID, Value uint64
}

// Config configures a Server. The zero Config answers every request with
// 200 "ok".
type Config struct {
	// Settings are sent in the server's SETTINGS frame after
	// QPACK_MAX_TABLE_CAPACITY and QPACK_BLOCKED_STREAMS, both 0.
	Settings []Setting
	// Conns scripts connections in accept order: Conns[i] drives
	// connection i. Connections beyond the list use Default.
	Conns []ConnScript
	// Default scripts the connections beyond Conns; nil means every
	// stream gets OK("ok").
	Default *ConnScript
	// MaxIncomingStreams is how many request streams the client may have
	// open at once (QUIC MAX_STREAMS); zero means quic-go's default, 100.
	MaxIncomingStreams int64
	// StreamReceiveWindow, when non-zero, fixes each stream's QUIC receive
	// window (initial and maximum, so it never grows): the client cannot
	// send more than this many bytes of a request stream, framing
	// included, beyond what the server has read. Small values make a
	// Stall block the upload. Zero means quic-go's auto-tuned window.
	StreamReceiveWindow uint64
	// ConnReceiveWindow, when non-zero, fixes the connection's QUIC
	// receive window in the same way; zero means quic-go's.
	ConnReceiveWindow uint64
	// HandshakeTimeout bounds the QUIC handshake (quic-go aborts a
	// handshake silent this long, or unfinished after twice this long);
	// zero means replaysafetest.DefaultStreamHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout is the QUIC idle timeout and bounds each read on a
	// request stream; zero means replaysafetest.DefaultStreamIdleTimeout.
	IdleTimeout time.Duration
	// WriteTimeout bounds each stream write; zero means
	// replaysafetest.DefaultStreamWriteTimeout.
	WriteTimeout time.Duration
	// HangTimeout bounds Hang actions without a duration; zero means
	// replaysafetest.DefaultHangTimeout.
	HangTimeout time.Duration
	// WaitTimeout bounds the Wait methods when their context has no
	// deadline; zero means replaysafetest.DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Lifetime is how long the server runs before closing itself; zero
	// means replaysafetest.DefaultStreamLifetime.
	Lifetime time.Duration
	// MaxBodyBytes bounds the body recorded for one stream; the rest is
	// counted in Received.BodyDropped. Zero means replaysafetest.DefaultStreamMaxBodyBytes.
	MaxBodyBytes int
	// Logf, if set, receives a line per connection and stream event (for
	// t.Logf).
	Logf func(format string, args ...any)
}

func (c *Config) setDefaults() {
	kit.StreamLimits{Handshake: &c.HandshakeTimeout, Idle: &c.IdleTimeout, Write: &c.WriteTimeout,
		Hang: &c.HangTimeout, Wait: &c.WaitTimeout, Lifetime: &c.Lifetime, MaxBody: &c.MaxBodyBytes}.Fill()
}

func (c *Config) quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           c.HandshakeTimeout,
		MaxIdleTimeout:                 c.IdleTimeout,
		MaxIncomingStreams:             c.MaxIncomingStreams,
		InitialStreamReceiveWindow:     c.StreamReceiveWindow,
		MaxStreamReceiveWindow:         c.StreamReceiveWindow,
		InitialConnectionReceiveWindow: c.ConnReceiveWindow,
		MaxConnectionReceiveWindow:     c.ConnReceiveWindow,
	}
}

// Received is one request stream as the server received it: the record
// every scripted stream server keeps, and what only HTTP/3 has.
type Received struct {
	replaysafetest.StreamRecord
	// Stream is the QUIC stream ID (0, 4, 8, ... for client requests).
	Stream uint64
	// Fields is the request's decoded field section as it arrived,
	// pseudo-header fields first.
	Fields []qpack.HeaderField
	// FIN reports that the client ended the stream while the server was
	// still reading it, and FINAt when.
	FIN   bool
	FINAt time.Time
	// ClientResetCode is the code of the client's RESET_STREAM, when
	// ClientReset.
	ClientResetCode http3.ErrCode
	// ServerReset reports that the server reset the stream, with
	// ServerResetCode: a Reject, a Reset, a GOAWAY carrying an ID at or
	// below the stream's, or a malformed or idle request.
	ServerReset     bool
	ServerResetCode http3.ErrCode
	// Err says why the server stopped reading the request early when no
	// action of the script made it stop: a malformed frame, an idle
	// timeout, the connection ending. Empty otherwise.
	Err string
}

// ConnInfo describes one accepted QUIC connection.
type ConnInfo struct {
	replaysafetest.ConnRecord
	// SettingsReceived reports that the client's control stream carried
	// its SETTINGS frame, whose parameters are Settings.
	SettingsReceived bool
	Settings         []Setting
	// GoAwayID is the last ID the server's GOAWAY carried, when
	// GoAwaySent.
	GoAwayID uint64
	// ClientGoAwayID is the last ID the client's GOAWAY carried, when
	// ClientGoAway.
	ClientGoAwayID uint64
	// ClosedByClient reports that the client closed it, and CloseCode is
	// the application error code of the CONNECTION_CLOSE either side sent
	// (zero when none was, as after an idle timeout).
	ClosedByClient bool
	CloseCode      http3.ErrCode
	// BytesSent and BytesReceived count the QUIC bytes exchanged,
	// retransmissions and packet headers included (quic-go's
	// ConnectionStats), as of the snapshot or the close.
	BytesSent, BytesReceived uint64
}

// connRecord is the server's bookkeeping for one connection, guarded by
// Server.mu; conn is nil once the connection is over.
type connRecord struct {
	info ConnInfo
	conn *conn
}

// Server is a running scripted HTTP/3 origin. Its methods are safe for
// concurrent use.
type Server struct {
	cfg    Config
	addr   *net.UDPAddr // where the server listens, whenever it does
	tlsCfg *tls.Config
	cert   kit.Cert
	ctx    context.Context // canceled when Close starts
	cancel context.CancelFunc

	restartMu sync.Mutex // serializes Kill and Listen

	core   kit.Core[Received, connRecord] // streams, connections, waiters, Close; its Mu guards sock, down, closed
	sock   socket                         // the listening socket; zero while killed or closed
	down   bool                           // killed, not listening again yet
	closed bool                           // Close has started
}

// socket is one life of the server's UDP port: the socket, the QUIC
// transport over it, its listener, and done, closed when its accept loop
// has returned. Whoever takes it out of Server.sock (Kill or Close)
// closes it.
type socket struct {
	udp  *net.UDPConn
	tr   *quic.Transport
	ln   *quic.Listener
	done chan struct{}
}

// listen opens a socket on addr (port 0: an ephemeral one).
func listen(addr *net.UDPAddr, tlsCfg *tls.Config, conf *quic.Config) (socket, error) {
	udp, err := net.ListenUDP("udp", addr)
	if err != nil {
		return socket{}, fmt.Errorf("h3server: listen: %w", err)
	}
	// No StatelessResetKey: packets of a connection the server no longer
	// knows (one a Kill ended) draw no stateless reset, so the client
	// learns nothing until its idle timeout.
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsCfg, conf)
	if err != nil {
		tr.Close()
		udp.Close()
		return socket{}, fmt.Errorf("h3server: listen: %w", err)
	}
	return socket{udp: udp, tr: tr, ln: ln, done: make(chan struct{})}, nil
}

// release closes the socket's transport (which ends any connection still
// open without a word) and the UDP socket, then waits for its accept
// loop.
func (k socket) release() {
	if k.udp == nil {
		return
	}
	k.tr.Close()
	k.udp.Close()
	<-k.done
}

// New starts a server on UDP 127.0.0.1 with an ephemeral port.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	tlsCfg, cert, err := kit.NewCert("replaysafe h3server", []string{http3.NextProtoH3}, tls.VersionTLS13)
	if err != nil {
		return nil, err
	}
	sock, err := listen(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, tlsCfg, cfg.quicConfig())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, addr: sock.udp.LocalAddr().(*net.UDPAddr), tlsCfg: tlsCfg, cert: cert, sock: sock}
	s.core.Init(kit.CoreSpec[Received, connRecord]{
		Name: "h3server", WaitTimeout: cfg.WaitTimeout, Logf: cfg.Logf, ErrClosed: ErrClosed,
		Closed: func(c *connRecord) bool { return c.info.Closed },
		ConnOf: func(r *Received) int { return r.Conn },
		Done:   func(r *Received) bool { return r.Done },
		Clone: func(r *Received) Received {
			c := *r
			c.StreamRecord, c.Fields = r.StreamRecord.Clone(), slices.Clone(r.Fields)
			return c
		},
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.core.Go(func() { s.acceptLoop(sock) })
	s.core.CloseAfter(cfg.Lifetime, s.Close)
	return s, nil
}

// Close stops the server: it stops accepting, closes every connection
// with CONNECTION_CLOSE(H3_NO_ERROR), releases the UDP socket and waits
// until every goroutine it started has returned. The records stay
// readable. Close is idempotent; every call returns after the first has
// finished.
func (s *Server) Close() error {
	var sock socket
	s.core.Close(func() func() {
		sock, s.sock, s.closed = s.sock, socket{}, true
		live := s.liveLocked()
		return func() {
			s.cancel()
			if sock.ln != nil {
				sock.ln.Close()
			}
			for _, c := range live {
				// Unblocks the connection's goroutines; each then cleans up.
				c.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "h3server: server closed")
			}
		}
	}, func() { sock.release() })
	return nil
}

// liveLocked returns the connections not over yet; core.Mu is held.
func (s *Server) liveLocked() []*conn {
	var live []*conn
	for _, r := range s.core.Conns {
		if r.conn != nil {
			live = append(live, r.conn)
		}
	}
	return live
}

// acceptLoop admits connections until sock's listener closes.
func (s *Server) acceptLoop(sock socket) {
	defer close(sock.done)
	for {
		qc, err := sock.ln.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.core.Logf("accept: %v; this listener is over", err)
			}
			return
		}
		admitted := s.core.Admit(func(idx int) (*connRecord, func()) {
			rec := &connRecord{info: ConnInfo{ConnRecord: replaysafetest.ConnRecord{
				Index:              idx,
				Remote:             qc.RemoteAddr().String(),
				NegotiatedProtocol: qc.ConnectionState().TLS.NegotiatedProtocol,
			}}}
			rec.conn = newConn(s, rec, qc)
			return rec, rec.conn.serve
		})
		if !admitted {
			qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "h3server: server closed")
			return
		}
	}
}

// Addr returns the listening UDP address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr.String() }

// URL returns the server's base URL, "https://127.0.0.1:port".
func (s *Server) URL() string { return "https://" + s.Addr() }

// Certificate returns the server's self-signed certificate.
func (s *Server) Certificate() *x509.Certificate { return s.cert.Certificate() }

// CertPool returns a new pool holding only the server's certificate.
func (s *Server) CertPool() *x509.CertPool { return s.cert.CertPool() }

// ClientTLSConfig returns a new client configuration that trusts only
// the server's certificate, with ALPN "h3" and TLS 1.3.
func (s *Server) ClientTLSConfig() *tls.Config { return s.cert.ClientTLSConfig() }

// Dial opens a QUIC connection to the server from a fresh UDP socket on
// 127.0.0.1, with ClientTLSConfig and conf (nil: quic-go's defaults), and
// returns once the handshake is complete. The socket is closed when the
// connection ends; the caller closes the connection, for example with
// CloseWithError(0, "").
func (s *Server) Dial(ctx context.Context, conf *quic.Config) (*quic.Conn, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("h3server: dial: %w", err)
	}
	qc, err := quic.Dial(ctx, udp, s.addr, s.ClientTLSConfig(), conf)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("h3server: dial: %w", err)
	}
	context.AfterFunc(qc.Context(), func() { udp.Close() })
	return qc, nil
}

// Requests returns a copy of every request stream received, in the order
// their HEADERS arrived.
func (s *Server) Requests() []Received { return s.core.Requests() }

// RequestsOn returns a copy of the request streams received on connection
// i.
func (s *Server) RequestsOn(i int) []Received { return s.core.RequestsOn(i) }

// Conns returns a snapshot of every accepted connection.
func (s *Server) Conns() []ConnInfo {
	s.core.Mu.Lock()
	defer s.core.Mu.Unlock()
	out := make([]ConnInfo, len(s.core.Conns))
	for i, c := range s.core.Conns {
		out[i] = c.info
		out[i].Settings = append([]Setting(nil), c.info.Settings...)
		if c.conn != nil {
			st := c.conn.qc.ConnectionStats()
			out[i].BytesSent, out[i].BytesReceived = st.BytesSent, st.BytesReceived
		}
	}
	return out
}

// Count returns the number of request streams received so far, on every
// connection, ignored ones included.
func (s *Server) Count() int { return s.core.Count() }

// WaitRequests waits until at least n request streams are Done (fully
// received, or never to be read further), then returns Requests. A
// context without a deadline gets Config.WaitTimeout; once the server
// has finished closing with fewer, it returns ErrClosed.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Received, error) {
	if err := s.core.WaitDone(ctx, n); err != nil {
		return nil, err
	}
	return s.Requests(), nil
}

// WaitCount waits until the HEADERS of at least n request streams have
// arrived, whether or not the server is done with them.
func (s *Server) WaitCount(ctx context.Context, n int) error { return s.core.WaitCount(ctx, n) }

// WaitConns waits until at least n connections have been accepted.
func (s *Server) WaitConns(ctx context.Context, n int) error { return s.core.WaitConns(ctx, n) }

// WaitConnClosed waits until connection i has been accepted and is over.
func (s *Server) WaitConnClosed(ctx context.Context, i int) error {
	return s.core.WaitConnClosed(ctx, i)
}
