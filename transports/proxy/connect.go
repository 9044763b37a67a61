package proxy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/replaysafe/replaysafe/fsm/route"
)

// MaxHeaderBytes bounds the header section of a CONNECT response, from
// the status line through the empty line that ends it.
const MaxHeaderBytes = 64 << 10

// ErrIncomplete is returned by the CONNECT response parsers when the
// bytes so far are a valid beginning of a header section that has not
// ended yet: read more and parse again.
var ErrIncomplete = errors.New("proxy: CONNECT response header section incomplete")

// ErrHeaderTooLarge is wrapped by the *ParseError returned when a CONNECT
// response header section does not end within MaxHeaderBytes.
var ErrHeaderTooLarge = errors.New("proxy: CONNECT response header section larger than MaxHeaderBytes")

// ParseError reports a malformed CONNECT response. It is the proxy's
// fault.
type ParseError struct {
	// Offset is the position of the start of the offending line in the
	// response.
	Offset int
	// Reason says what is wrong.
	Reason string
	// Err is ErrHeaderTooLarge for an oversized header section; nil
	// otherwise.
	Err error
}

// Error says where the response is malformed and how.
func (e *ParseError) Error() string {
	return "proxy: malformed CONNECT response at byte " + strconv.Itoa(e.Offset) + ": " + e.Reason
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }

// Response is the header section of a CONNECT response.
type Response struct {
	// Proto is the status line's version, "HTTP/1.0" or "HTTP/1.1".
	Proto string
	// StatusCode is the three-digit status code, 100 to 599.
	StatusCode int
	// Reason is the reason phrase exactly as sent; it may be empty.
	Reason string
	// Header holds the header fields, keyed canonically.
	Header http.Header
}

// ParseConnectResponse parses the beginning of a CONNECT response. On
// success headerLen is the length of the header section, never more than
// len(b) or MaxHeaderBytes; the bytes after it belong to the tunnel. The
// error is ErrIncomplete when b is a valid but unfinished beginning, and
// a *ParseError when b is malformed or its header section does not end
// within MaxHeaderBytes. Only complete lines are judged, so a prefix of b
// parses either as incomplete or exactly as b does.
//
// It is a pure function over b: the fuzz target's subject.
func ParseConnectResponse(b []byte) (status int, reason string, headerLen int, err error) {
	resp, n, err := parseConnect(b, false)
	if err != nil {
		return 0, "", 0, err
	}
	return resp.StatusCode, resp.Reason, n, nil
}

// ParseConnectHeader is ParseConnectResponse that also returns the
// version and the header fields.
func ParseConnectHeader(b []byte) (resp Response, headerLen int, err error) {
	return parseConnect(b, true)
}

// parseConnect judges b line by line.
func parseConnect(b []byte, fields bool) (Response, int, error) {
	p := newConnectParser(fields)
	n, err := p.parse(b)
	if err != nil {
		return Response{}, 0, err
	}
	return p.resp, n, nil
}

// connectParser judges a CONNECT response header section that arrives in
// pieces, resuming where the previous call stopped: each byte is searched
// for a line end once and each line judged once, so a response dribbled
// one byte at a time costs time linear in its length. Lines end in LF,
// optionally preceded by CR (RFC 9112 §2.2 lets a recipient accept a bare
// LF).
type connectParser struct {
	resp    Response
	pos     int  // start of the next line to judge
	scanned int  // bytes from pos already searched for LF
	started bool // the status line was judged
}

func newConnectParser(fields bool) *connectParser {
	p := &connectParser{}
	if fields {
		p.resp.Header = http.Header{}
	}
	return p
}

