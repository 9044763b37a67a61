// Package h2server is a scripted HTTP/2 test origin that records every
// stream it receives and misbehaves on cue.
//
// It speaks HTTP/2 frame by frame with golang.org/x/net/http2's Framer and
// hpack — not http2.Server — so that it can do what a well-behaved server
// never does: refuse a stream, reset it with a chosen error code, send a
// GOAWAY with a chosen last stream ID, cut a response off inside its
// header block, close the connection in the middle of a request, or never
// answer. It listens on 127.0.0.1 only, over TLS with ALPN "h2" and a
// self-signed certificate made in memory (Server.ClientTLSConfig), or over
// cleartext TCP with prior knowledge (h2c, RFC 9113 §3.3).
//
// Every stream is recorded as a Received — connection index, stream ID,
// decoded header fields, body bytes, whether END_STREAM arrived — from the
// moment its HEADERS arrive, so a test can count how many copies of a
// request the origin saw even when the server then refuses or drops it.
// Conns reports each connection's raw byte counts.
//
// Behaviour is scripted per connection and per stream: Config.Conns[i]
// drives the i-th accepted connection, and within it ConnScript.Streams[j]
// handles the j-th stream the client opens. Actions run either when the
// request's HEADERS arrive (OnHeaders) or once the whole request has been
// read (AfterBody). The server acknowledges SETTINGS, answers PING,
// honours the client's flow-control windows and grants the client window
// for every DATA frame it reads.
//
// Every read and write has a deadline, idle and hanging connections close
// themselves, the whole server closes itself after Config.Lifetime, and
// Close ends every goroutine it started.
package h2server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// DefaultDrainTimeout bounds how long a FIN close keeps discarding what
// the client still sends: the default of Config.DrainTimeout. The other
// defaults of Config are replaysafetest's (DefaultStreamHandshakeTimeout
// and the like), which h3server shares.
const DefaultDrainTimeout = time.Second

// SettingsHold bounds how long a server with RefuseBodyBeforeSettingsAck
// holds back its SETTINGS waiting for the first request.
const SettingsHold = 200 * time.Millisecond

// ErrClosed is returned by the Wait methods when the server has been
// closed and the awaited condition can no longer become true.
var ErrClosed = errors.New("h2server: server closed")

// Config configures a Server. The zero Config is an h2c server that
// answers every stream with 200 "ok".
type Config struct {
	// TLS makes the server speak TLS with ALPN "h2" and a fresh
	// self-signed certificate (see Server.ClientTLSConfig). Otherwise it
	// expects HTTP/2 with prior knowledge over cleartext TCP.
	TLS bool
	// MaxConcurrentStreams, when non-zero, is advertised as
	// SETTINGS_MAX_CONCURRENT_STREAMS. The server does not enforce it.
	MaxConcurrentStreams uint32
	// Settings are sent in the server's SETTINGS frame after
	// MaxConcurrentStreams (for example to advertise zero streams).
	Settings []http2.Setting
	// Conns scripts connections in accept order: Conns[i] drives
	// connection i. Connections beyond the list use Default.
	Conns []ConnScript
	// Default scripts the connections beyond Conns; nil means every
	// stream gets OK("ok").
	Default *ConnScript
	// HandshakeTimeout bounds the TLS handshake and the client preface;
	// zero means replaysafetest.DefaultStreamHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that sent no frame for this long;
	// zero means replaysafetest.DefaultStreamIdleTimeout.
	IdleTimeout time.Duration
	// WriteTimeout bounds each frame write; zero means replaysafetest.DefaultStreamWriteTimeout.
	WriteTimeout time.Duration
	// HangTimeout bounds Hang actions without a duration; zero means
	// replaysafetest.DefaultHangTimeout.
	HangTimeout time.Duration
	// DrainTimeout bounds the discarding of client bytes after a FIN
	// close; zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// WaitTimeout bounds the Wait methods when their context has no
	// deadline; zero means replaysafetest.DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Lifetime is how long the server runs before closing itself; zero
	// means replaysafetest.DefaultStreamLifetime.
	Lifetime time.Duration
	// MaxBodyBytes bounds the body recorded for one stream; the rest is
	// counted in Received.BodyDropped. Zero means replaysafetest.DefaultStreamMaxBodyBytes.
	MaxBodyBytes int
	// RefuseBodyBeforeSettingsAck emulates nginx with a small
	// http2_body_preread_size: a stream whose HEADERS do not end it (a
	// request with a body) that arrives before the client acknowledged
	// the server's SETTINGS is reset with RST_STREAM(REFUSED_STREAM), its
	// body discarded, without running its action. Once the SETTINGS ACK
	// has arrived, bodies are accepted. A refused stream is recorded with
	// PrereadRefused set and Action StreamRefuse; it takes a Seq, but not a
	// script position. So that the race is decided the same way in every
	// run, the server holds back its SETTINGS (and the ACK of the
	// client's) until the first HEADERS, a PING or DATA frame, or
	// SettingsHold, whichever comes first: the first request of a
	// connection, if it has a body and is sent at once, is always
	// refused.
	RefuseBodyBeforeSettingsAck bool
	// MaxRequestsPerConn, when positive, emulates nginx
	// keepalive_requests: as the HEADERS of a connection's N-th served
	// stream arrive, the server sends GOAWAY(NO_ERROR) with that stream
	// as last stream ID, serves it, and closes the connection (FIN) once
	// no stream is left to answer. Streams above it are recorded as
	// Ignored and never processed.
	MaxRequestsPerConn int
	// Logf, if set, receives a line per connection and stream event (for
	// t.Logf).
	Logf func(format string, args ...any)
}

