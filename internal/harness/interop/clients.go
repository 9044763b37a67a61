//lint:file-ignore SA1019 x/net/http2.Transport, deprecated in favour of net/http, is one of the peers measured here.

package interop

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/harness/tracecheck"
)

// The clients of the rows.
const (
	// Replaysafe is this module's Transport, its every attempt checked by
	// package tracecheck.
	Replaysafe = "replaysafe"
	// NetHTTP is net/http's Transport (HTTP/1.1, or HTTP/2 with
	// ForceAttemptHTTP2 over TLS).
	NetHTTP = "net/http"
	// XNetHTTP2 is golang.org/x/net/http2's Transport.
	XNetHTTP2 = "x/net/http2"
	// QuicGo is quic-go's http3.Transport.
	QuicGo = "quic-go/http3"
)

// Wire is how a row's client speaks to the server.
type Wire uint8

// Wires.
const (
	// WireH1 is HTTP/1.1 (cleartext or TLS, as the URL says).
	WireH1 Wire = iota
	// WireH2 is HTTP/2 over TLS.
	WireH2
	// WireH2C is HTTP/2 over cleartext TCP with prior knowledge (h2c):
	// replaysafe ProtocolHTTP2 to an http URL, net/http with Protocols
	// UnencryptedHTTP2 only.
	WireH2C
	// WireH3 is HTTP/3 only (replaysafe ProtocolHTTP3).
	WireH3
	// WirePreferH3 is replaysafe ProtocolPreferHTTP3.
	WirePreferH3
	// WireDiscoverH3 is replaysafe ProtocolDiscoverHTTP3.
	WireDiscoverH3
)

// client is one client instance of one run: a RoundTripper, the
// connections it opened (-1 when it cannot tell) and its cleanup.
type client struct {
	rt           http.RoundTripper
	dials        *atomic.Int64
	unknownConns bool
	// resends counts replaysafe's resent attempts, crossed its attempts
	// that crossed the server's close (crossedClose); nil for the others,
	// which do not tell.
	resends, crossed *atomic.Int64
	close            func()
}

// crossedClose reports whether a replaysafe attempt crossed the server's
// close: it ran on a reused connection, wrote request bytes, and the
// connection failed under it (closed, reset, TLS failure, a GOAWAY)
// before a response byte arrived. An attempt that saw the close before
// writing (handed back, RS12; nothing written, RS16) met no crossing.
func crossedClose(r replaysafe.AttemptReport) bool {
	if !r.Reused {
		return false
	}
	wrote := false
	for _, e := range r.Events {
		switch e.Kind {
		case fsm.EventFirstByteWritten:
			wrote = true
		case fsm.EventFirstResponseByte, fsm.EventInformational, fsm.EventFinalHeaders, fsm.EventMalformed:
			return false
		case fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventH2GoAway, fsm.EventH3GoAway:
			return wrote
		}
	}
	return false
}

// clientOptions are what a row may change in the clients it builds.
type clientOptions struct {
	// quic configures HTTP/3 connections (replaysafe and quic-go); nil
	// means the client's default.
	quic *quic.Config
	// idle is IdleConnTimeout (replaysafe and net/http); zero means the
	// client's default.
	idle time.Duration
}

// newClient builds a fresh client named name for wire w.
func newClient(name string, w Wire, tlsConf *tls.Config, checker *tracecheck.Checker, o clientOptions) (*client, error) {
	dials, resends, crossed := new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}
	switch name {
	case Replaysafe:
		opts := replaysafe.Options{
			DialContext:     dial,
			TLSClientConfig: tlsConf.Clone(),
			QUICConfig:      o.quic,
			IdleConnTimeout: o.idle,
			Observer: replaysafe.Observer{OnAttempt: func(r replaysafe.AttemptReport) {
				if r.Number > 1 {
					resends.Add(1)
				}
				if crossedClose(r) {
					crossed.Add(1)
				}
				checker.Observe(r)
			}},
		}
		switch w {
		case WireH1:
			opts.Protocol = replaysafe.ProtocolHTTP1
		case WireH2, WireH2C:
			opts.Protocol = replaysafe.ProtocolHTTP2
		case WireH3:
			opts.Protocol = replaysafe.ProtocolHTTP3
		case WirePreferH3:
			opts.Protocol = replaysafe.ProtocolPreferHTTP3
		case WireDiscoverH3:
			opts.Protocol = replaysafe.ProtocolDiscoverHTTP3
		}
		t := replaysafe.New(opts)
		// QUIC connections are not dialed through DialContext.
		return &client{rt: t, dials: dials, resends: resends, crossed: crossed, unknownConns: w >= WireH3, close: t.CloseIdleConnections}, nil
	case NetHTTP:
		if w >= WireH3 {
			return nil, fmt.Errorf("interop: %s speaks no HTTP/3", name)
		}
		t := &http.Transport{DialContext: dial, TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: w == WireH2, IdleConnTimeout: o.idle}
		if w == WireH2C {
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
		return &client{rt: t, dials: dials, close: t.CloseIdleConnections}, nil
	case XNetHTTP2:
		if w != WireH2 {
			return nil, fmt.Errorf("interop: %s speaks HTTP/2 only", name)
		}
		t := &http2.Transport{
			TLSClientConfig: tlsConf.Clone(),
			DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				tc := tls.Client(c, cfg)
				if err := tc.HandshakeContext(ctx); err != nil {
					c.Close()
					return nil, err
				}
				return tc, nil
			},
		}
		return &client{rt: t, dials: dials, close: t.CloseIdleConnections}, nil
	case QuicGo:
		if w != WireH3 {
			return nil, fmt.Errorf("interop: %s speaks HTTP/3 only", name)
		}
		t := &http3.Transport{
			TLSClientConfig: tlsConf.Clone(),
			QUICConfig:      o.quic,
			Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				dials.Add(1)
				return quic.DialAddrEarly(ctx, addr, tlsCfg, cfg)
			},
		}
		return &client{rt: t, dials: dials, close: func() { _ = t.Close() }}, nil
	}
	return nil, fmt.Errorf("interop: unknown client %q", name)
}
