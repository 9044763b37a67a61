// Package connectproxy is a scripted CONNECT proxy, plain or over TLS,
// and a minimal SOCKS5 proxy, for tests and the conformance command.
//
// Both listen on 127.0.0.1 with a kernel-chosen port and only ever dial
// loopback addresses. Each records every request it reads before acting
// on it and counts the tunnels it opens, so a test can assert exactly how
// many tunnels each hop of a chain carried and which credentials reached
// which hop.
//
// The CONNECT proxy (Start) is scripted per connection, in accept order:
// Config.Conns[i] drives connection i. A Script can answer any status (1xx,
// 2xx such as 204 or 299, 3xx, 407, 5xx; any 2xx opens the tunnel),
// append bytes after the response header section, send raw bytes instead
// of a response, or stall at a Point: before or after the TLS handshake,
// before or after reading the CONNECT request, or in the middle of the
// status line. With Config.RequireAuth it answers 407 unless the request
// carries the right Basic Proxy-Authorization. It tunnels by dialing the
// target itself, or, with Config.Upstream, by sending its own CONNECT to
// an upstream proxy and relaying that proxy's answer. Config.IdleCut
// closes a tunnel a set time after the last byte relayed to the client,
// as commercial proxies cut idle CONNECT tunnels. With Config.Forward it
// is a forward proxy for plain http as well: requests in absolute form
// are forwarded to their origin one by one on a kept-alive connection,
// and a Script closes that connection as a request arrives or after the
// origin answered it, unanswered.
//
// With "h2" in Config.ALPN the TLS proxy is also an HTTP/2 CONNECT proxy
// (RFC 9113 §8.5) on net/http's HTTP/2 server: tunnels are
// streams of one connection, recorded like HTTP/1.1 CONNECTs (Proto
// "HTTP/2.0", Conn the connection's index), counted per connection
// (TunnelsPerConn), and ResetTunnels aborts the open ones with
// RST_STREAM.
//
// The SOCKS5 proxy (StartSOCKS5) speaks RFC 1928 CONNECT with optional
// RFC 1929 username/password authentication.
//
// Close ends every connection and goroutine at once. Without Close,
// everything still ends by itself: reads, writes and dials have timeouts,
// stalls last DefaultStall at most and an idle tunnel closes after
// DefaultTunnelIdle.
package connectproxy

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Point -linecomment -output=enum_string.go

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Point is a moment in a proxy connection where a Script can stall.
type Point uint8

// Stall points, in the order a connection reaches them.
const (
	// StallNone never stalls: the zero value.
	StallNone Point = iota // none
	// StallBeforeHandshake stalls before the TLS handshake (TLS proxies
	// only); the client is in tls-to-proxy.
	StallBeforeHandshake // before-handshake
	// StallAfterHandshake stalls after the TLS handshake, before reading
	// (TLS proxies only).
	StallAfterHandshake // after-handshake
	// StallBeforeRequest stalls before reading the CONNECT (or SOCKS
	// greeting); the client is in connect (or socks).
	StallBeforeRequest // before-request
	// StallAfterRequest stalls after reading the request, before
	// answering.
	StallAfterRequest // after-request
	// StallMidResponse stalls after the first bytes of the status line
	// (CONNECT only).
	StallMidResponse // mid-response
)

// pointCount is the number of valid values of Point.
const pointCount = int(StallMidResponse) + 1

// Credentials are a user name and password.
type Credentials struct {
	Username string
	Password string
}

// basic returns the Basic authorization value for c.
func (c *Credentials) basic() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password))
}

