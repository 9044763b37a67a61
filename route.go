package replaysafe

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"golang.org/x/net/idna"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// ProxyCredentials are the credentials presented at one proxy hop: Basic
// Proxy-Authorization at an HTTP or HTTPS proxy, username/password at a
// SOCKS5 proxy. Its String hides the password.
type ProxyCredentials struct {
	// ID names the credentials in the pool key and in logs; it must never
	// contain the secret (a user name with a vault entry's version, for
	// example). Empty means the user name and a keyed hash of the
	// password, with a key drawn once per process.
	ID       string
	Username string
	Password string
}

// String prints the identity and the user name and hides the password.
func (c ProxyCredentials) String() string {
	return "ProxyCredentials{" + strconv.Quote(c.ID) + ", " + strconv.Quote(c.Username) + ", password hidden}"
}

// GoString hides the password from %#v as well.
func (c ProxyCredentials) GoString() string { return c.String() }

// ProxyFromEnvironment returns the proxy for req from HTTP_PROXY,
// HTTPS_PROXY and NO_PROXY (or their lower-case forms), read on its first
// call, as net/http's ProxyFromEnvironment does. Unlike it, NO_PROXY
// matching takes implicit ports into account ("h:80" matches
// "http://h"; see proxy.Selector). It returns nil for no proxy.
func ProxyFromEnvironment(req *http.Request) (*url.URL, error) {
	return envSelector().Proxy(req.URL)
}

var envSelector = sync.OnceValue(proxy.SelectorFromEnvironment)

// credentialKey keys the hash that makes a credential identity from a
// password, so that keys and logs never reveal it.
var credentialKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	rand.Read(k) // never fails (crypto/rand documents it)
	return k
})

// credentialID returns the identity of credentials without an ID.
func credentialID(user, password string) string {
	m := hmac.New(sha256.New, credentialKey())
	m.Write([]byte(password))
	return user + "#" + hex.EncodeToString(m.Sum(nil)[:8])
}

// routeSnapshot is the immutable route of one call's wire attempts: the
// original attempt and its automatic resend share it, so the pool key and
// the route actually dialed never disagree. A new call resolves a new
// one.
type routeSnapshot struct {
	route   route.Route
	spec    route.Spec        // what route was made from, for withPolicy
	configs []proxy.HopConfig // per hop, secrets included; nil when direct
}

// ProxyError reports that the proxy of a request could not be decided:
// the selector or the credential resolver failed, or returned something
// unusable. It is returned before any wire attempt.
type ProxyError struct {
	// Hop is the 1-based hop the failure concerns, or 0 for the selector.
	Hop int
	Err error
}