func (c *Config) setDefaults() {
	kit.StreamLimits{Handshake: &c.HandshakeTimeout, Idle: &c.IdleTimeout, Write: &c.WriteTimeout,
		Hang: &c.HangTimeout, Wait: &c.WaitTimeout, Lifetime: &c.Lifetime, MaxBody: &c.MaxBodyBytes}.Fill()
	kit.Default(&c.DrainTimeout, DefaultDrainTimeout)
}

// Received is one stream as the server received it: the record every
// scripted stream server keeps, and what only HTTP/2 has.
type Received struct {
	replaysafetest.StreamRecord
	// StreamID is the stream's HTTP/2 identifier.
	StreamID uint32
	// Fields is the request's decoded header block as it arrived,
	// pseudo-header fields first.
	Fields []hpack.HeaderField
	// EndStream reports that the client ended the stream (END_STREAM on
	// HEADERS, DATA or trailers) while the server was still reading it.
	EndStream bool
	// ClientResetCode is the code of the client's RST_STREAM, when
	// ClientReset.
	ClientResetCode http2.ErrCode
	// PrereadRefused reports that the stream was refused because its
	// body arrived before the client acknowledged the server's SETTINGS
	// (Config.RefuseBodyBeforeSettingsAck).
	PrereadRefused bool
}

// ConnInfo describes one accepted connection.
type ConnInfo struct {
	replaysafetest.ConnRecord
	// Preface reports that the client connection preface arrived intact.
	Preface bool
	// Settings are the parameters of the client's first SETTINGS frame.
	Settings []http2.Setting
	// SettingsAcked reports that the client acknowledged the server's
	// SETTINGS.
	SettingsAcked bool
	// BytesRead and BytesWritten count the HTTP/2 bytes exchanged, preface
	// included, inside TLS when TLS is on.
	BytesRead, BytesWritten int64
	// TCPBytesRead and TCPBytesWritten count the bytes that crossed the
	// TCP connection: TLS handshake and records included; for h2c the same
	// as BytesRead and BytesWritten.
	TCPBytesRead, TCPBytesWritten int64
	// GoAwayLast and GoAwayCode are the last GOAWAY the server sent, when
	// GoAwaySent.
	GoAwayLast uint32
	GoAwayCode http2.ErrCode
}

// connRecord is the server's bookkeeping for one connection: info is
// guarded by Server.mu, the byte counters are atomic.
type connRecord struct {
	info                ConnInfo
	read, written       atomic.Int64 // HTTP/2 bytes
	tcpRead, tcpWritten atomic.Int64 // TCP bytes
}

// Server is a running scripted HTTP/2 origin. Its methods are safe for
// concurrent use.
type Server struct {
	cfg    Config
	ln     net.Listener
	tlsCfg *tls.Config
	cert   kit.Cert
	done   chan struct{} // closed when Close starts

	core kit.Core[Received, connRecord] // streams, connections, waiters, Close
	live map[*conn]struct{}             // guarded by core.Mu
}