// Script drives one connection of the CONNECT proxy. The zero Script
// answers "200 Connection established" and tunnels.
type Script struct {
	// Stall, if set, makes the proxy wait at that point for StallFor
	// (DefaultStall if zero), or until Close, and then go on.
	Stall    Point
	StallFor time.Duration
	// Status is the status to answer once credentials pass; zero means
	// 200. Any 2xx opens the tunnel; anything else is written and the
	// connection closed.
	Status int
	// Reason is the reason phrase; empty means "Connection established"
	// for 200 and http.StatusText (or "Status") otherwise.
	Reason string
	// Header holds extra response header fields.
	Header http.Header
	// Extra is written right after the response header section, in the
	// same write: bytes the client must hand to the tunneled protocol.
	Extra []byte
	// Raw, if set, is written instead of a response, and the connection
	// is then closed.
	Raw []byte
	// CloseBeforeForwarding, with Config.Forward, closes the connection
	// when its request number n (from 1) has been read, without
	// forwarding it: a keep-alive close that crosses the request. Zero
	// never does.
	CloseBeforeForwarding int
	// CloseAfterForwarding, with Config.Forward, forwards request number
	// n (from 1) to its origin, then closes the connection without
	// answering: the origin processed a request whose response the
	// client never sees. Zero never does.
	CloseAfterForwarding int
}

// PipelinedResponseBytes is what Pipelined writes after its 200: a
// complete HTTP/1.1 response that arrives before the client has sent any
// request through the tunnel.
const PipelinedResponseBytes = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npipelined"

// Pipelined answers 200 and writes extra (PipelinedResponseBytes when
// nil) in the same write, before reading anything from the client, then
// tunnels: bytes a hostile proxy pipelines after its CONNECT 200.
func Pipelined(extra []byte) Script {
	if extra == nil {
		extra = []byte(PipelinedResponseBytes)
	}
	return Script{Extra: extra}
}

// HugeChallenge answers 407 with a Basic Proxy-Authenticate challenge
// whose field value is size bytes long (at least the bytes of
// `Basic realm=""`), and closes the connection.
func HugeChallenge(size int) Script {
	return Script{Status: http.StatusProxyAuthRequired, Header: http.Header{"Proxy-Authenticate": {challengeOf(size)}}}
}

// challengeOf returns a Basic challenge of size bytes, realm padded with
// 'x'.
func challengeOf(size int) string {
	const frame = `Basic realm=""`
	return `Basic realm="` + strings.Repeat("x", max(0, size-len(frame))) + `"`
}

// Upstream is a proxy the CONNECT proxy forwards to instead of dialing
// targets itself. The upstream's response reaches the client as it is,
// so a Script's Status (when 2xx), Reason, Header, Extra and
// StallMidResponse do not apply to forwarded tunnels.
type Upstream struct {
	// Addr is the upstream proxy's "host:port" (a loopback address).
	Addr string
	// TLS, if set, is the client configuration for an upstream that
	// speaks TLS.
	TLS *tls.Config
	// Auth, if set, is sent to the upstream as Basic Proxy-Authorization.
	// The client's own Proxy-Authorization is never forwarded.
	Auth *Credentials
}

// Config configures a CONNECT proxy. The zero Config is a plain proxy
// that tunnels every CONNECT to its target.
type Config struct {
	// TLS makes the proxy speak TLS with a fresh self-signed certificate
	// (see Server.ClientTLSConfig).
	TLS bool
	// ALPN is the list of protocols the TLS proxy accepts; nil means
	// "http/1.1" only. With "h2" in it the proxy is an HTTP/2 proxy too:
	// a connection that negotiates h2 is served by net/http's HTTP/2
	// server, each CONNECT stream (RFC 9113 §8.5) answered as the
	// connection's Script says (Status, Header, StallAfterRequest, Extra
	// as DATA; RequireAuth applies) and tunneled to its target directly:
	// Upstream does not apply to HTTP/2 connections. See ResetTunnels,
	// H2Conns and TunnelsPerConn.
	ALPN []string
	// H2MaxStreams is the SETTINGS_MAX_CONCURRENT_STREAMS of an HTTP/2
	// connection; zero means net/http's default (250).
	H2MaxStreams uint32
	// RequireAuth, if set, makes the proxy answer 407 with a Basic
	// challenge unless the request carries these credentials.
	RequireAuth *Credentials
	// ChallengeSize, when positive, pads the realm of the RequireAuth
	// challenge so that the Proxy-Authenticate value is this many bytes
	// (60 << 10 for a hostile 60 KB challenge).
	ChallengeSize int
	// Upstream, if set, makes the proxy forward each CONNECT to an
	// upstream proxy and relay its answer, instead of dialing the target;
	// with Forward, requests in absolute form go to it too (its TLS is
	// not used then).
	Upstream *Upstream
	// Forward makes the proxy a forward proxy for plain http too: a
	// connection whose requests come in absolute form ("GET http://h/p")
	// has each forwarded to its (loopback) origin in origin form, without
	// Proxy-Authorization, and the origin's answer written back, the
	// connection kept alive. Without it such a request is answered 405.
	// Script.CloseBeforeForwarding and CloseAfterForwarding script its
	// closes.
	Forward bool
	// Conns scripts connections in accept order; connections beyond it
	// use Default, or else the zero Script.
	Conns   []Script
	Default *Script
	// IdleCut, if set, closes a tunnel this long after the last byte
	// relayed to the client.
	IdleCut time.Duration
	// ReadTimeout, WriteTimeout and DialTimeout default to
	// DefaultReadTimeout, DefaultWriteTimeout and DefaultDialTimeout.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	DialTimeout  time.Duration
	// Logf, if set, receives a line per notable event (for t.Logf).
	Logf func(format string, args ...any)
}

