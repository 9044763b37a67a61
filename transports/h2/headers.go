package h2

import (
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// fieldOverhead is what RFC 9113 §6.5.2 adds per field to the header list
// size: the octets of name and value plus 32.
const fieldOverhead = 32

// requestHead is a request's header section, validated without the
// connection's lock; the HEADERS frame is encoded from it (and from the
// request's Header) under the lock, in stream order.
type requestHead struct {
	// The pseudo-header fields a stream keeps; :scheme and :protocol are
	// read from the request again when the HEADERS are encoded (a stream
	// is held per request in flight).
	method, authority, path string

	contentLength int64  // -1 unknown, 0 no body
	size          uint64 // the header list size as the server counts it

	// The flags sit together: a stream keeps its head in flight.
	connect    bool // CONNECT (plain or extended): full duplex, no content-length
	extended   bool // extended CONNECT (RFC 8441): needs SETTINGS_ENABLE_CONNECT_PROTOCOL
	sendLength bool // send content-length
	gzip       bool // we add accept-encoding: gzip and decode the response
	userAgent  bool // add the default user-agent
	te         bool // send te: trailers
}

// hasBody reports whether the request has a body to upload.
func (h *requestHead) hasBody() bool { return h.contentLength != 0 }

// bodyLength returns the request body's length as net/http understands
// ContentLength: 0 for none, -1 for unknown.
func bodyLength(req *http.Request) int64 {
	if req.Body == nil || req.Body == http.NoBody {
		return 0
	}
	if req.ContentLength != 0 {
		return req.ContentLength
	}
	return -1
}

// prepareRequest validates req and computes its header section. It
// reads req and its Header only.
func prepareRequest(req *http.Request, compression bool) (requestHead, error) {
	var h requestHead
	if req.URL == nil {
		return h, &RequestError{Reason: "nil URL"}
	}
	h.method = req.Method
	if h.method == "" {
		h.method = http.MethodGet
	}
	if !httpguts.ValidHeaderFieldName(h.method) { // a token
		return h, &RequestError{Reason: "invalid method " + strconv.Quote(h.method)}
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(host)
	if err != nil {
		return h, &RequestError{Reason: "invalid host: " + err.Error()}
	}
	if host == "" || !httpguts.ValidHostHeader(host) {
		return h, &RequestError{Reason: "invalid or missing host " + strconv.Quote(host)}
	}
	h.authority = host
	h.contentLength = bodyLength(req)
	protocol, hasProtocol := req.Header[":protocol"]
	h.connect = h.method == http.MethodConnect
	switch {
	case hasProtocol && !h.connect:
		return h, &RequestError{Reason: ":protocol set on a " + h.method + " request"}
	case hasProtocol:
		if len(protocol) != 1 || protocol[0] == "" || !httpguts.ValidHeaderFieldName(protocol[0]) {
			return h, &RequestError{Reason: "invalid :protocol"}
		}
		h.extended = true
	}
	scheme := requestScheme(req)
	if !h.connect || h.extended {
		if !httpguts.ValidHeaderFieldName(scheme) {
			return h, &RequestError{Reason: "invalid scheme " + strconv.Quote(scheme)}
		}
		h.path = req.URL.RequestURI()
		if !validPath(h.path, h.method) {
			return h, &RequestError{Reason: "invalid path " + strconv.Quote(h.path)}
		}
	}
	h.size = fieldSize(":method", h.method) + fieldSize(":authority", h.authority)
	if h.path != "" {
		h.size += fieldSize(":path", h.path) + fieldSize(":scheme", scheme)
	}
	if h.extended {
		h.size += fieldSize(":protocol", protocol[0])
	}

	_, hasUA := req.Header["User-Agent"]
	h.userAgent = !hasUA
	if h.userAgent {
		h.size += fieldSize("user-agent", DefaultUserAgent)
	}
	for k, vv := range req.Header {
		if k == ":protocol" {
			continue
		}
		lk, ok := lowerHeader(k)
		if !ok || !httpguts.ValidHeaderFieldName(k) {
			return h, &RequestError{Reason: "invalid header field name " + strconv.Quote(k)}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return h, &RequestError{Reason: "invalid value for header field " + strconv.Quote(k)}
			}
		}
		switch lk {
		case "host", "content-length", "keep-alive", "proxy-connection", "trailer":
			continue // Host becomes :authority; we compute content-length and trailer
		case "connection":
			// RFC 9113 §8.2.2: connection-specific fields are not sent.
			// A value other than close or keep-alive asks for something
			// HTTP/2 cannot do.
			for _, v := range vv {
				if v != "" && !strings.EqualFold(v, "close") && !strings.EqualFold(v, "keep-alive") {
					return h, &RequestError{Reason: "invalid Connection header " + strconv.Quote(v)}
				}
			}
			continue
		case "upgrade":
			return h, &RequestError{Reason: "Upgrade is not supported over HTTP/2"}
		case "transfer-encoding":
			if len(vv) != 1 || !strings.EqualFold(vv[0], "chunked") {
				return h, &RequestError{Reason: "invalid Transfer-Encoding"}
			}
			continue
		case "te":
			// §8.2.2: TE may only say "trailers".
			for _, v := range vv {
				if strings.EqualFold(strings.TrimSpace(v), "trailers") {
					h.te = true
				}
			}
			if h.te {
				h.size += fieldSize("te", "trailers")
			}
			continue
		case "accept-encoding":
			compression = false
		case "range":
			compression = false
		case "cookie":
			for _, v := range vv {
				for c := range cookieCrumbs(v) {
					h.size += fieldSize(lk, c)
				}
			}
			continue
		}
		for _, v := range vv {
			h.size += fieldSize(lk, v)
		}
	}
	if len(req.Trailer) > 0 {
		for k := range req.Trailer {
			if _, ok := lowerHeader(k); !ok || !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidTrailerHeader(k) {
				return h, &RequestError{Reason: "invalid trailer field name " + strconv.Quote(k)}
			}
		}
		h.size += fieldSize("trailer", trailerKeys(req.Trailer))
	}
	if compression && h.method != http.MethodHead && !h.connect {
		h.gzip = true
		h.size += fieldSize("accept-encoding", "gzip")
	}
	if !h.connect {
		switch {
		case h.contentLength > 0:
			h.sendLength = true
		case h.contentLength == 0:
			switch h.method {
			case http.MethodPost, http.MethodPut, http.MethodPatch:
				h.sendLength = true
			}
		}
		if h.sendLength {
			h.size += fieldSize("content-length", strconv.FormatInt(h.contentLength, 10))
		}
	}
	return h, nil
}

// requestScheme is req's :scheme: its URL's, https by default.
func requestScheme(req *http.Request) string {
	if req.URL.Scheme == "" {
		return "https"
	}
	return req.URL.Scheme
}

// trailerKeys is the Trailer field announcing the trailer keys of t,
// lower-cased (prepareRequest checked them). It is built again where it is
// written, rather than kept per stream for the rare request with trailers.
func trailerKeys(t http.Header) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		lk, _ := lowerHeader(k)
		keys = append(keys, lk)
	}
	return strings.Join(keys, ",")
}

