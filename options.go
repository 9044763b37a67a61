package replaysafe

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/quic-go/quic-go"
)

// Defaults for the zero fields of Options.
const (
	// DefaultMaxIdleConnsPerHost is the number of idle connections kept
	// per host, as in net/http.
	DefaultMaxIdleConnsPerHost = 2
	// DefaultIdleConnTimeout is how long an idle connection stays in the
	// pool, as in net/http's DefaultTransport.
	DefaultIdleConnTimeout = 90 * time.Second
	// DefaultAcquireTimeout bounds getting a new connection: the dial and
	// the TLS handshake under one deadline.
	DefaultAcquireTimeout = 30 * time.Second
	// DefaultHTTP3HeadStart is how long, under ProtocolPreferHTTP3 and
	// ProtocolDiscoverHTTP3, a call waits for a new QUIC connection
	// before it goes over TCP instead (curl and browsers race QUIC
	// against TCP after a head start of this order).
	DefaultHTTP3HeadStart = 300 * time.Millisecond
	// DefaultMaxResponseHeaderBytes bounds a response's header section,
	// as in net/http's Transport and x/net's (10 MiB).
	DefaultMaxResponseHeaderBytes = 10 << 20
	// DefaultMaxIdleConns bounds the idle connections of all hosts
	// together, as net/http's DefaultTransport does.
	DefaultMaxIdleConns = 100
	// DefaultTLSHandshakeTimeout bounds each TLS handshake, as net/http's
	// DefaultTransport does.
	DefaultTLSHandshakeTimeout = 10 * time.Second
	// DefaultExpectContinueTimeout is how long a request with "Expect:
	// 100-continue" waits for the server's 100 before it sends its body,
	// as net/http's DefaultTransport waits.
	DefaultExpectContinueTimeout = time.Second
)

