package proxy

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// Selector makes the NO_PROXY decision with golang.org/x/net/http/httpproxy
// on normalised URLs. Implicit ports take part (http means port 80, https
// port 443: "h:80" in NO_PROXY matches "http://h") and explicit
// non-default ports stay distinct ("h:8080" matches only port 8080).
//
// httpproxy already fills in the implicit port, but it compares ports as
// strings and schemes case-sensitively, and does not strip a trailing
// dot, so Selector first rewrites the URL: lower-case scheme and host, no
// trailing dot, and an explicit port in canonical decimal. Like
// httpproxy, it never proxies "localhost" or a loopback address, whatever
// the configuration says.
type Selector struct {
	proxyFor func(*url.URL) (*url.URL, error)
	none     bool // no proxy configured: every usable URL goes direct
}

// NewSelector returns a Selector for cfg (HTTPProxy, HTTPSProxy, NoProxy,
// CGI; see httpproxy.Config). Later changes to cfg do not affect it.
func NewSelector(cfg httpproxy.Config) *Selector {
	return &Selector{proxyFor: cfg.ProxyFunc(), none: cfg.HTTPProxy == "" && cfg.HTTPSProxy == "" && !cfg.CGI}
}

// SelectorFromEnvironment returns a Selector for HTTP_PROXY, HTTPS_PROXY
// and NO_PROXY (or their lower-case forms) as they are now.
func SelectorFromEnvironment() *Selector {
	return NewSelector(*httpproxy.FromEnvironment())
}

// Proxy returns the proxy URL to use for a request to u, or nil when no
// proxy applies (none configured for u's scheme, or NO_PROXY matches).
// Only u's scheme and host count. The error is an unusable u (see
// NormalizeURL) or httpproxy's CGI refusal.
func (s *Selector) Proxy(u *url.URL) (*url.URL, error) {
	if s.none && usable(u) {
		return nil, nil // the common case, without NormalizeURL's allocations
	}
	n, err := NormalizeURL(u)
	if err != nil {
		return nil, err
	}
	return s.proxyFor(n)
}

// usable reports whether NormalizeURL would accept u, without
// allocating.
func usable(u *url.URL) bool {
	if !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") {
		return false
	}
	if strings.TrimRight(u.Hostname(), ".") == "" {
		return false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return false
		}
	}
	return true
}

// NormalizeURL returns a new URL holding only u's scheme and host, made
// canonical for NO_PROXY matching: scheme lower-cased and http or https;
// host lower-cased, without trailing dots, with its port explicit (the
// scheme's default when u names none) and in plain decimal, so that
// "HTTP://Example.COM.:080" becomes "http://example.com:80".
func NormalizeURL(u *url.URL) (*url.URL, error) {
	scheme := strings.ToLower(u.Scheme)
	var def string
	switch scheme {
	case "http":
		def = "80"
	case "https":
		def = "443"
	default:
		return nil, errors.New("proxy: scheme " + strconv.Quote(u.Scheme) + " is not http or https")
	}
	host := strings.TrimRight(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return nil, errors.New("proxy: URL " + strconv.Quote(u.Redacted()) + " has no host")
	}
	port := def
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, errors.New("proxy: URL " + strconv.Quote(u.Redacted()) + " has an invalid port")
		}
		port = strconv.FormatUint(n, 10)
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}, nil
}
