package connectproxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// SOCKS5 wire constants (RFC 1928, RFC 1929).
const (
	socksVersion     = 0x05
	authNone         = 0x00
	authUserPass     = 0x02
	authNoAcceptable = 0xff
	userPassVersion  = 0x01
	cmdConnect       = 0x01
	atypIPv4         = 0x01
	atypFQDN         = 0x03
	atypIPv6         = 0x04

	replySucceeded        = 0x00
	replyNotAllowed       = 0x02
	replyHostUnreachable  = 0x04
	replyCmdNotSupported  = 0x07
	replyAtypNotSupported = 0x08
)

// SOCKSConfig configures a SOCKS5 proxy. The zero SOCKSConfig accepts
// clients without authentication and tunnels every CONNECT.
type SOCKSConfig struct {
	// RequireAuth, if set, makes the proxy insist on username/password
	// authentication with these credentials (RFC 1929).
	RequireAuth *Credentials
	// Stall, if StallBeforeRequest or StallAfterRequest, makes every
	// connection wait before reading the greeting, or after reading the
	// CONNECT request, for StallFor (DefaultStall if zero) or until Close.
	Stall    Point
	StallFor time.Duration
	// IdleCut, ReadTimeout, WriteTimeout, DialTimeout and Logf are as in
	// Config.
	IdleCut      time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	DialTimeout  time.Duration
	Logf         func(format string, args ...any)
}

// SOCKSRequest is one SOCKS5 session as the proxy read it.
type SOCKSRequest struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Methods are the authentication methods the client offered.
	Methods []byte
	// Username and Password are what the client sent in RFC 1929
	// authentication; empty without it.
	Username, Password string
	// Target is the CONNECT destination as "host:port"; empty if the
	// session ended before the request.
	Target string
	// Reply is the reply code the proxy sent (0 succeeded); -1 if none.
	Reply int
}

// SOCKSServer is a running SOCKS5 proxy. Its methods are safe for
// concurrent use.
type SOCKSServer struct {
	base
	cfg  SOCKSConfig
	reqs []SOCKSRequest // guarded by base.mu
}

// StartSOCKS5 starts a SOCKS5 proxy on 127.0.0.1.
func StartSOCKS5(cfg SOCKSConfig) (*SOCKSServer, error) {
	switch cfg.Stall {
	case StallNone, StallBeforeRequest, StallAfterRequest:
	default:
		return nil, errors.New("connectproxy: SOCKS5 cannot stall at " + cfg.Stall.String())
	}
	if cfg.StallFor < 0 {
		return nil, errors.New("connectproxy: negative StallFor")
	}
	s := &SOCKSServer{cfg: cfg}
	if err := s.init("socks5", cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout, cfg.IdleCut, cfg.Logf); err != nil {
		return nil, err
	}
	s.serve(s.handle)
	return s, nil
}

// Close stops the proxy: it closes the listener and every connection and
// waits for every goroutine. It is safe to call more than once.
func (s *SOCKSServer) Close() error { return s.close() }

// URL returns "socks5://127.0.0.1:port".
func (s *SOCKSServer) URL() string { return "socks5://" + s.Addr() }

// Requests returns copies of the sessions recorded so far, in order.
func (s *SOCKSServer) Requests() []SOCKSRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SOCKSRequest, len(s.reqs))
	for i, r := range s.reqs {
		r.Methods = slices.Clone(r.Methods)
		out[i] = r
	}
	return out
}

// update changes session i under the lock.
func (s *SOCKSServer) update(i int, f func(r *SOCKSRequest)) {
	s.mu.Lock()
	f(&s.reqs[i])
	s.mu.Unlock()
}