// Error names the hop, if any, and the cause.
func (e *ProxyError) Error() string {
	if e.Hop > 0 {
		return "replaysafe: proxy hop " + strconv.Itoa(e.Hop) + ": " + e.Err.Error()
	}
	return "replaysafe: proxy selection: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ProxyError) Unwrap() error { return e.Err }

// proxies returns req's proxy chain in dial order (none: direct), from
// the proxy selector, called once per call.
func (t *Transport) proxies(req *http.Request) ([]*url.URL, error) {
	switch {
	case t.opt.ProxyChain != nil:
		us, err := t.opt.ProxyChain(req)
		if err != nil {
			return nil, &ProxyError{Err: err}
		}
		return us, nil
	case t.opt.Proxy != nil:
		u, err := t.opt.Proxy(req)
		if err != nil {
			return nil, &ProxyError{Err: err}
		}
		if u != nil {
			return []*url.URL{u}, nil
		}
	}
	return nil, nil
}

// snapshot resolves req's route for key (its scheme and destination)
// through the proxies urls under protocol policy p (the plan's first
// leg): the credential resolver for every hop, each called once. The
// result's connKey carries the route's Key.
func (t *Transport) snapshot(req *http.Request, key connKey, urls []*url.URL, p route.Policy) (connKey, *routeSnapshot, error) {
	if len(urls) == 0 {
		return t.directSnapshot(key, p)
	}
	return t.buildSnapshot(req, key, urls, p)
}

// directRoute is the identity of a direct route before it is built: the
// destination and the protocol policy.
type directRoute struct {
	scheme, addr, host string
	policy             route.Policy
}

// maxDirectRoutes bounds the direct routes a Transport remembers; past
// it, routes are built per call.
const maxDirectRoutes = 4096

// cachedSnapshot is a direct route built once: its key and snapshot
// (nil when route.New could not canonicalise the destination).
type cachedSnapshot struct {
	key  connKey
	snap *routeSnapshot
}

// directSnapshot returns the snapshot of a direct route to key. A direct
// route depends only on the destination and the policy, so it is built
// once and shared: a snapshot is immutable.
func (t *Transport) directSnapshot(key connKey, p route.Policy) (connKey, *routeSnapshot, error) {
	dk := directRoute{scheme: key.scheme, addr: key.addr, host: key.host, policy: p}
	if v, ok := t.directRoutes.Load(dk); ok {
		c := v.(cachedSnapshot)
		return c.key, c.snap, nil
	}
	k, snap, err := t.buildSnapshot(nil, key, nil, p)
	if err == nil && t.directRouteCount.Add(1) <= maxDirectRoutes {
		t.directRoutes.Store(dk, cachedSnapshot{key: k, snap: snap})
	}
	return k, snap, err
}

// buildSnapshot builds the route to key through the proxies urls (none:
// direct) under policy p, resolving each hop's credentials for req.
func (t *Transport) buildSnapshot(req *http.Request, key connKey, urls []*url.URL, p route.Policy) (connKey, *routeSnapshot, error) {
	scheme, _ := route.ParseScheme(key.scheme)
	port, portOK := portOf(key.addr)
	host := key.host
	if a, err := idna.Lookup.ToASCII(host); err == nil {
		host = a // as net/http sends and dials it
	}
	spec := route.Spec{Scheme: scheme, Host: host, Port: port, UseProxy: len(urls) > 0, Policy: p}
	var configs []proxy.HopConfig
	for i, u := range urls {
		if u == nil {
			return key, nil, &ProxyError{Hop: i + 1, Err: errors.New("nil proxy URL")}
		}
		h, cfg, err := t.hop(req, i+1, u)
		if err != nil {
			return key, nil, &ProxyError{Hop: i + 1, Err: err}
		}
		spec.Chain = append(spec.Chain, h)
		configs = append(configs, cfg)
	}
	if len(configs) > 1 {
		hops := make([]proxy.Hop, len(configs))
		for i := range hops {
			hops[i] = proxy.Hop{Hop: spec.Chain[i], HopConfig: configs[i]}
		}
		if err := proxy.CheckChainCredentials(hops, t.opt.AllowCleartextChainCredentials); err != nil {
			var ce *proxy.ChainCredentialsError
			errors.As(err, &ce)
			return key, nil, &ProxyError{Hop: ce.Hop, Err: err}
		}
	}
	r, err := route.New(spec)
	if !portOK {
		err = fmt.Errorf("invalid port in %q", key.addr)
	}
	if err != nil {
		if !spec.UseProxy {
			// A destination route.New cannot canonicalise still goes
			// direct, as before routes, and fails or not at the dial:
			// scheme, address and host keep its connections apart.
			return key, nil, nil
		}
		return key, nil, &ProxyError{Err: err}
	}
	key.route = r.Key()
	return key, &routeSnapshot{route: r, spec: spec, configs: configs}, nil
}

// hop turns proxy URL u, hop n of req's chain, into the route's view of
// the hop and its secrets. Credentials from Options.ProxyAuth win over
// user information in u.
func (t *Transport) hop(req *http.Request, n int, u *url.URL) (route.Hop, proxy.HopConfig, error) {
	var creds *ProxyCredentials
	if t.opt.ProxyAuth != nil {
		c, err := t.opt.ProxyAuth(req, n, u)
		if err != nil {
			return route.Hop{}, proxy.HopConfig{}, fmt.Errorf("credentials: %w", err)
		}
		creds = c
	}
	if creds == nil && u.User != nil {
		pw, _ := u.User.Password()
		creds = &ProxyCredentials{Username: u.User.Username(), Password: pw}
	}
	bare := *u
	bare.User = nil
	id := ""
	if creds != nil {
		id = creds.ID
		if id == "" {
			id = credentialID(creds.Username, creds.Password)
		}
	}
	h, err := proxy.HopFromURL(&bare, id)
	if err != nil {
		return route.Hop{}, proxy.HopConfig{}, err
	}
	if creds != nil {
		h.Auth = &proxy.Auth{Username: creds.Username, Password: creds.Password}
	}
	h.TLSConfig = t.opt.ProxyTLSClientConfig
	return h.Hop, h.HopConfig, nil
}

// portOf returns the port of a "host:port" made by validate; ok is false
// when it is not a port number.
func portOf(addr string) (port uint16, ok bool) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return uint16(n), err == nil && n > 0
}

// withPolicy returns the snapshot of the same route under protocol
// policy p, for a call that falls back from HTTP/3 to TCP before any of it
// was sent: the same destination, proxies and credentials, none of the
// selectors called again.
func (s *routeSnapshot) withPolicy(p route.Policy) (*routeSnapshot, error) {
	spec := s.spec
	spec.Policy = p
	r, err := route.New(spec)
	if err != nil {
		return nil, err
	}
	return &routeSnapshot{route: r, spec: spec, configs: s.configs}, nil
}

// header returns the header to send to the origin over this route. Through
// a proxy, Proxy-Authorization is for the proxy alone: the tunnel is
// opaque to it, so a field the caller set would reach only the origin. It
// is dropped from a copy.
func (s *routeSnapshot) header(h http.Header) http.Header {
	if s == nil || !s.route.Proxied() {
		return h
	}
	return proxy.OriginHeader(h)
}
