// Package altsvc reads Alt-Svc response header fields (RFC 7838) for the
// one thing replaysafe uses them for: an HTTP/3 alternative on the
// origin's own host. It is pure: the caller passes the current time.
package altsvc

import (
	"iter"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxAge is an advertisement's lifetime without "ma" (RFC 7838
// §3.1: 24 hours).
const DefaultMaxAge = 24 * time.Hour

// H3 is an HTTP/3 alternative an origin advertised: the UDP port on the
// origin's own host, and until when the advertisement holds.
type H3 struct {
	Port    uint16
	Expires time.Time
}

// Result says what a response's Alt-Svc field values mean for HTTP/3.
type Result uint8

// Results.
const (
	// Silent: the values say nothing of HTTP/3 on the origin's host; what
	// the client knew still holds. The zero value.
	Silent Result = iota
	// Advertised: an "h3" alternative on the origin's host (H3 is set).
	Advertised
	// Cleared: "clear" withdrew every alternative (RFC 7838 §3).
	Cleared
)

// Parse reads the Alt-Svc field values of a response from host, received
// at now, and returns the first "h3" alternative whose authority names no
// other host, or Cleared for "clear". Alternatives on another host are
// ignored: replaysafe connects only to the host the caller named.
// Malformed items are skipped, never an error.
func Parse(values []string, host string, now time.Time) (H3, Result) {
	for _, v := range values {
		for item := range outsideQuotes(v, ',') {
			item = strings.TrimSpace(item)
			if item == "clear" {
				return H3{}, Cleared
			}
			if port, maxAge, ok := sameHostH3(item, host); ok {
				return H3{Port: port, Expires: now.Add(maxAge)}, Advertised
			}
		}
	}
	return H3{}, Silent
}

// sameHostH3 reads one alt-value: `h3="[host]:port" *(; param)`.
func sameHostH3(item, host string) (port uint16, maxAge time.Duration, ok bool) {
	alt, params, _ := cutOutsideQuotes(item, ';')
	proto, authority, found := strings.Cut(strings.TrimSpace(alt), "=")
	if !found || strings.TrimSpace(proto) != "h3" {
		return 0, 0, false
	}
	authority, err := strconv.Unquote(strings.TrimSpace(authority))
	if err != nil {
		return 0, 0, false
	}
	// Host-less means nothing before the colon: "[]:443" also splits to
	// an empty host, but names an empty IP literal, which is no host at
	// all, not this one.
	h, p, err := net.SplitHostPort(authority)
	hostless := strings.HasPrefix(authority, ":")
	if err != nil || (!hostless && !strings.EqualFold(h, host)) {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, 0, false
	}
	maxAge = DefaultMaxAge
	for param := range outsideQuotes(params, ';') {
		k, v, _ := strings.Cut(strings.TrimSpace(param), "=")
		if strings.TrimSpace(k) != "ma" {
			continue
		}
		if s, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(v), `"`), 10, 32); err == nil {
			maxAge = time.Duration(s) * time.Second
		}
	}
	return uint16(n), maxAge, true
}

// cutOutsideQuotes slices s around the first sep that is not inside a
// quoted-string, as strings.Cut does.
func cutOutsideQuotes(s string, sep byte) (before, after string, found bool) {
	for part := range outsideQuotes(s, sep) {
		if len(part) == len(s) {
			break
		}
		return part, s[len(part)+1:], true
	}
	return s, "", false
}

// outsideQuotes yields the parts of s between the seps that are not
// inside a quoted-string, in place: a field of millions of separators
// costs no allocation per part.
func outsideQuotes(s string, sep byte) iter.Seq[string] {
	return func(yield func(string) bool) {
		quoted, escaped, start := false, false, 0
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case escaped:
				escaped = false
			case quoted && c == '\\':
				escaped = true
			case c == '"':
				quoted = !quoted
			case c == sep && !quoted:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(s[start:])
	}
}
