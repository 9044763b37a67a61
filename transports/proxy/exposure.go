package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/textproto"
	"strconv"

	"github.com/replaysafe/replaysafe/fsm/route"
)

// OriginHeader returns the header fields to send to the origin of a
// proxied route: h itself when it carries no Proxy-Authorization, else a
// copy without it. Keys are compared canonically, so "proxy-authorization"
// and "PROXY-Authorization" go too: net/http writes a non-canonical key
// as given and x/net/http2 lower-cases every key, so either would reach
// the origin. Through a tunnel the field is for no one but the proxy, and
// the proxy cannot read it there.
func OriginHeader(h http.Header) http.Header {
	var drop []string
	for k := range h {
		if textproto.CanonicalMIMEHeaderKey(k) == "Proxy-Authorization" {
			drop = append(drop, k)
		}
	}
	if len(drop) == 0 {
		return h
	}
	h = h.Clone()
	for _, k := range drop {
		delete(h, k)
	}
	return h
}

// ErrCleartextChainCredentials is wrapped by every
// *ChainCredentialsError.
var ErrCleartextChainCredentials = errors.New("proxy credentials would cross an earlier hop in cleartext")

// ChainCredentialsError reports a chain that would show a hop's
// credentials to the hops before it: hop Hop is an http proxy (Basic
// Proxy-Authorization in its CONNECT request) or a socks5 proxy (RFC 1929
// username and password), both cleartext inside the tunnel that every
// earlier hop relays and can read. It is the caller's configuration, and
// nothing was sent.
type ChainCredentialsError struct {
	// Hop is the 1-based position of the hop whose credentials would
	// leak.
	Hop int
	// Addr is its address.
	Addr string
	// Kind is its kind: http or socks5.
	Kind route.ProxyKind
}

// Error names the hop, what it would expose and to whom.
func (e *ChainCredentialsError) Error() string {
	what := "Basic Proxy-Authorization"
	if e.Kind == route.ProxySOCKS5 {
		what = "SOCKS5 username and password"
	}
	earlier := "hop 1"
	if e.Hop > 2 {
		earlier = "hops 1 to " + strconv.Itoa(e.Hop-1)
	}
	return "proxy: hop " + strconv.Itoa(e.Hop) + " (" + e.Addr + ", " + e.Kind.String() + ") would get its " + what +
		" in cleartext through " + earlier + ", which can read it: make hop " + strconv.Itoa(e.Hop) +
		" an https proxy, or allow cleartext chain credentials explicitly"
}

// Unwrap returns ErrCleartextChainCredentials.
func (e *ChainCredentialsError) Unwrap() error { return ErrCleartextChainCredentials }

// CheckChainCredentials returns a *ChainCredentialsError for the first
// hop after the first that has credentials and is not an https proxy,
// unless allow is true. An https hop's credentials travel inside TLS with
// that hop, so earlier hops relay only ciphertext; the first hop's go
// straight to it.
func CheckChainCredentials(hops []Hop, allow bool) error {
	if allow {
		return nil
	}
	for i, h := range hops {
		if i == 0 || h.Auth == nil || h.Kind == route.ProxyHTTPS {
			continue
		}
		return &ChainCredentialsError{Hop: i + 1, Addr: h.Addr(), Kind: h.Kind}
	}
	return nil
}

// ErrEarlyResponse is wrapped by every *EarlyResponseError.
var ErrEarlyResponse = errors.New("proxy: bytes arrived after the CONNECT 2xx before the request was written")

// EarlyResponseError reports bytes that the last proxy sent after its
// CONNECT 2xx response, with it, for a plain-http origin: they arrived
// before the request was written, so they cannot be the origin's
// response to it. (For an https origin such bytes are the start of the
// origin's TLS handshake and are kept.) It is the proxy's fault; nothing
// of the request was sent.
type EarlyResponseError struct {
	// Hop is the 1-based position of the proxy that sent them.
	Hop int
	// Addr is its address.
	Addr string
	// Bytes is how many bytes arrived.
	Bytes int
}

// Error names the hop and the byte count.
func (e *EarlyResponseError) Error() string {
	return "proxy: hop " + strconv.Itoa(e.Hop) + " (" + e.Addr + ") sent " + thousands(e.Bytes) +
		" bytes after its CONNECT 2xx, before the request to the plain-http origin was written: they cannot be its response"
}

// Unwrap returns ErrEarlyResponse.
func (e *EarlyResponseError) Unwrap() error { return ErrEarlyResponse }

// EarlyBytes returns how many bytes the proxy sent with its CONNECT 2xx
// response that conn, a connection DialChain returned, still holds
// unread (for an HTTP/2 CONNECT tunnel, the DATA it has received so
// far); 0 for any other connection.
func EarlyBytes(conn net.Conn) int {
	switch tc := conn.(type) {
	case *tunnelConn:
		return len(tc.pending)
	case *h2Tunnel:
		return tc.Buffered()
	}
	return 0
}

// CheckPlainTunnel returns an *EarlyResponseError (hop and addr name the
// last proxy) when conn, the tunnel DialChain returned for a plain-http
// origin, holds bytes the proxy sent after its CONNECT 2xx.
func CheckPlainTunnel(conn net.Conn, hop int, addr string) error {
	if n := EarlyBytes(conn); n > 0 {
		return &EarlyResponseError{Hop: hop, Addr: addr, Bytes: n}
	}
	return nil
}