// Options configures a Transport. The zero value is ready to use: every
// field documents its default. It behaves as net/http's DefaultTransport
// wherever both have the notion: proxies from the environment, HTTP/2
// by ALPN for https and HTTP/1.1 for http, a 10 s TLS handshake
// timeout, 90 s idle connections, at most 100 idle connections,
// "Expect: 100-continue" answered within 1 s, gzip asked for and
// decoded. FromTransport converts an http.Transport's settings, and
// docs/guarantees.md maps every field of http.Transport to its
// counterpart here.
//
// What a server or proxy sends is bounded by default, whatever the
// options: a response header section by MaxResponseHeaderBytes (10 MiB);
// the informational (1xx) responses of one attempt to 32 and, in total,
// MaxResponseHeaderBytes of header bytes (1 MiB when zero; quic-go stops
// HTTP/3 after 5, and holds an HTTP/3 request with a body to that
// alone); a CONNECT reply's header section to 64 KiB, parsed in
// one pass; text a peer sent (a reason phrase, a Proxy-Authenticate
// challenge) to 256 bytes in an error message, which says how much it
// cut; and what the Transport remembers about destinations (ALPN
// answers, failed QUIC handshakes, Alt-Svc advertisements, direct routes,
// retry budgets) to 4,096 entries each. A configured retry waits at most
// Retry.MaxRetryAfter (30 s) for a Retry-After, and a call makes at most
// 10 attempts. A slow peer is bounded too: an HTTP/1.1 response header
// section must end within 20 s of its first byte (see
// ResponseHeaderTimeout); an HTTP/2 server must send its SETTINGS and
// acknowledge ours within 10 s, and one that sends nothing is found dead
// by the liveness PING (see HTTP2); a proxy's handshake, a SOCKS5
// negotiation and its authentication included, ends with the
// acquisition deadline (AcquireTimeout). docs/reliability.md measures
// each against a hostile peer.
//
// Resend and retry are two things. The automatic resend is on unless
// DisableResend: at most once a call, at once, decided by the attempt
// rules RS01–RS21 (RS32–RS33 for HTTP/3 early data), on evidence that the server did not process the
// request (RS12–RS16) or, for an idempotent or keyed request, after an
// ambiguous failure of a reused connection before any response byte
// (RS20); a timeout (RS06) or a cancellation (RS05) is never resent.
// Configured retries (Retry, off in the zero value) are decided between
// attempts by the call rules RS22–RS31, with backoff, Retry-After and a
// per-route budget: listed statuses and ambiguous failures of idempotent
// or keyed requests, a timeout included (RS25), and failed dials of any
// request. Both count against one bound, Retry.MaxAttempts (two attempts
// without a policy), and neither sends a request that is neither
// idempotent nor keyed again once the server may have seen it. When
// retries run out (RS26) or the budget is spent (RS27), the call returns
// the last failure as an *Error, or, when the last attempt got a
// response with a retryable status, that response (a 503, say) with a
// nil error.
type Options struct {
	// DialContext dials the TCP connection for a new HTTP or HTTPS
	// connection; TLS runs over what it returns. nil means a net.Dialer
	// with a 30 s TCP keep-alive. Its context carries the
	// acquisition deadline (AcquireTimeout) and the request's context.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// DialTLSContext, if set, makes the TLS connections of https URLs on
	// direct routes, TLS handshake included, as in net/http: replaysafe
	// does no TLS of its own over it, and ALPN is what the returned
	// connection negotiated (HTTP/1.1 when it is not a *tls.Conn).
	// Through a proxy it is not used. Evidence of what reached the wire is
	// then read above TLS only: a write the TLS layer failed counts as
	// nothing written only when it reports zero bytes.
	DialTLSContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// TLSClientConfig configures TLS for https URLs; nil means the zero
	// tls.Config. It is cloned for each connection; an empty ServerName
	// becomes the URL's host, and NextProtos is replaced by what Protocol
	// speaks: {"http/1.1"} for ProtocolHTTP1, {"h2"} for ProtocolHTTP2,
	// {"h2", "http/1.1"} for ProtocolNegotiate, {"h3"} over QUIC.
	TLSClientConfig *tls.Config

	// TLSHandshakeTimeout bounds each TLS handshake: with the origin, and
	// with every HTTPS proxy of a route, each within the acquisition
	// deadline (AcquireTimeout). Zero means DefaultTLSHandshakeTimeout; a
	// negative value means no bound but that deadline. A handshake that
	// outlives it fails the acquisition (RS04: nothing was sent) with an
	// error whose Timeout reports true.
	TLSHandshakeTimeout time.Duration

	// MaxIdleConnsPerHost bounds the idle connections kept for one
	// scheme and host:port. Zero means DefaultMaxIdleConnsPerHost; a
	// negative value keeps none (every connection closes after its
	// exchange). It holds for every protocol: an HTTP/2 or HTTP/3
	// connection left without a stream beyond this many closes.
	MaxIdleConnsPerHost int

	// MaxIdleConns bounds the idle connections of every host and
	// protocol together; beyond it the connection idle the longest
	// closes. Zero means DefaultMaxIdleConns; a negative value means no
	// bound but MaxIdleConnsPerHost.
	MaxIdleConns int

	// DisableKeepAlives closes every connection after one exchange, as
	// in net/http: HTTP/1.1 requests carry "Connection: close", and no
	// connection of any protocol stays idle in the pool. Off by default.
	DisableKeepAlives bool

	// MaxConnsPerHost bounds the connections of one scheme, host:port and
	// route, in any state: dialing, in use, idle, and (over HTTP/2 and
	// HTTP/3) closing, with streams still running, until the socket is
	// closed. An attempt that finds
	// the route at its limit waits, under AcquireTimeout, for a connection
	// to close, come back idle or (multiplexed) have room for a stream.
	// Zero or negative means no limit, as in net/http.
	MaxConnsPerHost int

	// IdleConnTimeout is how long a connection may stay idle in the pool
	// before it is closed. Zero means DefaultIdleConnTimeout; a negative
	// value means no limit.
	IdleConnTimeout time.Duration

	// AcquireTimeout bounds getting a connection for one wire attempt: the
	// pool lookup, the dial, every proxy's handshake (a SOCKS5
	// negotiation, its authentication included) and the TLS handshake
	// under one deadline (fsm PhaseAcquire). A resend starts a new deadline; a resend displaced
	// by a connection's death waits up to that long for its route to come
	// back when the redial is refused (a restarting server), and then
	// fails as a timeout (RS06) naming the last refused dial; for 5 s
	// after such a refusal, any attempt whose dial is refused waits so
	// too (spec/choices.md, choice 23). Zero means DefaultAcquireTimeout;
	// a negative value means no limit.
	AcquireTimeout time.Duration

	// WriteTimeout bounds the upload: from acquiring the connection until
	// the whole request, body included, is written (fsm PhaseWrite). Zero
	// means no limit.
	WriteTimeout time.Duration

	// BodyReadTimeout bounds each Read of the request body, over HTTP/2
	// and HTTP/3: a producer that gives nothing for this long ends the
	// upload. Zero means no limit. Before the response the attempt fails
	// with a *TimeoutError (Stall StallProducer) and is not resent (RS06);
	// while the response body is being read the exchange is aborted and
	// that read fails with it; after the response ended (an early HTTP/3
	// response) the upload alone ends.
	BodyReadTimeout time.Duration

	// UploadStallTimeout bounds, over HTTP/2 and HTTP/3, how long the
	// transport may take to accept each piece of the request body, and
	// over HTTP/3 also its end: flow control or a peer that stopped
	// reading. Zero means no limit. Before the response the attempt fails
	// with a *TimeoutError (Stall StallTransport) and is not resent
	// (RS06); while the response body is being read the exchange is
	// aborted and that read fails with it; after the response ended the
	// connection is retired, which ends the upload once the connection's
	// other streams are done (quic-go cannot reset the sending side of a
	// stream it drives alone).
	UploadStallTimeout time.Duration

	// ResponseHeaderTimeout bounds the wait for the final response header
	// section once the request is written (fsm PhaseHeader). Zero means no
	// limit. A timeout is never resent automatically (RS06); under Retry
	// an idempotent or keyed request is retried after one (RS25).
	//
	// Whatever it is, over HTTP/1.1 each response header section (an
	// informational 1xx one, or the final one) must end within 20 s of
	// its first byte: a server that dribbles its status line or header
	// fields fails the attempt as a timeout (RS06) with an
	// *h1.HeaderTimeoutError (package adapters/h1) naming that bound. The
	// server's time before its first byte, and between a 1xx response and
	// the next, is not bounded by it (spec/choices.md, choice 40).
	ResponseHeaderTimeout time.Duration

	// ExpectContinueTimeout is how long an HTTP/1.1 request with "Expect:
	// 100-continue" waits for the server's 100 (Continue) before it sends
	// its body anyway. Zero means DefaultExpectContinueTimeout; a negative
	// value sends the body at once, as a zero one does in net/http.
	ExpectContinueTimeout time.Duration

	// DisableResend switches automatic resending off: every failure goes
	// to the caller (RS09), and Retry makes no retries either, so no
	// request goes out twice. Resending is on by default.
	DisableResend bool

	// CallerRetries declares that the caller retries calls itself: it
	// wraps this Transport in a retry policy of its own (a retrying
	// client library, a service mesh's retries). replaysafe then never
	// sends a request twice by itself, not even on evidence that the
	// server did not process it (RS10), so the caller's attempt count
	// stays true. It cannot be set together with Retry, replaysafe's own
	// retries: New panics. Off by default.
	CallerRetries bool

	// Retry configures retries under the same rules as the automatic
	// resend (replaysafe's own; see CallerRetries for the caller's): on listed statuses, failed dials and ambiguous failures of
	// requests whose copies have no further side effect, with a jittered
	// backoff, Retry-After, and a retry budget per route. The zero value
	// configures none; WithRetry overrides it per request. See Retry and
	// docs/retries.md.
	Retry Retry

	// DisableCompression stops the Transport from asking for gzip and
	// decoding it transparently, as in net/http. Off by default.
	DisableCompression bool

	// MaxResponseHeaderBytes bounds the response header section; zero
	// means DefaultMaxResponseHeaderBytes (10 MiB, the default of
	// net/http's and x/net's Transports). The informational (1xx)
	// responses of one attempt share a bound too: at most 32 of them and,
	// in total, MaxResponseHeaderBytes of header bytes (1 MiB when zero);
	// beyond it the attempt fails as a malformed response (RS07 after the
	// first 1xx), never resent. Over HTTP/3 quic-go stops after 5 itself,
	// and a request with a body, which quic-go's own ClientConn.RoundTrip
	// sends, is held only to that and to this bound per response: quic-go
	// ignores the verdict on the total.
	MaxResponseHeaderBytes int64

	// Observer receives every call's request, wire attempts, and final
	// response or error. The zero Observer observes nothing.
	Observer Observer

	// Proxies and routes (docs/proxies.md). Every call resolves
	// one route before pool lookup: Proxy (or ProxyChain) and ProxyAuth
	// are called once per call, and the automatic resend reuses what they
	// returned. Connections are pooled by route, so they never cross
	// proxies or credentials. Proxied connections are CONNECT tunnels (or
	// SOCKS5) through every hop, TLS with the origin inside for https; the
	// first hop is dialed through DialContext with its resolved address.
	// AcquireTimeout bounds the whole establishment, and a failure names
	// the step and hop (an *AcquireDeadlineError or a *ProxyError,
	// wrapped in *Error).
	//
	// Proxy returns the proxy URL (http, https, socks5, socks5h) for a
	// request, or nil for none, as net/http's Transport.Proxy. nil means
	// ProxyFromEnvironment, as in net/http's DefaultTransport, unless
	// IgnoreProxyEnvironment is set.
	Proxy func(*http.Request) (*url.URL, error)
	// IgnoreProxyEnvironment keeps a Transport whose Proxy and ProxyChain
	// are nil from reading HTTP_PROXY, HTTPS_PROXY and NO_PROXY: it then
	// uses no proxy, as net/http's zero Transport. Off by default.
	IgnoreProxyEnvironment bool
	// ProxyChain, if set, replaces Proxy: the proxies in dial order, the
	// first one dialed directly; an empty chain means no proxy.
	ProxyChain func(*http.Request) ([]*url.URL, error)
	// ProxyAuth, if set, returns the credentials for hop n (from 1) of a
	// request's chain; nil credentials mean the proxy URL's user
	// information, if any.
	ProxyAuth func(req *http.Request, hop int, proxyURL *url.URL) (*ProxyCredentials, error)
	// AllowCleartextChainCredentials lets a proxy chain send credentials
	// to an http or socks5 hop after the first. Those credentials (a Basic
	// Proxy-Authorization field, a SOCKS5 username and password) are
	// cleartext inside the tunnel every earlier hop relays, so each earlier
	// hop can read them. Off by default: such a chain fails before any
	// wire attempt with a *ProxyError naming the hop (wrapping a
	// *proxy.ChainCredentialsError of package transports/proxy). An https hop's credentials travel
	// inside TLS with that hop and need no permission.
	AllowCleartextChainCredentials bool
	// ProxyTLSClientConfig configures TLS with https proxies; nil means
	// the system roots. ALPN offers "h2" then "http/1.1" to the first
	// hop, whose tunnels are then HTTP/2 CONNECT streams on one shared
	// connection when it picks h2, and "http/1.1" alone to later hops.
	ProxyTLSClientConfig *tls.Config
	// ProxyConnectPlainHTTP tunnels plain http:// requests through an
	// HTTP or HTTPS proxy with CONNECT, as https:// requests always go.
	// By default they go to the proxy in absolute form ("GET
	// http://host/path", RFC 9112 §3.2.2), as net/http sends them and a
	// stock squid takes them (it refuses CONNECT to every port but 443):
	// one proxy connection then carries requests to any origin, with the
	// proxy's credentials on each (Proxy-Authorization), and it is that
	// connection whose staleness the rules judge. A chain of more than
	// one proxy, or a SOCKS5 one, always tunnels.
	ProxyConnectPlainHTTP bool
	// ProxyConnectHeader holds header fields sent with every CONNECT to
	// an HTTP or HTTPS proxy, as in net/http (nil: none).
	// GetProxyConnectHeader, if set, returns them instead, per proxy and
	// target ("host:port"), once per call of the route; an error fails
	// the call before anything is dialed (a *ProxyError).
	ProxyConnectHeader    http.Header
	GetProxyConnectHeader func(ctx context.Context, proxyURL *url.URL, target string) (http.Header, error)
	// OnProxyConnectResponse, if set, is called with each proxy's 2xx
	// answer to a CONNECT, as in net/http; an error it returns fails the
	// acquisition (RS04: nothing of the request was sent), the tunnel
	// closed.
	OnProxyConnectResponse func(ctx context.Context, proxyURL *url.URL, connectReq *http.Request, connectRes *http.Response) error

	// Protocol chooses the HTTP versions spoken: ProtocolNegotiate (the
	// zero value and the default, as in net/http's DefaultTransport: ALPN
	// over TLS picks HTTP/2 or HTTP/1.1, http URLs use HTTP/1.1),
	// ProtocolHTTP1 (HTTP/1.1 only, the opt-out of HTTP/2) or
	// ProtocolHTTP2 (h2 over TLS, h2c with prior knowledge over http).
	// Unlike net/http, custom dialers or a TLSClientConfig do not turn
	// HTTP/2 off (FromTransport takes net/http's choice). HTTP/2 connections are multiplexed: a pooled one
	// takes a new stream while the server's SETTINGS_MAX_CONCURRENT_STREAMS
	// allows, and a new connection is dialed when none can take it. ALPN
	// then offers "h2" (and "http/1.1" when negotiating) instead of what
	// TLSClientConfig says above. IdleConnTimeout closes an HTTP/2
	// connection that carried no stream for that long; with a negative
	// MaxIdleConnsPerHost one closes as soon as its streams are done.
	Protocol Protocol

	// Protocol ProtocolHTTP3, ProtocolPreferHTTP3 or
	// ProtocolDiscoverHTTP3 speaks HTTP/3 over QUIC to https origins on
	// direct routes, with quic-go's ClientConn driven directly.
	// QUICConfig configures those connections; nil means quic-go's
	// defaults with a KeepAlivePeriod of 1 s and a MaxIdleTimeout of 4 s,
	// so that a server that vanished without a stateless reset (killed,
	// or restarted) is found within 5 s of its last packet, the call
	// failing with the idle timeout (RS06) instead of waiting quic-go's
	// 30 s; a live server acknowledges the keep-alive PINGs, one a second
	// on an idle connection. A QUICConfig of the caller's keeps its own
	// values. It is cloned for each connection, and its Tracer
	// and MaxIncomingStreams are replaced (replaysafe observes every
	// connection through its tracer). TLSClientConfig applies as for
	// HTTP/1.1, with ALPN "h3" and TLS 1.3. QUIC connections are dialed
	// from a UDP socket per address family that they share (open while
	// any is), not through DialContext; the host is resolved with
	// net.DefaultResolver. IdleConnTimeout closes a
	// connection that carried no request for that long.
	QUICConfig *quic.Config

	// HTTP2 configures HTTP/2 connections with net/http's HTTP2Config,
	// each field with its meaning where a client has the notion;
	// nil, or a zero field, keeps replaysafe's defaults (those of
	// package transports/h2). SendPingTimeout is how long a connection
	// with a stream open may go without reading a frame before it sends
	// a liveness PING (default 2 s; negative: no liveness PING, as
	// net/http's zero), PingTimeout how long that PING waits for any frame
	// before the connection is declared dead (default 2 s), and the
	// requests on it are judged as under a close (spec/choices.md 36).
	// A server that does not send its SETTINGS and acknowledge ours
	// within 10 s (transports/h2's DefaultSettingsTimeout) has its
	// connection closed with SETTINGS_TIMEOUT, failing its requests as
	// the connection's end.
	// MaxReadFrameSize, MaxReceiveBufferPerStream and
	// MaxReceiveBufferPerConnection set the frame size and the receive
	// windows advertised to the server (defaults 16 KiB, 4 MiB, 16 MiB),
	// WriteByteTimeout bounds a socket write that makes no progress
	// (default none). The rest do not apply to this client:
	// MaxConcurrentStreams is a server's; StrictMaxConcurrentRequests is
	// MaxConnsPerHost here; the hpack table sizes keep RFC 7541's 4 KiB;
	// PermitProhibitedCipherSuites is TLSClientConfig's CipherSuites;
	// CountError's counts are Observer.OnConn's close reasons.
	HTTP2 *http.HTTP2Config

	// HTTP3HeadStart is how long, under ProtocolPreferHTTP3 and
	// ProtocolDiscoverHTTP3, a call that finds no pooled HTTP/3 connection
	// waits for a new one before it goes over TCP. The QUIC handshake
	// goes on in the background, under AcquireTimeout (or
	// DefaultAcquireTimeout when that is negative), and later calls use
	// the connection if it is established; if it fails, the route is
	// marked broken for five minutes and its Alt-Svc entry dropped. So a
	// black-holed UDP path costs a call at most this delay, whatever
	// AcquireTimeout is. Zero means DefaultHTTP3HeadStart; a negative
	// value waits for the handshake under the attempt's AcquireTimeout,
	// still falling back to TCP if it fails.
	//
	// A server that restarts loses its QUIC connections without telling
	// the client (no stateless reset): a call on such a connection waits
	// for QUICConfig.MaxIdleTimeout (quic-go's default 30 s) before it
	// fails. Set MaxIdleTimeout (with KeepAlivePeriod below it) to bound
	// that wait.
	HTTP3HeadStart time.Duration

	// EarlyData, off by default, lets HTTP/3 requests go as TLS early
	// data (0-RTT) on a new connection that resumes a session its route
	// had, saving the handshake's round trip. Only the call's first
	// attempt of a request an attacker could replay without harm goes so
	// (rule RS32): GET, HEAD, OPTIONS or TRACE without a body, resending
	// on and CallerRetries off. A server that rejects the early data
	// discarded it unprocessed; the request is then sent once more after
	// the handshake, as the call's automatic resend (RS33), and a 425 Too
	// Early is retried once (RS22). Every other request on such a
	// connection waits for the handshake. The session tickets are kept
	// per Transport, at most 256 of them (the least recently used go),
	// each route seeing only its own; a TLSClientConfig with a
	// ClientSessionCache of its own keeps that cache instead.
	EarlyData bool

	// EarlyDataKeyed, with EarlyData, lets a request that carries an
	// Idempotency-Key or X-Idempotency-Key go as early data too, whatever
	// its method: set it only when the server keeps its keys for as long
	// as an attacker could replay the early data (spec/choices.md 42). Over
	// quic-go only a request without a body can be sent in early data;
	// one with a body waits for the handshake.
	EarlyDataKeyed bool
}

// h3RetryAfter is how long, under ProtocolPreferHTTP3, a route whose QUIC
// connection could not be established keeps using TCP before HTTP/3 is
// tried again.
const h3RetryAfter = 5 * time.Minute