// Request is one CONNECT request as the proxy read it.
type Request struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Method, Target and Proto are the request line's parts.
	Method, Target, Proto string
	// Host is the Host header field.
	Host string
	// Header holds the other header fields, Proxy-Authorization included.
	Header http.Header
	// ALPN is the client's ALPN offer on a TLS proxy; nil otherwise.
	ALPN []string
	// Status is the status the proxy answered; 0 if it never answered
	// itself (stalled, sent Raw, or relayed an upstream's answer).
	Status int
}

func (r Request) clone() Request {
	r.Header = r.Header.Clone()
	r.ALPN = slices.Clone(r.ALPN)
	return r
}

// Server is a running CONNECT proxy. Its methods are safe for concurrent
// use.
type Server struct {
	base
	cfg    Config
	tlsCfg *tls.Config
	cert   kit.Cert
	reqs   []Request // guarded by base.mu

	h2        *h2Front               // serves connections that negotiated h2; nil without TLS
	h2Conns   int                    // guarded by base.mu
	h2Streams map[*h2Stream]struct{} // HTTP/2 tunnels relaying; guarded by base.mu
}

// maxRequestBytes bounds a CONNECT request's header section.
const maxRequestBytes = 64 << 10

// Start starts a CONNECT proxy on 127.0.0.1.
func Start(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, h2Streams: map[*h2Stream]struct{}{}}
	s.cfg.Conns = slices.Clone(cfg.Conns)
	for i, sc := range s.cfg.Conns {
		if err := s.validate(sc); err != nil {
			return nil, errors.New("connectproxy: Conns[" + strconv.Itoa(i) + "]: " + err.Error())
		}
	}
	if cfg.Default != nil {
		if err := s.validate(*cfg.Default); err != nil {
			return nil, errors.New("connectproxy: Default: " + err.Error())
		}
		d := *cfg.Default
		s.cfg.Default = &d
	}
	if cfg.TLS {
		alpn := slices.Clone(cfg.ALPN)
		if alpn == nil {
			alpn = []string{"http/1.1"}
		}
		var err error
		if s.tlsCfg, s.cert, err = kit.NewCert("replaysafe connectproxy test proxy", alpn, tls.VersionTLS12); err != nil {
			return nil, err
		}
	}
	if err := s.init("connectproxy", cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout, cfg.IdleCut, cfg.Logf); err != nil {
		return nil, err
	}
	if s.tlsCfg != nil {
		s.startH2()
	}
	s.serve(s.handle)
	return s, nil
}