func (s *SOCKSServer) handle(conn net.Conn, index int) {
	if s.cfg.Stall == StallBeforeRequest && !s.stall(s.cfg.StallFor) {
		return
	}
	conn.SetReadDeadline(time.Now().Add(s.readTimeout))
	var hdr [2]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil || hdr[0] != socksVersion {
		s.log("conn %d: bad greeting: %v", index, err)
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(conn, methods); err != nil {
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, SOCKSRequest{Conn: index, Methods: methods, Reply: -1})
	i := len(s.reqs) - 1
	s.mu.Unlock()

	want := byte(authNone)
	if s.cfg.RequireAuth != nil {
		want = authUserPass
	}
	if !slices.Contains(methods, want) {
		s.write(conn, []byte{socksVersion, authNoAcceptable})
		return
	}
	if s.write(conn, []byte{socksVersion, want}) != nil {
		return
	}
	if want == authUserPass && !s.authenticate(conn, i) {
		return
	}
	target, reply, ok := s.readRequest(conn)
	if !ok {
		return
	}
	s.update(i, func(r *SOCKSRequest) { r.Target = target })
	if s.cfg.Stall == StallAfterRequest && !s.stall(s.cfg.StallFor) {
		return
	}
	conn.SetReadDeadline(time.Time{})
	var up net.Conn
	if reply == replySucceeded {
		c, err := s.dial(target)
		switch {
		case errors.Is(err, errNotLoopback):
			reply = replyNotAllowed
		case err != nil:
			s.log("conn %d: dial %s: %v", index, target, err)
			reply = replyHostUnreachable
		default:
			up = c
		}
	}
	s.update(i, func(r *SOCKSRequest) { r.Reply = int(reply) })
	// The bound address is not meaningful here: report 0.0.0.0:0.
	if s.write(conn, []byte{socksVersion, reply, 0, atypIPv4, 0, 0, 0, 0, 0, 0}) != nil || up == nil {
		if up != nil {
			s.release(up)
		}
		return
	}
	s.tunnelOpened()
	s.relay(conn, nil, up)
}

// authenticate runs RFC 1929 username/password authentication.
func (s *SOCKSServer) authenticate(conn net.Conn, i int) bool {
	var b [2]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != userPassVersion {
		return false
	}
	user := make([]byte, b[1])
	if _, err := io.ReadFull(conn, user); err != nil {
		return false
	}
	if _, err := io.ReadFull(conn, b[:1]); err != nil {
		return false
	}
	pass := make([]byte, b[0])
	if _, err := io.ReadFull(conn, pass); err != nil {
		return false
	}
	s.update(i, func(r *SOCKSRequest) { r.Username, r.Password = string(user), string(pass) })
	ok := string(user) == s.cfg.RequireAuth.Username && string(pass) == s.cfg.RequireAuth.Password
	status := byte(0)
	if !ok {
		status = 1
	}
	return s.write(conn, []byte{userPassVersion, status}) == nil && ok
}

// readRequest reads a CONNECT request and returns its target and the
// reply it deserves; ok is false if the connection is unusable.
func (s *SOCKSServer) readRequest(conn net.Conn) (target string, reply byte, ok bool) {
	var h [4]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil || h[0] != socksVersion {
		return "", 0, false
	}
	var host string
	switch h[3] {
	case atypIPv4, atypIPv6:
		n := 4
		if h[3] == atypIPv6 {
			n = 16
		}
		ip := make([]byte, n)
		if _, err := io.ReadFull(conn, ip); err != nil {
			return "", 0, false
		}
		a, _ := netip.AddrFromSlice(ip)
		host = a.String()
	case atypFQDN:
		var l [1]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return "", 0, false
		}
		name := make([]byte, l[0])
		if _, err := io.ReadFull(conn, name); err != nil {
			return "", 0, false
		}
		host = string(name)
	default:
		s.write(conn, []byte{socksVersion, replyAtypNotSupported, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
		return "", 0, false
	}
	var p [2]byte
	if _, err := io.ReadFull(conn, p[:]); err != nil {
		return "", 0, false
	}
	target = net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(p[:]))))
	if h[1] != cmdConnect {
		return target, replyCmdNotSupported, true
	}
	return target, replySucceeded, true
}