// New starts a server on 127.0.0.1 with an ephemeral port.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	s := &Server{cfg: cfg, done: make(chan struct{}), live: make(map[*conn]struct{})}
	s.core.Init(kit.CoreSpec[Received, connRecord]{
		Name: "h2server", WaitTimeout: cfg.WaitTimeout, Logf: cfg.Logf, ErrClosed: ErrClosed,
		Clone: func(r *Received) Received {
			c := *r
			c.StreamRecord, c.Fields = r.StreamRecord.Clone(), slices.Clone(r.Fields)
			return c
		},
		ConnOf: func(r *Received) int { return r.Conn },
		Done:   func(r *Received) bool { return r.Done },
		Closed: func(c *connRecord) bool { return c.info.Closed },
	})
	ln, tlsCfg, cert, err := kit.ListenTCP("h2server", "replaysafe h2server", []string{http2.NextProtoTLS}, cfg.TLS)
	if err != nil {
		return nil, err
	}
	s.ln, s.tlsCfg, s.cert = ln, tlsCfg, cert
	s.core.Go(s.acceptLoop)
	s.core.CloseAfter(cfg.Lifetime, s.Close)
	return s, nil
}

// Close stops the server: it stops accepting, closes every connection and
// waits until every goroutine it started has returned. The records stay
// readable. Close is idempotent; every call returns after the first has
// finished.
func (s *Server) Close() error {
	s.core.Close(func() func() {
		close(s.done)
		live := kit.Keys(s.live)
		return func() {
			s.ln.Close()
			for _, c := range live {
				c.tcp.Close() // unblocks the connection's read; it then cleans up
			}
		}
	}, nil)
	return nil
}

// acceptLoop admits connections until the listener closes.
func (s *Server) acceptLoop() {
	kit.AcceptTCP(s.ln, s.done, s.core.Logf, func(tcp *net.TCPConn) bool {
		admitted := s.core.Admit(func(idx int) (*connRecord, func()) {
			rec := &connRecord{info: ConnInfo{ConnRecord: replaysafetest.ConnRecord{Index: idx, Remote: tcp.RemoteAddr().String()}}}
			c := newConn(s, rec, tcp)
			s.live[c] = struct{}{}
			return rec, c.serve
		})
		if !admitted {
			tcp.Close()
		}
		return admitted
	})
}

// Addr returns the listening address, host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the server's base URL: https:// over TLS, http:// for h2c.
func (s *Server) URL() string { return kit.BaseURL(s.cfg.TLS, s.Addr()) }

// Requests returns a copy of every stream received, in the order their
// HEADERS arrived.
func (s *Server) Requests() []Received { return s.core.Requests() }

// RequestsOn returns a copy of the streams received on connection i.
func (s *Server) RequestsOn(i int) []Received { return s.core.RequestsOn(i) }

// Conns returns a snapshot of every accepted connection.
func (s *Server) Conns() []ConnInfo {
	return kit.Locked(&s.core.Mu, func() []ConnInfo { return kit.Map(s.core.Conns, (*connRecord).snapshot) })
}

// Count returns the number of streams received so far, on every
// connection, ignored ones included.
func (s *Server) Count() int { return s.core.Count() }

// Accepted returns the number of connections accepted so far.
func (s *Server) Accepted() int { return s.core.Accepted() }

// snapshot copies the record; the caller holds Server.mu.
func (c *connRecord) snapshot() ConnInfo {
	info := c.info
	info.Settings = append([]http2.Setting(nil), c.info.Settings...)
	info.BytesRead = c.read.Load()
	info.BytesWritten = c.written.Load()
	info.TCPBytesRead = c.tcpRead.Load()
	info.TCPBytesWritten = c.tcpWritten.Load()
	return info
}

// WaitRequests waits until at least n streams are Done (fully received,
// or never to be read further). A context without a deadline gets
// Config.WaitTimeout; once the server has finished closing with fewer,
// it returns ErrClosed.
func (s *Server) WaitRequests(ctx context.Context, n int) error { return s.core.WaitDone(ctx, n) }

// WaitConns waits until at least n connections have been accepted.
func (s *Server) WaitConns(ctx context.Context, n int) error { return s.core.WaitConns(ctx, n) }

// WaitConnClosed waits until connection i has been accepted and is over.
func (s *Server) WaitConnClosed(ctx context.Context, i int) error {
	return s.core.WaitConnClosed(ctx, i)
}
