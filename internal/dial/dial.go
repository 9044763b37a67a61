// Package dial resolves a call's route (its proxies and their
// credentials, once per try) and establishes connections over it: TCP
// through the caller's dialer, proxy tunnels (transports/proxy), and TLS
// with the origin, under one acquisition deadline.
package dial

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// Config is what resolving routes and establishing connections take from
// the Transport's options, defaults filled in.
type Config struct {
	// DialContext dials TCP: the origin on a direct route, the first hop
	// on a proxied one.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSClientConfig is cloned for TLS with an https origin.
	TLSClientConfig *tls.Config
	// AcquireTimeout bounds a proxied establishment from the attempt's
	// start; <= 0 means none.
	AcquireTimeout time.Duration
	// Proxy and ProxyChain select a request's proxies (ProxyChain wins);
	// ProxyAuth resolves a hop's credentials. Each may be nil.
	Proxy      func(*http.Request) (*url.URL, error)
	ProxyChain func(*http.Request) ([]*url.URL, error)
	ProxyAuth  func(req *http.Request, hop int, proxyURL *url.URL) (*Credentials, error)
	// AllowCleartextChainCredentials lets a chain send cleartext
	// credentials to a hop after the first.
	AllowCleartextChainCredentials bool
	// ProxyTLSClientConfig configures TLS with https proxies.
	ProxyTLSClientConfig *tls.Config
	// ConnectPlainHTTP tunnels plain-http requests through a proxy with
	// CONNECT instead of sending them to it in absolute form.
	ConnectPlainHTTP bool
	// DialTLSContext, if set, makes the TLS connection of an https origin
	// on a direct route, handshake included.
	DialTLSContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSHandshakeTimeout, when positive, bounds each TLS handshake.
	TLSHandshakeTimeout time.Duration
	// ConnectHeader returns the extra header fields of the CONNECT to the
	// proxy at proxyURL for target, or nil; an error refuses the call.
	ConnectHeader func(ctx context.Context, proxyURL *url.URL, target string) (http.Header, error)
	// OnConnectResponse, if set, is shown each proxy's 2xx answer to a
	// CONNECT; an error fails the acquisition.
	OnConnectResponse func(ctx context.Context, hop proxy.Hop, req proxy.ConnectRequest, resp *proxy.Response) error
	// Clock is the attempts' clock: the acquisition budget is measured on
	// it, from the instant the attempt's machine started.
	Clock recorder.Clock
}

// Credentials are the credentials presented at one proxy hop. ID names
// them in pool keys and logs; empty means the user name and a keyed hash
// of the password.
type Credentials struct {
	ID, Username, Password string
}

// Dialer resolves routes and establishes connections for one Transport.
// It is safe for concurrent use.
type Dialer struct {
	cfg Config

	// Direct routes built once: directRoute → cachedRoute, at most
	// maxDirectRoutes of them.
	directRoutes     sync.Map
	directRouteCount atomic.Int64

	// h2Proxies holds the HTTP/2 connections to https proxies that
	// picked h2: their CONNECT tunnels are streams, shared across routes.
	h2Proxies proxy.H2Pool
}

// New returns a Dialer configured by cfg.
func New(cfg Config) *Dialer { return &Dialer{cfg: cfg} }
