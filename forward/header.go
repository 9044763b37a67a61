package forward

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// hopByHop are the fields that describe one connection and are never
// forwarded (RFC 9110 §7.6.1: Connection, Proxy-Connection, Keep-Alive,
// TE, Transfer-Encoding, Upgrade), with Proxy-Authenticate and
// Proxy-Authorization (meant for this hop) and Trailer (the forwarder
// announces the trailers it forwards itself).
var hopByHop = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Te",
	"Transfer-Encoding",
	"Upgrade",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Trailer",
}

// removeConnectionFields deletes every field a Connection field names
// and every hop-by-hop field from h. Each option is looked up in its
// canonical form, built in a buffer: a string per option would let the
// peer make the Forwarder allocate many times the field's size.
func removeConnectionFields(h http.Header) {
	var buf [64]byte
	for tok := range connectionOptions(h) {
		if key, ok := canonicalKey(buf[:0], tok); ok {
			delete(h, string(key)) // the compiler makes no string of key here
		} else {
			h.Del(tok) // long, or no token: Del copies it at most once
		}
	}
	for _, f := range hopByHop {
		h.Del(f)
	}
}

// canonicalKey appends to dst the form textproto.CanonicalMIMEHeaderKey
// gives name, and reports false, leaving it to that function, when name
// is longer than dst's capacity or no valid field name (which it leaves
// as it is).
func canonicalKey(dst []byte, name string) ([]byte, bool) {
	if len(name) > cap(dst) || !httpguts.ValidHeaderFieldName(name) {
		return nil, false
	}
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst, true
}

// cleanRequestHeader rewrites h, the header of an inbound request, for
// the egress that d plans: it removes the fields Connection names and the
// hop-by-hop fields, then regenerates what the egress needs.
//
//   - ModeUpgrade keeps exactly "Connection: Upgrade" and the Upgrade
//     value (RFC 9110 §7.8); ModeExtendedConnect to HTTP/1.1 egress, which
//     goes out as an HTTP/1.1 Upgrade, gets them (and the pseudo-header
//     field ":protocol" goes); to HTTP/2 or HTTP/3 egress it keeps its
//     ":protocol" (d.Upgrade) alone.
//   - When d.Trailers, HTTP/1.1 egress gets "Connection: TE" and "TE:
//     trailers" (RFC 9110 §10.1.4: a sender of TE also sends the TE
//     connection option); HTTP/2 and HTTP/3 egress get "TE: trailers"
//     alone (RFC 9113 §8.2.2); an ALPN egress, which may turn out to be
//     either, gets no TE.
//   - Without d.Trailers no TE goes out.
func cleanRequestHeader(h http.Header, d Dispatch) {
	removeConnectionFields(h)
	for k := range h {
		if strings.HasPrefix(k, ":") {
			delete(h, k) // a pseudo-header net/http's server left in (":protocol")
		}
	}
	if d.Mode == ModeExtendedConnect && d.Version != VersionHTTP11 {
		h[":protocol"] = []string{d.Upgrade}
		return
	}
	if d.Mode == ModeUpgrade && d.Version != VersionHTTP11 {
		// A WebSocket handshake sent on as an extended CONNECT (RFC 8441
		// §5): no Sec-WebSocket-Key there; the forwarder answers the
		// client's with its own Sec-WebSocket-Accept.
		h[":protocol"] = []string{d.Upgrade}
		delete(h, "Sec-Websocket-Key")
		return
	}
	if d.Mode == ModeUpgrade || d.Mode == ModeExtendedConnect {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{d.Upgrade}
		return
	}
	if !d.Trailers {
		return
	}
	switch d.Version {
	case VersionHTTP11:
		h["Connection"] = []string{"TE"}
		h["Te"] = []string{"trailers"}
	case VersionHTTP2, VersionHTTP3:
		h["Te"] = []string{"trailers"}
	}
}

// cleanResponseHeader rewrites h, the header of an upstream response
// with status code status, for the client: it removes the fields
// Connection names and the hop-by-hop fields; a 101 response to
// ModeUpgrade keeps "Connection: Upgrade" and its Upgrade value.
func cleanResponseHeader(h http.Header, status int, d Dispatch) {
	upgrade := h.Get("Upgrade")
	removeConnectionFields(h)
	if status == http.StatusSwitchingProtocols && d.Mode == ModeUpgrade && upgrade != "" {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{upgrade}
	}
}

// viaValue returns the Via field value a proxy named by pseudonym appends for
// a message received as HTTP/major.minor (RFC 9110 §7.6.3: the protocol
// name is omitted for HTTP, the version is "1.1", "2", "3").
func viaValue(major, minor int, pseudonym string) string {
	v := strconv.Itoa(major)
	if major < 2 {
		v += "." + strconv.Itoa(minor)
	}
	return v + " " + pseudonym
}

// forwardedElement returns one Forwarded element (RFC 7239 §4) for a
// request from remoteAddr (host:port or a host), received over proto
// ("http" or "https") for host. An IPv6 address is bracketed and quoted
// (§6); a value that is not a token is quoted.
func forwardedElement(remoteAddr, proto, host string) string {
	var b strings.Builder
	if node := forwardedNode(remoteAddr); node != "" {
		b.WriteString("for=")
		b.WriteString(node)
	}
	if host != "" {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString("host=")
		b.WriteString(tokenOrQuoted(host))
	}
	if proto != "" {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString("proto=")
		b.WriteString(proto)
	}
	return b.String()
}

// forwardedNode returns the node of remoteAddr for a "for" parameter:
// an IPv4 address as a token, an IPv6 address as a quoted "[v6]", and
// "unknown" for anything else (RFC 7239 §6.2).
func forwardedNode(remoteAddr string) string {
	if remoteAddr == "" {
		return ""
	}
	ip := clientIP(remoteAddr)
	if !ip.IsValid() {
		return "unknown"
	}
	if ip.Is4() {
		return ip.String()
	}
	return `"[` + ip.String() + `]"`
}

// clientIP returns the address of remoteAddr (host:port or a host), or
// the zero Addr.
func clientIP(remoteAddr string) netip.Addr {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap().WithZone("")
}

// tokenOrQuoted returns s as a token when it is one, else as a quoted
// string (RFC 7239 §4, RFC 9110 §5.6.4).
func tokenOrQuoted(s string) string {
	token := s != ""
	for _, r := range s {
		if !isTokenRune(r) {
			token = false
			break
		}
	}
	if token {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func isTokenRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// forwardedFields are the inbound fields about earlier hops, removed
// unless Options.TrustForwarded.
var forwardedFields = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
