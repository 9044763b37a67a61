package replaysafe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/driver"
	"github.com/replaysafe/replaysafe/transports/h2"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// normalized returns o with its defaults filled in: every zero field
// that documents a default gets it, and a negative one (no limit) keeps
// its sign for config.
func (o Options) normalized() Options {
	if o.DialContext == nil {
		d := &net.Dialer{KeepAlive: defaultKeepAlive}
		o.DialContext = d.DialContext
	}
	if o.Proxy == nil && o.ProxyChain == nil && !o.IgnoreProxyEnvironment {
		o.Proxy = ProxyFromEnvironment
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if o.AcquireTimeout == 0 {
		o.AcquireTimeout = DefaultAcquireTimeout
	}
	if o.TLSHandshakeTimeout == 0 {
		o.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if o.ExpectContinueTimeout == 0 {
		o.ExpectContinueTimeout = DefaultExpectContinueTimeout
	}
	if o.HTTP3HeadStart == 0 {
		o.HTTP3HeadStart = DefaultHTTP3HeadStart
	}
	return o
}

// check reports options that contradict each other.
func (o Options) check() error {
	if o.CallerRetries && o.Retry.MaxAttempts > 0 {
		return errors.New("replaysafe: Options.CallerRetries (the caller retries) and Options.Retry (replaysafe retries) are both set; choose one")
	}
	return nil
}

// config returns the driver's configuration of o, normalized: the
// callbacks with the face's types adapted, negative limits as none.
func (o Options) config() driver.Config {
	dc := dial.Config{
		DialContext:                    o.DialContext,
		DialTLSContext:                 o.DialTLSContext,
		Proxy:                          o.Proxy,
		ProxyChain:                     o.ProxyChain,
		AllowCleartextChainCredentials: o.AllowCleartextChainCredentials,
		ProxyTLSClientConfig:           o.ProxyTLSClientConfig,
		ConnectPlainHTTP:               o.ProxyConnectPlainHTTP,
		TLSHandshakeTimeout:            max(o.TLSHandshakeTimeout, 0),
	}
	if auth := o.ProxyAuth; auth != nil {
		dc.ProxyAuth = func(req *http.Request, hop int, u *url.URL) (*dial.Credentials, error) {
			c, err := auth(req, hop, u)
			if c == nil || err != nil {
				return nil, err
			}
			return &dial.Credentials{ID: c.ID, Username: c.Username, Password: c.Password}, nil
		}
	}
	switch {
	case o.GetProxyConnectHeader != nil:
		dc.ConnectHeader = o.GetProxyConnectHeader
	case o.ProxyConnectHeader != nil:
		h := o.ProxyConnectHeader.Clone()
		dc.ConnectHeader = func(context.Context, *url.URL, string) (http.Header, error) { return h, nil }
	}
	if f := o.OnProxyConnectResponse; f != nil {
		dc.OnConnectResponse = func(ctx context.Context, h proxy.Hop, req proxy.ConnectRequest, resp *proxy.Response) error {
			return f(ctx, &url.URL{Scheme: h.Kind.String(), Host: h.Addr()}, connectRequest(req), connectResponse(req, resp))
		}
	}
	c := driver.Config{
		Dial:                   dc,
		TLSClientConfig:        o.TLSClientConfig,
		Protocol:               o.Protocol,
		MaxIdleConnsPerHost:    o.MaxIdleConnsPerHost,
		MaxIdleConns:           max(o.MaxIdleConns, 0),
		MaxConnsPerHost:        o.MaxConnsPerHost,
		DisableKeepAlives:      o.DisableKeepAlives,
		IdleConnTimeout:        o.IdleConnTimeout,
		AcquireTimeout:         o.AcquireTimeout,
		WriteTimeout:           o.WriteTimeout,
		ResponseHeaderTimeout:  o.ResponseHeaderTimeout,
		ExpectContinueTimeout:  max(o.ExpectContinueTimeout, 0),
		BodyReadTimeout:        o.BodyReadTimeout,
		UploadStallTimeout:     o.UploadStallTimeout,
		DisableResend:          o.DisableResend,
		CallerRetries:          o.CallerRetries,
		DisableCompression:     o.DisableCompression,
		MaxResponseHeaderBytes: o.MaxResponseHeaderBytes,
		QUICConfig:             o.QUICConfig,
		HTTP3HeadStart:         o.HTTP3HeadStart,
		EarlyData:              o.EarlyData,
		EarlyDataKeyed:         o.EarlyDataKeyed,
		H3RetryAfter:           h3RetryAfter,
		BackgroundDialTimeout:  o.AcquireTimeout,
	}
	if c.BackgroundDialTimeout <= 0 {
		c.BackgroundDialTimeout = DefaultAcquireTimeout
	}
	c.FailureError = func(f *driver.Failure) error { return callError(f) }
	c.H2 = h2Config(o.HTTP2)
	if f := o.Observer.OnAttempt; f != nil {
		c.OnAttempt = func(r driver.Report) { f(AttemptReport(r)) }
	}
	if f := o.Observer.OnAttemptStart; f != nil {
		c.OnAttemptStart = func(s driver.AttemptStart) { f(AttemptStart(s)) }
	}
	if f := o.Observer.OnConn; f != nil {
		c.OnConn = func(e driver.ConnEvent) {
			f(ConnEvent{Kind: ConnEventKind(e.Kind), Addr: e.Addr, Proto: e.Proto, Reason: ConnCloseReason(e.Reason)})
		}
	}
	return c
}

// connectRequest is a CONNECT as net/http shows it to
// OnProxyConnectResponse.
func connectRequest(req proxy.ConnectRequest) *http.Request {
	return &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: req.Target}, Host: req.Target,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: req.Header.Clone()}
}