// parse judges b, the whole response so far: every call must pass the
// bytes of the previous call as b's prefix. It returns the header
// section's length, ErrIncomplete, or a *ParseError.
func (p *connectParser) parse(b []byte) (int, error) {
	limit := min(len(b), MaxHeaderBytes)
	for {
		from := p.pos + p.scanned
		i := -1
		if from < limit {
			i = bytes.IndexByte(b[from:limit], '\n')
		}
		if i < 0 {
			p.scanned = max(limit-p.pos, 0)
			if len(b) >= MaxHeaderBytes {
				return 0, &ParseError{Offset: p.pos, Reason: "header section does not end within " + strconv.Itoa(MaxHeaderBytes) + " bytes", Err: ErrHeaderTooLarge}
			}
			return 0, ErrIncomplete
		}
		end := from + i
		start := p.pos
		line := bytes.TrimSuffix(b[start:end], []byte{'\r'})
		p.pos, p.scanned = end+1, 0
		if !p.started {
			p.started = true
			if err := parseStatusLine(line, &p.resp); err != "" {
				return 0, &ParseError{Offset: start, Reason: err}
			}
			continue
		}
		if len(line) == 0 {
			return p.pos, nil
		}
		if err := parseField(line, p.resp.Header); err != "" {
			return 0, &ParseError{Offset: start, Reason: err}
		}
	}
}

// parseStatusLine parses "HTTP/1.x SP 3DIGIT [SP reason-phrase]" (RFC
// 9112 §4) into resp; a non-empty result says what is wrong. A missing
// space after the code is accepted, as net/http does.
func parseStatusLine(line []byte, resp *Response) string {
	if len(line) == 0 {
		return "empty status line"
	}
	if len(line) < len("HTTP/1.1 200") || string(line[:5]) != "HTTP/" || !isDigit(line[5]) || line[6] != '.' || !isDigit(line[7]) || line[8] != ' ' {
		return "status line does not start with HTTP/d.d and a space: " + quotePrefix(line)
	}
	if line[5] != '1' || (line[7] != '0' && line[7] != '1') {
		return "unsupported version " + string(line[:8])
	}
	if !isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) {
		return "status code is not three digits: " + quotePrefix(line)
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if code < 100 {
		return "status code " + strconv.Itoa(code) + " below 100"
	}
	reason := line[12:]
	if len(reason) > 0 {
		if reason[0] != ' ' {
			return "no space between status code and reason phrase"
		}
		reason = reason[1:]
	}
	for _, c := range reason {
		if isCtl(c) && c != '\t' {
			return "control character in reason phrase"
		}
	}
	resp.Proto = string(line[:8])
	resp.StatusCode = code
	resp.Reason = string(reason)
	return ""
}

