package transports

import (
	"context"
	"crypto/tls"
	"net"
	"time"
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
	// DefaultKeepAlive is the TCP keep-alive period of the default dialer.
	DefaultKeepAlive = 30 * time.Second
)

// Options configures a Transport. The zero value is ready to use: every
// field documents its default.
type Options struct {
	// DialContext dials the TCP connection for a new HTTP or HTTPS
	// connection; TLS runs over what it returns. nil means a net.Dialer
	// with KeepAlive DefaultKeepAlive. Its context carries the
	// acquisition deadline (AcquireTimeout) and the request's context.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// TLSClientConfig configures TLS for https URLs; nil means the zero
	// tls.Config. It is cloned for each connection; an empty ServerName
	// becomes the URL's host, and NextProtos is always {"http/1.1"}: this
	// Transport speaks HTTP/1.1 only.
	TLSClientConfig *tls.Config

	// MaxIdleConnsPerHost bounds the idle connections kept for one
	// scheme and host:port. Zero means DefaultMaxIdleConnsPerHost; a
	// negative value keeps none (every connection closes after its
	// exchange).
	MaxIdleConnsPerHost int

	// IdleConnTimeout is how long a connection may stay idle in the pool
	// before it is closed. Zero means DefaultIdleConnTimeout; a negative
	// value means no limit.
	IdleConnTimeout time.Duration

	// AcquireTimeout bounds getting a connection for one wire attempt: the
	// pool lookup, the dial and the TLS handshake under one deadline (fsm
	// PhaseAcquire). A resend starts a new deadline. Zero means
	// DefaultAcquireTimeout; a negative value means no limit.
	AcquireTimeout time.Duration

	// WriteTimeout bounds the upload: from acquiring the connection until
	// the whole request, body included, is written (fsm PhaseWrite). Zero
	// means no limit.
	WriteTimeout time.Duration

	// ResponseHeaderTimeout bounds the wait for the final response header
	// section once the request is written (fsm PhaseHeader). Zero means no
	// limit. A timeout is never resent (RS06).
	ResponseHeaderTimeout time.Duration

	// DisableResend switches automatic resending off: every failure goes
	// to the caller (RS09). Resending is on by default.
	DisableResend bool

	// RetryPolicy declares that the caller wraps this Transport in a retry
	// policy of its own. replaysafe then never resends by itself (RS10),
	// so the policy's attempt count stays true. Off by default.
	RetryPolicy bool

	// DisableCompression stops the Transport from asking for gzip and
	// decoding it transparently, as in net/http. Off by default.
	DisableCompression bool

	// MaxResponseHeaderBytes bounds the response header section; zero
	// means net/http's default (1 MB).
	MaxResponseHeaderBytes int64

	// Observer receives every call's request, wire attempts, and final
	// response or error. The zero Observer observes nothing.
	Observer Observer
}

// normalized returns o with its defaults filled in.
func (o Options) normalized() Options {
	if o.DialContext == nil {
		d := &net.Dialer{KeepAlive: DefaultKeepAlive}
		o.DialContext = d.DialContext
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if o.AcquireTimeout == 0 {
		o.AcquireTimeout = DefaultAcquireTimeout
	}
	return o
}
