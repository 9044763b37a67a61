package replaysafe

import (
	"net/http"
	"net/url"

	"github.com/replaysafe/replaysafe/transports"
)

// Transport is the round tripper (HTTP/1.1, and HTTP/2 or HTTP/3 by
// Options.Protocol); see transports.Transport.
type Transport = transports.Transport

// Options configures a Transport; the zero value is ready to use. See
// transports.Options for every field and its default.
type Options = transports.Options

// Observer receives every call's request, wire attempts and final
// response or error; see transports.Observer.
type Observer = transports.Observer

// AttemptReport describes one finished wire attempt; see
// transports.AttemptReport.
type AttemptReport = transports.AttemptReport

// Error is the error of a call replaysafe gave up on: the rule that
// decided, the attempt count and the cause; see transports.Error.
type Error = transports.Error

// TimeoutError is the cause of a failure decided because a phase limit
// of Options passed; see transports.TimeoutError.
type TimeoutError = transports.TimeoutError

// Protocol chooses the HTTP version a Transport speaks; see
// transports.Protocol.
type Protocol = transports.Protocol

// Protocol policies.
const (
	ProtocolHTTP1       = transports.ProtocolHTTP1       // HTTP/1.1 only (the default)
	ProtocolHTTP2       = transports.ProtocolHTTP2       // HTTP/2 only: ALPN h2 for https, prior knowledge for http
	ProtocolNegotiate   = transports.ProtocolNegotiate   // ALPN picks h2 or http/1.1 for https; http stays HTTP/1.1
	ProtocolHTTP3       = transports.ProtocolHTTP3       // HTTP/3 over QUIC only: https on direct routes
	ProtocolPreferHTTP3 = transports.ProtocolPreferHTTP3 // HTTP/3 first for direct https, TCP (as ProtocolNegotiate) when QUIC fails or through proxies

	ProtocolDiscoverHTTP3 = transports.ProtocolDiscoverHTTP3 // TCP until an origin advertises HTTP/3 with Alt-Svc, then HTTP/3 there
)

// Stall names the side of a request body upload that stopped making
// progress (TimeoutError.Stall); see transports.Stall.
type Stall = transports.Stall

// Stalls.
const (
	StallNone      = transports.StallNone      // a phase limit passed, no stall
	StallProducer  = transports.StallProducer  // the caller's body produced nothing for BodyReadTimeout
	StallTransport = transports.StallTransport // the transport took nothing for UploadStallTimeout
)

// ProxyCredentials are the credentials for one proxy hop; see
// transports.ProxyCredentials.
type ProxyCredentials = transports.ProxyCredentials

// ProxyError reports a proxy selector or credential resolver failure, or
// an unusable proxy route; see transports.ProxyError.
type ProxyError = transports.ProxyError

// AcquireDeadlineError is the cause when the one acquisition deadline
// passed, naming the step and hop; see transports.AcquireDeadlineError.
type AcquireDeadlineError = transports.AcquireDeadlineError

// ProxyFromEnvironment selects a proxy from HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY (implicit ports count); use it as Options.Proxy.
func ProxyFromEnvironment(req *http.Request) (*url.URL, error) {
	return transports.ProxyFromEnvironment(req)
}

// New returns a Transport configured by o.
func New(o Options) *Transport { return transports.New(o) }