// connectResponse is a proxy's answer to req as net/http shows it: no
// body (the tunnel follows it).
func connectResponse(req proxy.ConnectRequest, resp *proxy.Response) *http.Response {
	major, minor := 1, 1
	if resp.Proto == "HTTP/1.0" {
		minor = 0
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", resp.StatusCode, resp.Reason), StatusCode: resp.StatusCode,
		Proto: resp.Proto, ProtoMajor: major, ProtoMinor: minor, Header: resp.Header, Body: http.NoBody,
		Request: connectRequest(req)}
}

// defaultKeepAlive is the TCP keep-alive period of the default dialer.
const defaultKeepAlive = 30 * time.Second

// h2Config maps net/http's HTTP2Config onto the HTTP/2 connection's
// (Options.HTTP2): values net/http would call invalid, and zero ones,
// keep transports/h2's defaults.
func h2Config(c *http.HTTP2Config) h2.Config {
	var out h2.Config
	if c == nil {
		return out
	}
	if c.MaxReadFrameSize >= 16<<10 && c.MaxReadFrameSize <= 16<<20 {
		out.MaxReadFrameSize = uint32(c.MaxReadFrameSize)
	}
	if c.MaxReceiveBufferPerStream > 0 && c.MaxReceiveBufferPerStream <= math.MaxInt32 {
		out.StreamWindow = int32(c.MaxReceiveBufferPerStream)
	}
	if c.MaxReceiveBufferPerConnection >= 64<<10 && c.MaxReceiveBufferPerConnection <= math.MaxInt32 {
		out.ConnWindow = int32(c.MaxReceiveBufferPerConnection)
	}
	switch {
	case c.SendPingTimeout > 0:
		out.PingAfter = c.SendPingTimeout
	case c.SendPingTimeout < 0:
		out.PingAfter = -1
	}
	out.PingTimeout = max(c.PingTimeout, 0)
	out.WriteByteTimeout = max(c.WriteByteTimeout, 0)
	return out
}
