package replaysafe

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Clone returns a new Transport with t's Options and pools of its own, as
// http.Transport.Clone does: TLSClientConfig and ProxyTLSClientConfig are
// cloned, and the functions (dialers, proxy selectors, the Observer) are
// shared.
func (t *Transport) Clone() *Transport {
	o := t.opt
	o.TLSClientConfig = o.TLSClientConfig.Clone()
	o.ProxyTLSClientConfig = o.ProxyTLSClientConfig.Clone()
	o.ProxyConnectHeader = o.ProxyConnectHeader.Clone()
	return New(o)
}

// FromTransport returns the Options that make a Transport configured as
// ht is, so that replacing an http.Transport is one line:
//
//	tr := replaysafe.New(replaysafe.FromTransport(http.DefaultTransport.(*http.Transport)))
//
// Each field of ht with a counterpart is taken with its meaning, zero
// values included: ht's nil Proxy is no proxy (IgnoreProxyEnvironment),
// and its zero IdleConnTimeout, MaxIdleConns, TLSHandshakeTimeout and
// ExpectContinueTimeout (no limit, or no wait) are negative here. The
// protocol policy follows ht.Protocols when set, else net/http's own
// choice: HTTP/2 by ALPN unless ht has custom dialers, TLS configuration
// or TLSNextProto and not ForceAttemptHTTP2. The fields that cannot
// apply (TLSNextProto, WriteBufferSize, ReadBufferSize) are left out;
// docs/guarantees.md lists every field.
func FromTransport(ht *http.Transport) Options {
	o := Options{
		Proxy:                  ht.Proxy,
		IgnoreProxyEnvironment: ht.Proxy == nil,
		OnProxyConnectResponse: ht.OnProxyConnectResponse,
		DialContext:            ht.DialContext,
		DialTLSContext:         ht.DialTLSContext,
		TLSClientConfig:        ht.TLSClientConfig.Clone(),
		TLSHandshakeTimeout:    orNone(ht.TLSHandshakeTimeout),
		DisableKeepAlives:      ht.DisableKeepAlives,
		DisableCompression:     ht.DisableCompression,
		MaxIdleConns:           ht.MaxIdleConns,
		MaxIdleConnsPerHost:    ht.MaxIdleConnsPerHost,
		MaxConnsPerHost:        ht.MaxConnsPerHost,
		IdleConnTimeout:        orNone(ht.IdleConnTimeout),
		ResponseHeaderTimeout:  ht.ResponseHeaderTimeout,
		ExpectContinueTimeout:  orNone(ht.ExpectContinueTimeout),
		ProxyConnectHeader:     ht.ProxyConnectHeader.Clone(),
		GetProxyConnectHeader:  ht.GetProxyConnectHeader,
		MaxResponseHeaderBytes: ht.MaxResponseHeaderBytes,
		Protocol:               protocolOf(ht),
	}
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = -1 // net/http: no limit
	}
	//lint:ignore SA1019 a Transport configured with the deprecated dialers still dials with them
	dial, dialTLS := ht.Dial, ht.DialTLS
	if o.DialContext == nil && dial != nil {
		o.DialContext = func(_ context.Context, network, addr string) (net.Conn, error) { return dial(network, addr) }
	}
	if o.DialTLSContext == nil && dialTLS != nil {
		o.DialTLSContext = func(_ context.Context, network, addr string) (net.Conn, error) { return dialTLS(network, addr) }
	}
	return o
}

// orNone is net/http's zero duration, no limit, as a negative one.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// protocolOf returns the protocol policy net/http would follow with ht.
func protocolOf(ht *http.Transport) Protocol {
	if p := ht.Protocols; p != nil {
		h1, h2 := p.HTTP1(), p.HTTP2() || p.UnencryptedHTTP2()
		switch {
		case h1 && h2:
			return ProtocolNegotiate
		case h2:
			return ProtocolHTTP2
		}
		return ProtocolHTTP1
	}
	//lint:ignore SA1019 net/http's choice still looks at the deprecated dialers
	custom := ht.TLSClientConfig != nil || ht.Dial != nil || ht.DialContext != nil || ht.DialTLS != nil || ht.DialTLSContext != nil || ht.TLSNextProto != nil
	if custom && !ht.ForceAttemptHTTP2 {
		return ProtocolHTTP1
	}
	return ProtocolNegotiate
}
