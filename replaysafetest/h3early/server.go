// Package h3early is an HTTP/3 origin that allows TLS early data (0-RTT):
// quic-go's own http3.Server with Allow0RTT, behind a udprelay that
// delays every datagram, so that a request sent in early data reaches
// the handler well before the handshake completes. It records every
// request its handler got and whether it came before the handshake
// completed, and on demand rejects the early data of new connections
// (the session still resumes) or answers a request in early data with
// 425 Too Early (RFC 8470 §5.2). Tests and the conformance harness count
// copies at it: it is a replaysafetest.Scripted. Early data the server
// rejected never reaches its HTTP layer, so it counts the copies the
// server processed.
package h3early

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
	"github.com/replaysafe/replaysafe/replaysafetest/udprelay"
)

// Bounds and defaults.
const (
	// DefaultDelay is the relay's delay each way when Config.Delay is
	// zero: a 10 ms round trip.
	DefaultDelay = 5 * time.Millisecond
	// DefaultLifetime is how long a server runs before it closes itself.
	DefaultLifetime = 2 * time.Minute
	// MaxRecorded is the most requests a server records, and
	// MaxRecordedBytes the most bytes their bodies and raw forms take
	// together; later ones are answered but not kept (Unkept).
	MaxRecorded      = 10000
	MaxRecordedBytes = 64 << 20
	// maxBody is the most of a request body the handler reads.
	maxBody = 1 << 20
)

// Config configures a Server.
type Config struct {
	// Delay is the relay's delay each way; zero means DefaultDelay,
	// negative no relay (clients talk to the server directly).
	Delay time.Duration
	// Lifetime bounds the server's life; zero means DefaultLifetime.
	Lifetime time.Duration
}

// Received is one request the handler got.
type Received struct {
	// Conn is the connection's index in accept order, from 0.
	Conn         int
	Method, Path string
	// Body is the request body as read (at most 1 MiB).
	Body []byte
	// Raw is the request line, header fields and body, to compare copies.
	Raw string
	// Early reports that the request arrived before the handshake of its
	// connection completed: it came in early data.
	Early bool
	// Status is the status the server answered.
	Status int
}

// Server is the origin. Close stops it; it also stops by itself after
// Config.Lifetime.
type Server struct {
	srv    *http3.Server
	ln     *quic.EarlyListener
	udp    *net.UDPConn
	relay  *udprelay.Relay
	cert   kit.Cert
	done   chan struct{}
	timer  *time.Timer
	closed sync.Once

	reject   atomic.Bool
	tooEarly atomic.Bool
	conns    atomic.Int64

	mu      sync.Mutex // guards got, unkept and timer
	got     []Received
	unkept  int // requests answered past the record's bounds
	maxKept int // MaxRecorded; a test lowers it
	bytes   int // the kept records' bodies and raw forms
}

type connKey struct{}

// connInfo is what the handler knows of a request's connection.
type connInfo struct {
	conn  *quic.Conn
	index int
}

// New starts a server on UDP 127.0.0.1.
func New(cfg Config) (*Server, error) {
	if cfg.Delay == 0 {
		cfg.Delay = DefaultDelay
	}
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = DefaultLifetime
	}
	tlsCfg, cert, err := kit.NewCert("replaysafe h3early", []string{http3.NextProtoH3}, tls.VersionTLS13)
	if err != nil {
		return nil, err
	}
	s := &Server{cert: cert, done: make(chan struct{}), maxKept: MaxRecorded}
	s.udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s.ln, err = quic.ListenEarly(s.udp, http3.ConfigureTLSConfig(tlsCfg), &quic.Config{
		Allow0RTT: true,
		GetConfigForClient: func(*quic.ClientInfo) (*quic.Config, error) {
			return &quic.Config{Allow0RTT: !s.reject.Load()}, nil
		},
	})
	if err != nil {
		s.udp.Close()
		return nil, err
	}
	s.srv = &http3.Server{
		Handler: http.HandlerFunc(s.handle),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, &connInfo{conn: c, index: int(s.conns.Add(1) - 1)})
		},
	}
	go func() {
		defer close(s.done)
		s.srv.ServeListener(s.ln)
	}()
	if cfg.Delay > 0 {
		if s.relay, err = udprelay.New(s.udp.LocalAddr().String(), cfg.Delay); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.mu.Lock() // the timer may fire, and Close read s.timer, before New returns
	s.timer = time.AfterFunc(cfg.Lifetime, func() { s.Close() })
	s.mu.Unlock()
	return s, nil
}