func fieldSize(name, value string) uint64 {
	return uint64(len(name)) + uint64(len(value)) + fieldOverhead
}

// validPath reports whether p can be a :path (RFC 9113 §8.3.1): an
// origin-form target, or "*" for OPTIONS.
func validPath(p, method string) bool {
	if p == "*" {
		return method == http.MethodOptions
	}
	return strings.HasPrefix(p, "/")
}

// cookieCrumbs yields the cookie-pairs of a Cookie value, split as RFC
// 9113 §8.2.3 allows so that each compresses on its own.
func cookieCrumbs(v string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for { // each pass yields one crumb
			i := strings.Index(v, "; ")
			if i < 0 {
				yield(v)
				return
			}
			if !yield(v[:i]) {
				return
			}
			v = v[i+2:]
		}
	}
}

// encodeRequest writes the request's header block with enc. The caller
// holds the connection's lock (the encoder's dynamic table follows the
// order of the blocks on the wire).
func encodeRequest(enc *hpack.Encoder, h *requestHead, req *http.Request) {
	w := func(name, value string) {
		_ = enc.WriteField(hpack.HeaderField{Name: name, Value: value}) // cannot fail on a bytes.Buffer
	}
	w(":authority", h.authority)
	w(":method", h.method)
	if h.path != "" {
		w(":path", h.path)
		w(":scheme", requestScheme(req))
	}
	if h.extended {
		w(":protocol", req.Header[":protocol"][0]) // validated by prepareRequest
	}
	for k, vv := range req.Header {
		if k == ":protocol" {
			continue
		}
		lk, _ := lowerHeader(k)
		switch lk {
		case "host", "content-length", "connection", "keep-alive", "proxy-connection",
			"transfer-encoding", "upgrade", "te", "trailer":
			continue
		case "user-agent":
			for _, v := range vv {
				if v != "" {
					w(lk, v)
				}
			}
			continue
		case "cookie":
			for _, v := range vv {
				for c := range cookieCrumbs(v) {
					w(lk, c)
				}
			}
			continue
		}
		for _, v := range vv {
			w(lk, v)
		}
	}
	if h.userAgent {
		w("user-agent", DefaultUserAgent)
	}
	if h.te {
		w("te", "trailers")
	}
	if len(req.Trailer) > 0 {
		w("trailer", trailerKeys(req.Trailer))
	}
	if h.gzip {
		w("accept-encoding", "gzip")
	}
	if h.sendLength {
		w("content-length", formatLength(h.contentLength))
	}
}

