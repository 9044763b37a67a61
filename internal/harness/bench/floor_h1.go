package bench

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
)

// H1Floor is the HTTP/1.1 Floor: net/http's Transport over connections
// an h1.Conn watches (every read and write that reached the wire), each
// request attached to its connection when net/http says which one it got
// (GotConn). When the floor decides, the request's h1.Recorder is what is
// attached, and its httptrace hooks are installed too, as replaysafe's
// HTTP/1.1 attempts feed theirs.
//
// net/http picks the connection after the request's context is made, so
// the floor installs a request's hooks per request, where replaysafe
// installs its connection's, made once: the deciding floor makes four
// closures per request more than replaysafe does. And net/http may hand a
// connection to the next request before the previous one's body has
// returned io.EOF to its reader, so a request detaches the previous one
// when it attaches, and nothing detaches at the body's end.
type H1Floor struct {
	*http.Transport
	floorCounts
}

// NewH1Floor returns an H1Floor keeping e.MaxIdle idle connections per
// host; it decides when decide is set. It speaks cleartext HTTP/1.1 only,
// as the HTTP/1.1 benchmark server does: over TLS, net/http would hand
// GotConn its own TLS connection, not the observed one beneath it.
func NewH1Floor(e Env, decide bool) Floor {
	f := &H1Floor{}
	f.clock = newClock(decide)
	var p http.Protocols
	p.SetHTTP1(true)
	f.Transport = &http.Transport{MaxIdleConnsPerHost: e.MaxIdle, Protocols: &p}
	f.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return h1.NewConn(c, nil), nil
	}
	return f
}

// h1FloorAttempt is one request of an H1Floor. On an evidence floor it
// is its own h1.Sink and only notes that its connection wrote a byte.
type h1FloorAttempt struct {
	f     *H1Floor
	rec   *h1.Recorder // nil on an evidence floor
	wrote atomic.Bool  // a byte reached the wire (evidence floor)
	up    floorUpload
	body  floorBody
}

// deciding1 is a request of an H1Floor that decides, with its Recorder
// in the same allocation.
type deciding1 struct {
	h1FloorAttempt
	r h1.Recorder
}

// Wrote, WriteFailed and Read implement h1.Sink for the evidence floor.
func (a *h1FloorAttempt) Wrote()            { a.wrote.Store(true) }
func (a *h1FloorAttempt) WriteFailed(error) {}
func (a *h1FloorAttempt) Read(int, error)   {}

func (a *h1FloorAttempt) gotConn(info httptrace.GotConnInfo) {
	c, ok := info.Conn.(*h1.Conn)
	if !ok {
		return // not the floor's connection: nothing is observed, nothing claimed
	}
	var sink h1.Sink = a
	if a.rec != nil {
		sink = a.rec
	}
	c.Detach()
	// A stale connection is not acted on: the floor only prices the
	// evidence.
	_ = c.Attach(sink)
	if a.rec != nil {
		a.rec.Acquired(info.Reused)
	}
}

// RoundTrip sends req through net/http with the connection observed and,
// when the floor decides, the Recorder's hooks installed.
func (f *H1Floor) RoundTrip(req *http.Request) (*http.Response, error) {
	var a *h1FloorAttempt
	var trace *httptrace.ClientTrace
	if f.clock == nil {
		a = &h1FloorAttempt{}
		trace = &httptrace.ClientTrace{}
	} else {
		d := &deciding1{}
		a = &d.h1FloorAttempt
		a.rec = &d.r
		d.r.InitUnarmed(machineRequest(req), fsm.Limits{}, f.clock, nil)
		d.r.SkipEvents() // as replaysafe without an observer
		trace = d.r.ClientTrace()
	}
	a.f = f
	trace.GotConn = a.gotConn
	var first interface{ BodyRead() }
	if a.rec != nil {
		first = a.rec
	}
	// No context of its own: net/http ends the upload with the exchange.
	return floorRoundTrip(f.Transport, a.up.send(req, trace, first, false), a, &a.body)
}

func (a *h1FloorAttempt) failed(ctx context.Context, err error) {
	if a.rec != nil {
		a.rec.Fail(err, ctx, a.up.local())
		a.rec.Stop()
	}
}

func (a *h1FloorAttempt) headers() {
	if a.rec != nil {
		a.rec.FinalHeaders()
	}
}

func (a *h1FloorAttempt) eof() {
	if a.rec != nil {
		a.rec.Complete()
	}
}

func (a *h1FloorAttempt) closed() {
	if a.rec == nil {
		a.f.count(a.wrote.Load(), nil)
		return
	}
	if a.rec.Facts()&fsm.FactComplete == 0 {
		a.rec.Abandon()
	}
	a.rec.Stop()
	a.f.count(a.rec.Facts()&fsm.FactWroteAny != 0, &a.rec.Core)
	a.f.ended(&a.up, &a.rec.Core)
}
