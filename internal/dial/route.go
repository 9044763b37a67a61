package dial

import (
	"context"
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
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

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

// Route is the immutable route of one try's wire attempts: the original
// attempt and its automatic resend share it, so the pool key and the
// route actually dialed never disagree. A configured retry resolves a
// new one.
type Route struct {
	route   route.Route
	spec    route.Spec        // what route was made from, for WithPolicy
	configs []proxy.HopConfig // per hop, secrets included; nil when direct
}

// Proxies returns req's proxy chain in dial order (none: direct), from
// the proxy selector, called once per call.
func (d *Dialer) Proxies(req *http.Request) ([]*url.URL, error) {
	switch {
	case d.cfg.ProxyChain != nil:
		us, err := d.cfg.ProxyChain(req)
		if err != nil {
			return nil, &proxy.ResolveError{Err: err}
		}
		return us, nil
	case d.cfg.Proxy != nil:
		u, err := d.cfg.Proxy(req)
		if err != nil {
			return nil, &proxy.ResolveError{Err: err}
		}
		if u != nil {
			return []*url.URL{u}, nil
		}
	}
	return nil, nil
}

// Route resolves req's route for key (its scheme and destination)
// through the proxies urls under protocol policy p (the plan's first
// leg): the credential resolver for every hop, each called once. The
// result's pool.Key carries the route's Key.
func (d *Dialer) Route(req *http.Request, key pool.Key, urls []*url.URL, p route.Policy) (pool.Key, *Route, error) {
	if len(urls) == 0 {
		return d.Direct(key, p)
	}
	return d.buildSnapshot(req, key, urls, p)
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

// cachedRoute is a direct route built once: its key and snapshot
// (nil when route.New could not canonicalise the destination).
type cachedRoute struct {
	key  pool.Key
	snap *Route
}

// Direct returns the snapshot of a direct route to key. A direct
// route depends only on the destination and the policy, so it is built
// once and shared: a snapshot is immutable.
func (d *Dialer) Direct(key pool.Key, p route.Policy) (pool.Key, *Route, error) {
	dk := directRoute{scheme: key.Scheme, addr: key.Addr, host: key.Host, policy: p}
	if v, ok := d.directRoutes.Load(dk); ok {
		c := v.(cachedRoute)
		return c.key, c.snap, nil
	}
	k, snap, err := d.buildSnapshot(nil, key, nil, p)
	if err == nil && d.directRouteCount.Add(1) <= maxDirectRoutes {
		d.directRoutes.Store(dk, cachedRoute{key: k, snap: snap})
	}
	return k, snap, err
}

// buildSnapshot builds the route to key through the proxies urls (none:
// direct) under policy p, resolving each hop's credentials for req.
func (d *Dialer) buildSnapshot(req *http.Request, key pool.Key, urls []*url.URL, p route.Policy) (pool.Key, *Route, error) {
	scheme, _ := route.ParseScheme(key.Scheme)
	port, portOK := portOf(key.Addr)
	host := key.Host
	if a, err := idna.Lookup.ToASCII(host); err == nil {
		host = a // as net/http sends and dials it
	}
	spec := route.Spec{Scheme: scheme, Host: host, Port: port, UseProxy: len(urls) > 0, Policy: p}
	var configs []proxy.HopConfig
	for i, u := range urls {
		if u == nil {
			return key, nil, &proxy.ResolveError{Hop: i + 1, Err: errors.New("nil proxy URL")}
		}
		h, cfg, err := d.hop(req, i+1, u)
		if err != nil {
			return key, nil, &proxy.ResolveError{Hop: i + 1, Err: err}
		}
		spec.Chain = append(spec.Chain, h)
		configs = append(configs, cfg)
	}
	spec.Forward = d.forward(spec)
	if !spec.Forward {
		if err := d.connectHeaders(req, key, urls, spec.Chain, configs); err != nil {
			return key, nil, err
		}
	}
	if len(configs) > 1 {
		hops := make([]proxy.Hop, len(configs))
		for i := range hops {
			hops[i] = proxy.Hop{Hop: spec.Chain[i], HopConfig: configs[i]}
		}
		if err := proxy.CheckChainCredentials(hops, d.cfg.AllowCleartextChainCredentials); err != nil {
			var ce *proxy.ChainCredentialsError
			errors.As(err, &ce)
			return key, nil, &proxy.ResolveError{Hop: ce.Hop, Err: err}
		}
	}
	r, err := route.New(spec)
	if !portOK {
		err = fmt.Errorf("invalid port in %q", key.Addr)
	}
	if err != nil {
		if !spec.UseProxy {
			// A destination route.New cannot canonicalise still goes
			// direct, as before routes, and fails or not at the dial:
			// scheme, address and host keep its connections apart.
			return key, nil, nil
		}
		return key, nil, &proxy.ResolveError{Err: err}
	}
	key.Route = r.Key()
	if r.Forward() {
		// The connection is the proxy's, whatever the origin: the pool,
		// the connection limit and the dial are keyed by the proxy.
		h := r.Hop(0)
		key.Addr, key.Host = h.Addr(), h.Host
	}
	return key, &Route{route: r, spec: spec, configs: configs}, nil
}

// connectHeaders sets the extra CONNECT header fields of each HTTP or
// HTTPS hop of chain (Config.ConnectHeader), asked once per hop for its
// target: the next hop, or the origin at the last. An error refuses the
// call as a *proxy.ResolveError naming the hop.
func (d *Dialer) connectHeaders(req *http.Request, key pool.Key, urls []*url.URL, chain []route.Hop, configs []proxy.HopConfig) error {
	if d.cfg.ConnectHeader == nil {
		return nil
	}
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	for i, h := range chain {
		if h.Kind != route.ProxyHTTP && h.Kind != route.ProxyHTTPS {
			continue
		}
		target := key.Addr
		if i+1 < len(chain) {
			target = chain[i+1].Addr()
		}
		bare := *urls[i]
		bare.User = nil
		hdr, err := d.cfg.ConnectHeader(ctx, &bare, target)
		if err != nil {
			return &proxy.ResolveError{Hop: i + 1, Err: fmt.Errorf("CONNECT header: %w", err)}
		}
		configs[i].Header = hdr
	}
	return nil
}

// forward reports whether a route of spec sends its requests to its
// proxy in absolute form (route.Spec.Forward): plain http through one
// HTTP or HTTPS proxy under the HTTP/1.1 policy, as net/http sends them,
// unless Config.ConnectPlainHTTP asks for a CONNECT tunnel. A stock squid
// refuses CONNECT to every port but 443, so a tunnel would fail most
// plain-http origins behind it.
func (d *Dialer) forward(spec route.Spec) bool {
	return !d.cfg.ConnectPlainHTTP && spec.Scheme == route.SchemeHTTP && spec.UseProxy && len(spec.Chain) == 1 &&
		(spec.Chain[0].Kind == route.ProxyHTTP || spec.Chain[0].Kind == route.ProxyHTTPS) && spec.Policy == route.PolicyH1
}

// hop turns proxy URL u, hop n of req's chain, into the route's view of
// the hop and its secrets. Credentials from Config.ProxyAuth win over
// user information in u.
func (d *Dialer) hop(req *http.Request, n int, u *url.URL) (route.Hop, proxy.HopConfig, error) {
	var creds *Credentials
	if d.cfg.ProxyAuth != nil {
		c, err := d.cfg.ProxyAuth(req, n, u)
		if err != nil {
			return route.Hop{}, proxy.HopConfig{}, fmt.Errorf("credentials: %w", err)
		}
		creds = c
	}
	if creds == nil && u.User != nil {
		pw, _ := u.User.Password()
		creds = &Credentials{Username: u.User.Username(), Password: pw}
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
	h.TLSConfig = d.cfg.ProxyTLSClientConfig
	return h.Hop, h.HopConfig, nil
}

// portOf returns the port of a "host:port" made by the driver's validate; ok is false
// when it is not a port number.
func portOf(addr string) (port uint16, ok bool) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return uint16(n), err == nil && n > 0
}

// WithPolicy returns the snapshot of the same route under protocol
// policy p, for a call that falls back from HTTP/3 to TCP before any of it
// was sent: the same destination, proxies and credentials, none of the
// selectors called again.
func (s *Route) WithPolicy(p route.Policy) (*Route, error) {
	spec := s.spec
	spec.Policy = p
	r, err := route.New(spec)
	if err != nil {
		return nil, err
	}
	return &Route{route: r, spec: spec, configs: s.configs}, nil
}

// Header returns the header to send to the origin over this route. Through
// a proxy, Proxy-Authorization is for the proxy alone: a tunnel is opaque
// to it, so a field the caller set would reach only the origin, and in
// absolute form the route's own credentials go instead (ProxyURL). It is
// dropped from a copy.
func (s *Route) Header(h http.Header) http.Header {
	if s == nil || !s.route.Proxied() {
		return h
	}
	return proxy.OriginHeader(h)
}

// Proxied reports whether the route goes through at least one proxy; a
// nil Route is a direct one route.New could not build.
func (s *Route) Proxied() bool { return s != nil && s.route.Proxied() }

// Forward reports whether the route's requests go to its proxy in
// absolute form (route.Route.Forward).
func (s *Route) Forward() bool { return s != nil && s.route.Forward() }

// ProxyURL returns, for a forward route, the proxy's URL with the hop's
// credentials as user information, which net/http's client connection
// turns into each request's Proxy-Authorization; nil otherwise.
func (s *Route) ProxyURL() *url.URL {
	if !s.Forward() {
		return nil
	}
	h := s.route.Hop(0)
	u := &url.URL{Scheme: h.Kind.String(), Host: h.Addr()}
	if a := s.configs[0].Auth; a != nil {
		u.User = url.UserPassword(a.Username, a.Password)
	}
	return u
}

// Key returns the route's identity, for the pool key.
func (s *Route) Key() route.Key { return s.route.Key() }