// encodeTrailer writes a trailer section's header block; it returns its
// size as the server counts it.
func encodeTrailer(enc *hpack.Encoder, trailer http.Header) uint64 {
	var size uint64
	for k, vv := range trailer {
		lk, _ := lowerHeader(k)
		for _, v := range vv {
			_ = enc.WriteField(hpack.HeaderField{Name: lk, Value: v})
			size += fieldSize(lk, v)
		}
	}
	return size
}

// validTrailer checks a request trailer before it is sent.
func validTrailer(trailer http.Header) error {
	for k, vv := range trailer {
		if _, ok := lowerHeader(k); !ok || !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidTrailerHeader(k) {
			return &RequestError{Reason: "invalid trailer field name " + strconv.Quote(k)}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &RequestError{Reason: "invalid value for trailer field " + strconv.Quote(k)}
			}
		}
	}
	return nil
}

func formatLength(n int64) string {
	if n == 0 {
		return "0"
	}
	return strconv.FormatInt(n, 10)
}

// commonHeaders lists the field names whose lower-case and canonical
// forms are looked up rather than computed (which would allocate).
var commonHeaders = []string{
	"accept", "accept-charset", "accept-encoding", "accept-language", "accept-ranges",
	"age", "access-control-allow-credentials", "access-control-allow-headers",
	"access-control-allow-methods", "access-control-allow-origin", "access-control-expose-headers",
	"access-control-max-age", "access-control-request-headers", "access-control-request-method",
	"allow", "alt-svc", "authorization", "cache-control", "content-disposition", "content-encoding",
	"content-language", "content-length", "content-location", "content-range", "content-type",
	"cookie", "date", "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since",
	"if-none-match", "if-range", "if-unmodified-since", "last-modified", "link", "location",
	"max-forwards", "origin", "priority", "proxy-authenticate", "proxy-authorization", "range",
	"referer", "refresh", "retry-after", "server", "set-cookie", "strict-transport-security",
	"te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via",
	"www-authenticate", "x-content-type-options", "x-forwarded-for", "x-forwarded-proto",
	"x-frame-options", "x-request-id", "x-xss-protection", "idempotency-key", "x-idempotency-key",
	"connection", "keep-alive", "proxy-connection",
}

var (
	lowerOf     = make(map[string]string, len(commonHeaders)) // canonical -> lower
	canonicalOf = make(map[string]string, len(commonHeaders)) // lower -> canonical
)

func init() {
	for _, lk := range commonHeaders {
		ck := http.CanonicalHeaderKey(lk)
		lowerOf[ck] = lk
		canonicalOf[lk] = ck
	}
}

// lowerHeader returns the lower-case form of a header field name; ok is
// false for a name that is not ASCII (never valid).
func lowerHeader(k string) (string, bool) {
	if lk, ok := lowerOf[k]; ok {
		return lk, true
	}
	upper := false
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 0x80 {
			return "", false
		}
		if 'A' <= c && c <= 'Z' {
			upper = true
		}
	}
	if !upper {
		return k, true
	}
	return strings.ToLower(k), true
}

// canonicalHeader returns the canonical form of a lower-case field name.
func canonicalHeader(lk string) string {
	if ck, ok := canonicalOf[lk]; ok {
		return ck
	}
	return http.CanonicalHeaderKey(lk)
}

// validResponseName reports whether a received field name is valid in
// HTTP/2 (RFC 9113 §8.2.1): a token with no upper-case letters.
func validResponseName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return httpguts.ValidHeaderFieldName(name)
}

// validResponseValue reports whether a received field value is valid
// (RFC 9113 §8.2.1: no NUL, CR or LF; and net/http's rule: no other
// control character but HTAB).
func validResponseValue(v string) bool { return httpguts.ValidHeaderFieldValue(v) }

// connectionSpecific reports whether a received field is one RFC 9113
// §8.2.2 forbids in HTTP/2 messages.
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// buildHeader makes an http.Header of the regular fields, sharing one
// backing array for the values.
func buildHeader(fields []hpack.HeaderField) http.Header {
	n := 0
	for _, f := range fields {
		if !f.IsPseudo() {
			n++
		}
	}
	h := make(http.Header, n)
	vals := make([]string, 0, n)
	for _, f := range fields {
		if f.IsPseudo() {
			continue
		}
		ck := canonicalHeader(f.Name)
		if cur, ok := h[ck]; ok {
			h[ck] = append(cur, f.Value)
			continue
		}
		vals = append(vals, f.Value)
		h[ck] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	return h
}
