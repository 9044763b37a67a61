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
	if o.HTTP2 != nil {
		c := *o.HTTP2
		o.HTTP2 = &c
	}
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
// choice: HTTP/2 by ALPN unless ht has custom dialers or TLS
// configuration and not ForceAttemptHTTP2, or a TLSNextProto without an
// "h2" entry (an empty one turns HTTP/2 off). The fields without a
// counterpart (TLSNextProto's RoundTrippers, WriteBufferSize,
// ReadBufferSize) are left out; HTTP2 is copied. docs/guarantees.md's table
// "http.Transport field → replaysafe" lists every field.
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
	if ht.HTTP2 != nil {
		c := *ht.HTTP2
		o.HTTP2 = &c
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

// protocolOf returns the protocol policy net/http would follow with ht
// (its Transport.protocols): ht.Protocols when set, where unencrypted
// HTTP/2 counts only without HTTP/1 as in net/http; else HTTP/1.1 always
// and HTTP/2 by ALPN, unless TLSNextProto is set without an "h2" entry
// (the documented way to turn HTTP/2 off), or custom dialers or TLS
// configuration are set without ForceAttemptHTTP2.
func protocolOf(ht *http.Transport) Protocol {
	if p := ht.Protocols; p != nil {
		switch h1, h2 := p.HTTP1(), p.HTTP2(); {
		case h1 && h2:
			return ProtocolNegotiate
		case h1:
			return ProtocolHTTP1
		case h2 || p.UnencryptedHTTP2():
			return ProtocolHTTP2
		}
		return ProtocolHTTP1
	}
	//lint:ignore SA1019 net/http's choice still looks at the deprecated dialers
	custom := ht.TLSClientConfig != nil || ht.Dial != nil || ht.DialContext != nil || ht.DialTLS != nil || ht.DialTLSContext != nil
	switch {
	case ht.TLSNextProto != nil:
		if ht.TLSNextProto["h2"] != nil {
			return ProtocolNegotiate // HTTP/2 by ALPN, on replaysafe's own connection
		}
		return ProtocolHTTP1
	case custom && !ht.ForceAttemptHTTP2:
		return ProtocolHTTP1
	}
	return ProtocolNegotiate
}