func (s *Server) validate(sc Script) error {
	switch {
	case int(sc.Stall) >= pointCount:
		return errors.New("unknown stall point " + sc.Stall.String())
	case !s.cfg.TLS && (sc.Stall == StallBeforeHandshake || sc.Stall == StallAfterHandshake):
		return errors.New("stall point " + sc.Stall.String() + " needs TLS")
	case sc.Status != 0 && (sc.Status < 100 || sc.Status > 999):
		return errors.New("status " + strconv.Itoa(sc.Status) + " is not three digits")
	case sc.StallFor < 0:
		return errors.New("negative StallFor")
	}
	return nil
}

func (s *Server) script(i int) Script {
	switch {
	case i < len(s.cfg.Conns):
		return s.cfg.Conns[i]
	case s.cfg.Default != nil:
		return *s.cfg.Default
	}
	return Script{}
}

// Close stops the proxy: it closes the listener and every connection and
// waits for every goroutine. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeH2()
	return s.close()
}

// URL returns "http://127.0.0.1:port", or "https://..." with TLS.
func (s *Server) URL() string {
	if s.cfg.TLS {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Certificate returns the proxy's self-signed certificate, or nil without
// TLS.
func (s *Server) Certificate() *x509.Certificate { return s.cert.Certificate() }

// CertPool returns a new pool holding only the proxy's certificate, or nil
// without TLS.
func (s *Server) CertPool() *x509.CertPool { return s.cert.CertPool() }

// ClientTLSConfig returns a new client configuration that trusts only the
// proxy's certificate, with ServerName "127.0.0.1" and ALPN "http/1.1";
// nil without TLS.
func (s *Server) ClientTLSConfig() *tls.Config {
	c := s.cert.ClientTLSConfig()
	if c != nil {
		c.NextProtos = []string{"http/1.1"}
	}
	return c
}

// Requests returns copies of the CONNECT requests read so far, in order.
func (s *Server) Requests() []Request {
	return kit.Locked(&s.mu, func() []Request { return kit.Map(s.reqs, Request.clone) })
}

func (s *Server) record(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	return len(s.reqs) - 1
}

func (s *Server) answered(i, status int) {
	s.mu.Lock()
	s.reqs[i].Status = status
	s.mu.Unlock()
}

// handle runs one proxy connection.
func (s *Server) handle(raw net.Conn, index int) {
	sc := s.script(index)
	conn := raw
	var offer []string
	if s.tlsCfg != nil {
		if sc.Stall == StallBeforeHandshake && !s.stall(sc.StallFor) {
			return
		}
		cfg := s.tlsCfg.Clone()
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			offer = slices.Clone(h.SupportedProtos)
			return nil, nil
		}
		tc := tls.Server(raw, cfg)
		raw.SetDeadline(time.Now().Add(s.readTimeout))
		if err := tc.Handshake(); err != nil {
			s.log("conn %d: TLS handshake: %v", index, err)
			return
		}
		raw.SetDeadline(time.Time{})
		conn = tc
		if sc.Stall == StallAfterHandshake && !s.stall(sc.StallFor) {
			return
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			s.serveH2(tc, index, sc, offer)
			return
		}
	}
	if sc.Stall == StallBeforeRequest && !s.stall(sc.StallFor) {
		return
	}
	conn.SetReadDeadline(time.Now().Add(s.readTimeout))
	br := bufio.NewReader(&io.LimitedReader{R: conn, N: maxRequestBytes})
	req, err := http.ReadRequest(br)
	if err != nil {
		s.log("conn %d: reading CONNECT: %v", index, err)
		return
	}
	conn.SetReadDeadline(time.Time{})
	pending, _ := br.Peek(br.Buffered())
	pending = slices.Clone(pending)
	i := s.record(Request{
		Conn: index, Method: req.Method, Target: req.RequestURI, Proto: req.Proto,
		Host: req.Host, Header: req.Header.Clone(), ALPN: offer,
	})
	if sc.Stall == StallAfterRequest && !s.stall(sc.StallFor) {
		return
	}
	if sc.Raw != nil {
		s.write(conn, sc.Raw)
		return
	}
	status := sc.Status
	if status == 0 {
		status = http.StatusOK
	}
	var challenge bool
	switch {
	case req.Method != http.MethodConnect && s.cfg.Forward:
		s.forwardAbsolute(conn, br, req, i, index, sc)
		return
	case req.Method != http.MethodConnect:
		status = http.StatusMethodNotAllowed
	case s.cfg.RequireAuth != nil && req.Header.Get("Proxy-Authorization") != s.cfg.RequireAuth.basic():
		status, challenge = http.StatusProxyAuthRequired, true
	}
	if status < 200 || status > 299 {
		if challenge && s.cfg.ChallengeSize > 0 {
			sc.Header = sc.Header.Clone()
			if sc.Header == nil {
				sc.Header = http.Header{}
			}
			sc.Header.Set("Proxy-Authenticate", challengeOf(s.cfg.ChallengeSize))
			challenge = false
		}
		s.respond(conn, i, sc, status, challenge)
		return
	}
	if s.cfg.Upstream != nil {
		up, err := s.forward(req.RequestURI)
		if err != nil {
			s.log("conn %d: upstream: %v", index, err)
			s.respond(conn, i, Script{}, http.StatusBadGateway, false)
			return
		}
		s.tunnelOpened()
		s.relay(conn, pending, up)
		return
	}
	target, err := s.dial(req.RequestURI)
	if err != nil {
		s.log("conn %d: dial %s: %v", index, req.RequestURI, err)
		code := http.StatusBadGateway
		if errors.Is(err, errNotLoopback) {
			code = http.StatusForbidden
		}
		s.respond(conn, i, Script{}, code, false)
		return
	}
	s.tunnelOpened()
	if !s.respond(conn, i, sc, status, false) {
		s.release(target)
		return
	}
	s.relay(conn, pending, target)
}

// respond writes the response header section (and sc.Extra), stalling
// mid-status-line if the script says so; it reports whether it all went
// out.
func (s *Server) respond(conn net.Conn, i int, sc Script, status int, challenge bool) bool {
	msg := formatResponse(sc, status, challenge || status == http.StatusProxyAuthRequired && sc.Header.Get("Proxy-Authenticate") == "")
	s.answered(i, status)
	if sc.Stall == StallMidResponse {
		const head = len("HTTP/1.1 2")
		if s.write(conn, msg[:head]) != nil || !s.stall(sc.StallFor) {
			return false
		}
		msg = msg[head:]
	}
	return s.write(conn, msg) == nil
}

// formatResponse builds the status line, header fields and sc.Extra.
func formatResponse(sc Script, status int, challenge bool) []byte {
	reason := sc.Reason
	if reason == "" {
		reason = http.StatusText(status)
		if status == http.StatusOK {
			reason = "Connection established"
		}
		if reason == "" {
			reason = "Status"
		}
	}
	h := sc.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if challenge {
		h.Set("Proxy-Authenticate", `Basic realm="connectproxy"`)
	}
	if status >= 300 && h.Get("Content-Length") == "" {
		h.Set("Content-Length", "0")
	}
	b := []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + reason + "\r\n")
	for k, v := range kit.SortedFields(h) {
		b = append(b, k+": "+v+"\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, sc.Extra...)
}

// forward opens a connection to the upstream proxy and sends it a CONNECT
// for target with the upstream's credentials; the upstream's answer
// reaches the client through the relay.
func (s *Server) forward(target string) (net.Conn, error) {
	up := s.cfg.Upstream
	c, err := s.dial(up.Addr)
	if err != nil {
		return nil, err
	}
	conn := c
	if up.TLS != nil {
		tc := tls.Client(c, up.TLS)
		c.SetDeadline(time.Now().Add(s.readTimeout))
		if err := tc.Handshake(); err != nil {
			s.release(c)
			return nil, err
		}
		c.SetDeadline(time.Time{})
		s.swap(c, tc)
		conn = tc
	}
	msg := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if up.Auth != nil {
		msg += "Proxy-Authorization: " + up.Auth.basic() + "\r\n"
	}
	if err := s.write(conn, []byte(msg+"\r\n")); err != nil {
		s.release(c)
		return nil, err
	}
	return conn, nil
}