// Addr returns the address clients dial: the relay's, or the server's
// own without one.
func (s *Server) Addr() string {
	if s.relay != nil {
		return s.relay.Addr()
	}
	return s.udp.LocalAddr().String()
}

// URL returns the base URL clients use: https:// and Addr.
func (s *Server) URL() string { return "https://" + s.Addr() }

// Accepted returns the number of connections the server accepted.
func (s *Server) Accepted() int { return int(s.conns.Load()) }

// Receipts returns what the handler got as replaysafetest receipts; a
// request answered 425 is Unprocessed.
func (s *Server) Receipts() []replaysafetest.Receipt {
	var out []replaysafetest.Receipt
	for _, r := range s.Requests() {
		out = append(out, replaysafetest.Receipt{Conn: r.Conn, Method: r.Method, Path: r.Path, Body: r.Body, Complete: true,
			Unprocessed: r.Status == http.StatusTooEarly})
	}
	return out
}

// ClientTLSConfig returns a TLS configuration that trusts the server.
func (s *Server) ClientTLSConfig() *tls.Config { return s.cert.ClientTLSConfig() }

// Reject makes new connections refuse early data (on) or accept it.
func (s *Server) Reject(on bool) { s.reject.Store(on) }

// TooEarly makes the handler answer a request in early data with 425.
func (s *Server) TooEarly(on bool) { s.tooEarly.Store(on) }

// Requests returns what the handler got, in order.
func (s *Server) Requests() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.got...)
}

// Unkept returns how many requests were answered after the record
// reached MaxRecorded, and so are in no Requests.
func (s *Server) Unkept() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unkept
}

// Copies returns what the handler got for path (with its query).
func (s *Server) Copies(path string) []Received {
	var out []Received
	for _, r := range s.Requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

var _ replaysafetest.Scripted = (*Server)(nil)

// Close stops the server and its relay.
func (s *Server) Close() error {
	s.closed.Do(func() {
		s.mu.Lock()
		if s.timer != nil {
			s.timer.Stop()
		}
		s.mu.Unlock()
		s.srv.Close()
		s.ln.Close()
		s.udp.Close()
		<-s.done
		if s.relay != nil {
			s.relay.Close()
		}
	})
	return nil
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	early, conn := false, -1
	if c, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		conn = c.index
		select {
		case <-c.conn.HandshakeComplete():
		default:
			early = true
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	var raw strings.Builder
	raw.WriteString(r.Method + " " + r.URL.RequestURI() + "\n")
	r.Header.Write(&raw)
	raw.Write(body)
	status := http.StatusOK
	if early && s.tooEarly.Load() {
		status = http.StatusTooEarly
	}
	s.mu.Lock()
	if size := len(body) + raw.Len(); len(s.got) < s.maxKept && s.bytes+size <= MaxRecordedBytes {
		s.bytes += size
		s.got = append(s.got, Received{Conn: conn, Method: r.Method, Path: r.URL.RequestURI(), Body: body, Raw: raw.String(), Early: early, Status: status})
	} else {
		s.unkept++
	}
	s.mu.Unlock()
	if status != http.StatusOK {
		w.WriteHeader(status)
		return
	}
	io.WriteString(w, "ok "+r.URL.Path)
}