// parseField parses "name: value" (RFC 9112 §5) into h, if h is not nil;
// a non-empty result says what is wrong.
func parseField(line []byte, h http.Header) string {
	if line[0] == ' ' || line[0] == '\t' {
		return "obsolete line folding"
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return "header field line without a colon: " + quotePrefix(line)
	}
	name := line[:colon]
	if len(name) == 0 {
		return "empty header field name"
	}
	for _, c := range name {
		if !isTokenByte(c) {
			return "invalid character " + strconv.QuoteRune(rune(c)) + " in header field name " + quotePrefix(name)
		}
	}
	value := bytes.Trim(line[colon+1:], " \t")
	for _, c := range value {
		if isCtl(c) && c != '\t' {
			return "control character in value of " + quotePrefix(name)
		}
	}
	if h != nil {
		k := textproto.CanonicalMIMEHeaderKey(string(name))
		h[k] = append(h[k], string(value))
	}
	return ""
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isCtl(c byte) bool { return c < 0x20 || c == 0x7f }

// isTokenByte reports whether c is a tchar (RFC 9110 §5.6.2).
func isTokenByte(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// quotePrefix quotes the first bytes of line for an error message.
func quotePrefix(line []byte) string {
	const n = 40
	if len(line) > n {
		return strconv.Quote(string(line[:n])) + "..."
	}
	return strconv.Quote(string(line))
}

// Auth holds the credentials for one proxy hop: sent as Basic
// Proxy-Authorization (RFC 7617) to an HTTP or HTTPS proxy, or as SOCKS5
// username/password authentication (RFC 1929). Its String hides the
// password.
type Auth struct {
	Username string
	Password string
}

// String prints the user name and hides the password.
func (a *Auth) String() string {
	if a == nil {
		return "<nil>"
	}
	return "Auth{" + strconv.Quote(a.Username) + ", password hidden}"
}

// GoString hides the password from %#v as well.
func (a *Auth) GoString() string { return a.String() }

// basic returns the Basic Proxy-Authorization value.
func (a *Auth) basic() (string, error) {
	if strings.IndexByte(a.Username, ':') >= 0 {
		return "", errors.New("proxy: user name contains a colon, which Basic authentication cannot carry (RFC 7617 §2)")
	}
	if hasCtl(a.Username) || hasCtl(a.Password) {
		return "", errors.New("proxy: control character in proxy credentials")
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(a.Username+":"+a.Password)), nil
}

func hasCtl(s string) bool {
	for i := 0; i < len(s); i++ {
		if isCtl(s[i]) {
			return true
		}
	}
	return false
}

// ConnectRequest is one CONNECT exchange with one proxy hop.
type ConnectRequest struct {
	// Target is the "host:port" the tunnel should reach: the next hop, or
	// the origin at the last hop.
	Target string
	// Auth, if set, is sent as Basic Proxy-Authorization to this hop and
	// to no other.
	Auth *Auth
	// Header holds extra header fields for this hop only. Host and
	// Proxy-Authorization in it are ignored.
	Header http.Header
	// Hop and Proxy label errors: the hop's 1-based position in the chain
	// and its address.
	Hop   int
	Proxy string
}

// AppendConnectRequest appends the CONNECT request's bytes to dst:
// request target and Host in authority form (RFC 9110 §9.3.6), then
// Proxy-Authorization and any extra fields.
func AppendConnectRequest(dst []byte, req ConnectRequest) ([]byte, error) {
	host, port, err := net.SplitHostPort(req.Target)
	if err != nil || host == "" || port == "" || hasSpaceOrCtl(req.Target) {
		return dst, errors.New("proxy: CONNECT target " + strconv.Quote(req.Target) + " is not host:port")
	}
	dst = append(dst, "CONNECT "...)
	dst = append(dst, req.Target...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, req.Target...)
	dst = append(dst, "\r\n"...)
	if req.Auth != nil {
		v, err := req.Auth.basic()
		if err != nil {
			return dst, err
		}
		dst = append(dst, "Proxy-Authorization: "...)
		dst = append(dst, v...)
		dst = append(dst, "\r\n"...)
	}
	for k, vs := range req.Header {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if ck == "Host" || ck == "Proxy-Authorization" {
			continue
		}
		if k == "" || strings.IndexFunc(k, func(r rune) bool { return r > 0x7f || !isTokenByte(byte(r)) }) >= 0 {
			return dst, errors.New("proxy: invalid CONNECT header field name " + strconv.Quote(k))
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				return dst, errors.New("proxy: line break or NUL in CONNECT header field " + ck)
			}
			dst = append(dst, ck...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	return append(dst, "\r\n"...), nil
}

func hasSpaceOrCtl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0
}

// ConnectError reports a CONNECT response that did not open a tunnel:
// any status outside 2xx (RFC 9110 §9.3.6). The informational, redirect,
// client-error and server-error classes all fail.
type ConnectError struct {
	Hop        int    // 1-based position of the proxy in the chain
	Proxy      string // the proxy's address
	Target     string // what the CONNECT asked for
	StatusCode int
	Status     string // the reason phrase as the proxy sent it
	// ProxyAuthenticate holds the Proxy-Authenticate challenges of a 407.
	ProxyAuthenticate []string
	// Header holds all of the response's header fields.
	Header http.Header
}

// Error names the hop, the proxy, the target and the status, with any
// Proxy-Authenticate challenges. The reason phrase and the challenges
// come from the proxy: each is quoted up to MaxPeerText bytes, and the
// message says how many bytes it cut.
func (e *ConnectError) Error() string {
	s := "proxy: hop " + strconv.Itoa(e.Hop) + " (" + e.Proxy + ") refused CONNECT " + e.Target + ": " + strconv.Itoa(e.StatusCode)
	if e.Status != "" {
		s += " " + peerText(e.Status)
	}
	if len(e.ProxyAuthenticate) > 0 {
		s += " (Proxy-Authenticate: " + peerText(strings.Join(e.ProxyAuthenticate, ", ")) + ")"
	}
	return s
}

// Connect runs the CONNECT exchange on conn, which must reach the proxy
// (directly, over TLS or through earlier tunnels). Deadlines are the
// caller's: Connect sets none. It returns the tunnel, which first yields
// any bytes the proxy sent after its response header section, and the
// response; or a *ConnectError for a status outside 2xx (with the
// response), or a *StepError (step connect) wrapping a *ParseError or the
// I/O error. On error the caller closes conn.
func Connect(conn net.Conn, req ConnectRequest) (net.Conn, *Response, error) {
	tunnel, resp, err := exchange(conn, req)
	if err != nil {
		var ce *ConnectError
		if !errors.As(err, &ce) {
			err = &StepError{Step: route.StepConnect, Hop: req.Hop, Addr: req.Proxy, Err: err}
		}
		return nil, resp, err
	}
	return tunnel, resp, nil
}

// exchange is Connect with unwrapped errors.
func exchange(conn net.Conn, req ConnectRequest) (net.Conn, *Response, error) {
	msg, err := AppendConnectRequest(nil, req)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(msg); err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 0, 4<<10)
	p := newConnectParser(true)
	for empty := 0; ; {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(len(buf), MaxHeaderBytes-len(buf)))
		}
		n, rerr := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			hlen, perr := p.parse(buf)
			if perr == nil {
				return finish(conn, req, &p.resp, buf[hlen:])
			}
			if !errors.Is(perr, ErrIncomplete) {
				return nil, nil, perr
			}
		}
		switch {
		case rerr == io.EOF:
			return nil, nil, errUnexpectedEOF
		case rerr != nil:
			return nil, nil, rerr
		case n == 0:
			// Read returned nothing and no error: bound the loop.
			if empty++; empty > 100 {
				return nil, nil, io.ErrNoProgress
			}
		}
	}
}

