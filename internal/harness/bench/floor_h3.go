package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/fsm"
)

// H3Floor is the HTTP/3 Floor: quic-go's http3.Transport, each of whose
// connections an h3.Watch follows through quic-go's qlog tracer (the
// GOAWAY stream ID, each request's HEADERS frame), each request followed
// by an h3.Attempt whose httptrace hooks tie it to its stream. The
// evidence is replaysafe's own; the hooks and the request's context are
// made per request, as replaysafe makes them, and GotConn is one hook
// more, which replaysafe (its own pool) does not need.
//
// Like its peer, it keeps one connection per origin, dialed from one UDP
// socket of its own on 127.0.0.1 with the peer's default QUIC
// configuration and the Watch's tracer; a request finds its connection's
// Watch by the origin it names.
type H3Floor struct {
	*http3.Transport
	floorCounts

	watches registry[string, *h3.Watch] // by origin (host:port), the latest dial's

	mu     sync.Mutex
	qt     *quic.Transport // made at the first dial
	closed bool            // Close was called
}

// NewH3Floor returns an H3Floor trusting e.TLS; it decides when decide
// is set.
func NewH3Floor(e Env, decide bool) Floor {
	f := &H3Floor{}
	f.clock = newClock(decide)
	f.Transport = &http3.Transport{TLSClientConfig: e.TLS, Dial: f.dial}
	return f
}

// errFloorClosed is the dial error of an H3Floor after Close.
var errFloorClosed = errors.New("bench: H3Floor closed")

// dial opens a QUIC connection to addr with a new Watch as its tracer,
// the Watch of addr's requests from now on.
func (f *H3Floor) dial(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	qt, err := f.transport()
	if err != nil {
		return nil, err
	}
	w := h3.NewWatch()
	cfg = cfg.Clone()
	cfg.Tracer = w.Tracer
	c, err := qt.DialEarly(ctx, raddr, tlsCfg, cfg)
	if err != nil {
		return nil, err
	}
	f.watches.put(addr, w)
	return c, nil
}

// transport returns the floor's QUIC transport, made with its socket at
// the first dial.
func (f *H3Floor) transport() (*quic.Transport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errFloorClosed
	}
	if f.qt == nil {
		sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		f.qt = &quic.Transport{Conn: sock}
	}
	return f.qt, nil
}

// h3FloorAttempt is one request of an H3Floor: the h3.Attempt learns its
// Watch when quic-go says the request has its connection (GotConn, before
// the connection's RoundTrip, so before any other hook).
type h3FloorAttempt struct {
	floorMachine
	f      *H3Floor
	origin string
	bound  bool // gotConn gave att its Watch
	att    h3.Attempt
	up     floorUpload
	body   floorBody
}

func (a *h3FloorAttempt) gotConn(info httptrace.GotConnInfo) {
	a.att.Init(a.f.watches.get(a.origin))
	a.bound = true
	a.feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: info.Reused, Proto: fsm.ProtoH3})
}

// RoundTrip sends req through quic-go with the evidence hooks installed
// and, when the floor decides, feeds the attempt's machine what they and
// the response show.
func (f *H3Floor) RoundTrip(req *http.Request) (*http.Response, error) {
	a := newFloorRequest[h3FloorAttempt](req, f.clock)
	a.f, a.origin = f, req.URL.Host
	trace := a.att.Trace(a, nil)
	trace.GotConn = a.gotConn
	return floorRoundTrip(f.Transport, a.up.send(req, trace, a.readee(), true), a, &a.body)
}

// failed feeds the failure, unless the request never got a connection,
// so never a Watch.
func (a *h3FloorAttempt) failed(ctx context.Context, err error) {
	if a.bound {
		a.feed(a.up.failure(a.att.Failure(ctx, err), err))
		a.att.Done()
	}
	a.up.end()
}

func (a *h3FloorAttempt) closed() {
	a.floorMachine.closed()
	_, claimed := a.att.Stream()
	a.f.count(claimed, a.rec)
	a.att.Done()
	a.f.ended(&a.up, a.rec)
}

// CloseIdleConnections closes quic-go's idle connections.
func (f *H3Floor) CloseIdleConnections() { f.Transport.CloseIdleConnections() }

// Close closes every connection, then the floor's QUIC transport and its
// socket, and forgets the Watches.
func (f *H3Floor) Close() error {
	err := f.Transport.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.watches.forget()
	if f.qt != nil {
		err = errors.Join(err, f.qt.Close(), f.qt.Conn.Close())
		f.qt = nil
	}
	return err
}
