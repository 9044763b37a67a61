package replaysafetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
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
	ln, tlsCfg, cert, err := kit.ListenTCP("scripted", "replaysafe scripted test server", []string{"http/1.1"}, cfg.TLS)
	if err != nil {
		return nil, err
	}
	s.listener, s.tlsCfg, s.cert = ln, tlsCfg, cert
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

// acceptLoop admits connections until the listener closes.
func (s *Server) acceptLoop() {
	kit.AcceptTCP(s.listener, s.done, s.core.Logf, func(tcp *net.TCPConn) bool {
		s.startConn(tcp)
		return true
	})
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