// errUnexpectedEOF reports a proxy that closed before its CONNECT
// response header section ended.
var errUnexpectedEOF = fmt.Errorf("proxy closed the connection before the CONNECT response header section ended: %w", io.ErrUnexpectedEOF)

func finish(conn net.Conn, req ConnectRequest, resp *Response, rest []byte) (net.Conn, *Response, error) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, resp, &ConnectError{
			Hop: req.Hop, Proxy: req.Proxy, Target: req.Target,
			StatusCode: resp.StatusCode, Status: resp.Reason,
			ProxyAuthenticate: resp.Header.Values("Proxy-Authenticate"),
			Header:            resp.Header,
		}
	}
	// A client ignores Content-Length and Transfer-Encoding in a 2xx
	// response to CONNECT (RFC 9110 §9.3.6): every later byte is tunnel
	// data.
	if len(rest) == 0 {
		return conn, resp, nil
	}
	return &tunnelConn{Conn: conn, pending: bytes.Clone(rest)}, resp, nil
}

// tunnelConn is a tunnel whose first bytes were read with the CONNECT
// response.
type tunnelConn struct {
	net.Conn
	pending []byte
}

// Read yields the bytes read with the CONNECT response first.
func (c *tunnelConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn returns the connection under the tunnel.
func (c *tunnelConn) NetConn() net.Conn { return c.Conn }
