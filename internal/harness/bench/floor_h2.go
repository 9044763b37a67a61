package bench

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
	conn "github.com/replaysafe/replaysafe/transports/h2"
)

// H2Floor is the HTTP/2 Floor: replaysafe's own HTTP/2 connection
// (transports/h2), each request followed by an h2.Attempt, its
// StreamEvents, and nothing else of replaysafe: the connections are kept
// in a plain list, a request taking the first that reserves a stream and
// dialing when none does. The evidence is replaysafe's own.
type H2Floor struct {
	floorCounts
	tls *tls.Config

	mu    sync.Mutex
	conns []*conn.ClientConn
}

// NewH2Floor returns an H2Floor speaking h2c with prior knowledge, or h2
// over TLS with e.TLS; it decides when decide is set.
func NewH2Floor(e Env, decide bool) Floor {
	f := &H2Floor{tls: e.TLS}
	f.clock = newClock(decide)
	return f
}

// conn returns a connection with a stream reserved for one request.
func (f *H2Floor) conn(ctx context.Context, addr string) (*conn.ClientConn, bool, error) {
	f.mu.Lock()
	for _, cc := range f.conns {
		if cc.Reserve() {
			f.mu.Unlock()
			return cc, true, nil
		}
	}
	f.mu.Unlock()
	var nc net.Conn
	var err error
	if f.tls == nil {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		d := tls.Dialer{Config: f.tls}
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, false, err
	}
	cc, err := conn.NewClientConn(nc, conn.Config{})
	if err != nil {
		return nil, false, err
	}
	cc.Reserve()
	f.mu.Lock()
	f.conns = append(f.conns, cc)
	f.mu.Unlock()
	return cc, false, nil
}

// h2FloorAttempt is one request of an H2Floor.
type h2FloorAttempt struct {
	floorMachine
	f    *H2Floor
	att  h2.Attempt
	up   floorUpload
	body floorBody
}

// RoundTrip sends req on a connection with the evidence reported to an
// h2.Attempt and, when the floor decides, feeds the attempt's machine
// what it and the response show.
func (f *H2Floor) RoundTrip(req *http.Request) (*http.Response, error) {
	a := newFloorRequest[h2FloorAttempt](req, f.clock)
	a.f = f
	a.att.Init(a)
	cc, reused, err := f.conn(req.Context(), req.URL.Host)
	if err != nil {
		return nil, err
	}
	a.feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH2})
	rt := roundTripFunc(func(out *http.Request) (*http.Response, error) { return cc.RoundTrip(out, &a.att) })
	return floorRoundTrip(rt, a.up.send(req, &httptrace.ClientTrace{}, a.readee(), true), a, &a.body)
}

// roundTripFunc is a func as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (a *h2FloorAttempt) failed(ctx context.Context, err error) {
	a.feed(a.up.failure(a.att.Failure(ctx, err), err))
	a.up.end()
}

func (a *h2FloorAttempt) closed() {
	a.floorMachine.closed()
	_, written := a.att.Stream()
	a.f.count(written, a.rec)
	a.f.ended(&a.up, a.rec)
}

// CloseIdleConnections closes every connection of the floor (a benchmark
// calls it when it is done with the client).
func (f *H2Floor) CloseIdleConnections() {
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
}
