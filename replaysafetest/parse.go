package replaysafetest

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// parseError is a request the server cannot parse; it is answered with 400.
type parseError struct{ msg string }

func (e *parseError) Error() string { return "scripted: bad request: " + e.msg }

func badRequest(msg string) error { return &parseError{msg} }

var errTooLarge = badRequest("request exceeds MaxRequestBytes")

// pstate is the position of the parser inside a request.
type pstate uint8

const (
	psRequestLine pstate = iota // before the request line (blank lines skipped)
	psHeader                    // inside the header section
	psBody                      // Content-Length body
	psChunkSize                 // expecting a chunk-size line
	psChunkData                 // inside chunk data
	psChunkEnd                  // expecting the CRLF after chunk data
	psTrailer                   // inside the trailer section
	psDone                      // request complete
)

// parser reads one request incrementally from a buffer that only grows
// until the request is complete. pos counts the bytes of the buffer that
// belong to the request so far; scan is where the search for the next LF
// resumes, so a slowly arriving line is not rescanned.
type parser struct {
	max  int
	pos  int
	scan int
	st   pstate
	need int // bytes still expected: Content-Length body or chunk data
	rec  Received
}

func newParser(max int) parser { return parser{max: max} }

// line returns the next line without its terminator (CRLF, or a bare LF as
// RFC 9112 §2.2 allows). ok is false when the line is not complete yet.
func (p *parser) line(buf []byte) (line []byte, ok bool, err error) {
	from := max(p.scan, p.pos)
	i := bytes.IndexByte(buf[from:], '\n')
	if i < 0 {
		p.scan = len(buf)
		if len(buf) > p.max {
			return nil, false, errTooLarge
		}
		return nil, false, nil
	}
	end := from + i
	line = buf[p.pos:end]
	p.pos, p.scan = end+1, end+1
	if p.pos > p.max {
		return nil, false, errTooLarge
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, false, badRequest("bare CR")
	}
	return line, true, nil
}

// step advances the parser over buf, which holds the request from its
// first byte. It reports whether the request is complete; on an error the
// request is malformed or too large.
func (p *parser) step(buf []byte) (done bool, err error) {
	for {
		switch p.st {
		case psRequestLine:
			ln, ok, err := p.line(buf)
			if !ok {
				return false, err
			}
			if len(ln) == 0 {
				continue // RFC 9112 §2.2: ignore empty lines before the request line
			}
			if err := p.requestLine(string(ln)); err != nil {
				return false, err
			}
			p.rec.Header = http.Header{}
			p.st = psHeader
		case psHeader:
			ln, ok, err := p.line(buf)
			if !ok {
				return false, err
			}
			if len(ln) > 0 {
				if err := addField(p.rec.Header, ln); err != nil {
					return false, err
				}
				continue
			}
			if err := p.framing(); err != nil {
				return false, err
			}
		case psBody, psChunkData:
			if p.need > p.max-p.pos {
				return false, errTooLarge
			}
			if len(buf)-p.pos < p.need {
				return false, nil
			}
			p.rec.Body = append(p.rec.Body, buf[p.pos:p.pos+p.need]...)
			p.pos += p.need
			p.need = 0
			if p.st == psBody {
				p.st = psDone
			} else {
				p.st = psChunkEnd
			}
		case psChunkSize:
			ln, ok, err := p.line(buf)
			if !ok {
				return false, err
			}
			n, err := chunkSize(ln)
			if err != nil {
				return false, err
			}
			if n > int64(p.max) {
				return false, errTooLarge
			}
			if n == 0 {
				p.st = psTrailer
				continue
			}
			p.need, p.st = int(n), psChunkData
		case psChunkEnd:
			ln, ok, err := p.line(buf)
			if !ok {
				return false, err
			}
			if len(ln) != 0 {
				return false, badRequest("missing CRLF after chunk data")
			}
			p.st = psChunkSize
		case psTrailer:
			ln, ok, err := p.line(buf)
			if !ok {
				return false, err
			}
			if len(ln) == 0 {
				p.st = psDone
				continue
			}
			if p.rec.Trailer == nil {
				p.rec.Trailer = http.Header{}
			}
			if err := addField(p.rec.Trailer, ln); err != nil {
				return false, err
			}
		case psDone:
			if p.rec.Body == nil {
				p.rec.Body = []byte{}
			}
			return true, nil
		}
	}
}

// requestLine parses "method SP request-target SP HTTP-version".
func (p *parser) requestLine(ln string) error {
	method, rest, ok1 := strings.Cut(ln, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return badRequest("malformed request line")
	}
	if !isToken(method) {
		return badRequest("malformed method")
	}
	if target == "" || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return badRequest("malformed request target")
	}
	if len(proto) != 8 || !strings.HasPrefix(proto, "HTTP/1.") || proto[7] < '0' || proto[7] > '9' {
		return badRequest("unsupported protocol version")
	}
	p.rec.Method, p.rec.Target, p.rec.Proto = method, target, proto
	return nil
}

// framing decides how the body is delimited (RFC 9112 §6.3).
func (p *parser) framing() error {
	h := p.rec.Header
	te, hasTE := h["Transfer-Encoding"]
	cl, hasCL := h["Content-Length"]
	switch {
	case hasTE && hasCL:
		return badRequest("both Transfer-Encoding and Content-Length")
	case hasTE:
		codings := splitList(te)
		if len(codings) == 0 || !strings.EqualFold(codings[len(codings)-1], "chunked") {
			return badRequest("chunked is not the final transfer coding")
		}
		p.st = psChunkSize
	case hasCL:
		vals := splitList(cl)
		if len(vals) == 0 {
			return badRequest("empty Content-Length")
		}
		for _, v := range vals[1:] {
			if v != vals[0] {
				return badRequest("conflicting Content-Length values")
			}
		}
		if strings.TrimLeft(vals[0], "0123456789") != "" {
			return badRequest("malformed Content-Length")
		}
		n, err := strconv.ParseInt(vals[0], 10, 64)
		if err != nil || n > int64(p.max) {
			return errTooLarge
		}
		p.need, p.st = int(n), psBody
	default:
		p.st = psDone
	}
	return nil
}

// addField parses "name: value" into h.
func addField(h http.Header, ln []byte) error {
	if ln[0] == ' ' || ln[0] == '\t' {
		return badRequest("obsolete line folding")
	}
	name, value, ok := bytes.Cut(ln, []byte(":"))
	if !ok || !isToken(string(name)) {
		return badRequest("malformed header field")
	}
	value = bytes.Trim(value, " \t")
	for _, b := range value {
		if (b < ' ' && b != '\t') || b == 0x7f {
			return badRequest("control character in field value")
		}
	}
	key := textproto.CanonicalMIMEHeaderKey(string(name))
	h[key] = append(h[key], string(value))
	return nil
}

// chunkSize parses a chunk-size line: hex digits, then optional extensions.
func chunkSize(ln []byte) (int64, error) {
	size, _, _ := bytes.Cut(ln, []byte(";"))
	size = bytes.TrimRight(size, " \t")
	if len(size) == 0 || len(size) > 15 {
		return 0, badRequest("malformed chunk size")
	}
	n, err := strconv.ParseInt(string(size), 16, 64)
	if err != nil || n < 0 || size[0] == '+' || size[0] == '-' {
		return 0, badRequest("malformed chunk size")
	}
	return n, nil
}

// splitList splits comma-separated field values, dropping empty elements.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated values contain tok,
// case-insensitively.
func hasToken(vals []string, tok string) bool {
	for _, v := range splitList(vals) {
		if strings.EqualFold(v, tok) {
			return true
		}
	}
	return false
}
