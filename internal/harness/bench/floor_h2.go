package bench

//lint:file-ignore SA1019 the floor is x/net/http2's own Transport, the HTTP/2 peer; x/net's deprecation points to net/http.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptrace"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
)

// H2Floor is the HTTP/2 Floor: x/net's Transport over connections
// h2.Observe watches, each request followed by an h2.Attempt whose four
// httptrace hooks claim its stream, and let go of when its body is
// closed. The evidence is replaysafe's own; the hooks and the request's
// context are made per request, as replaysafe makes them.
type H2Floor struct {
	*http2.Transport
	floorCounts

	wires registry[net.Conn, *h2.Wire] // by the observed connection x/net holds
}

// NewH2Floor returns an H2Floor speaking h2c with prior knowledge, or h2
// over TLS with e.TLS; it decides when decide is set.
func NewH2Floor(e Env, decide bool) Floor {
	f := &H2Floor{}
	f.clock = newClock(decide)
	f.Transport = &http2.Transport{TLSClientConfig: e.TLS, AllowHTTP: e.TLS == nil}
	f.DialTLSContext = func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		if e.TLS == nil {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
		} else {
			d := tls.Dialer{Config: cfg}
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		oc, w := h2.Observe(c)
		f.wires.put(oc, w)
		return oc, nil
	}
	return f
}

// h2FloorAttempt is one request of an H2Floor: the h2.Attempt learns its
// Wire when x/net says which connection the request got (GotConn, before
// x/net's ClientConn.RoundTrip, so before any other hook).
type h2FloorAttempt struct {
	floorMachine
	f    *H2Floor
	att  h2.Attempt
	up   floorUpload
	body floorBody
}

func (a *h2FloorAttempt) gotConn(info httptrace.GotConnInfo) {
	a.att.Init(a.f.wires.get(info.Conn))
	a.feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: info.Reused, Proto: fsm.ProtoH2})
}

// RoundTrip sends req through x/net with the evidence hooks installed
// and, when the floor decides, feeds the attempt's machine what they and
// the response show.
func (f *H2Floor) RoundTrip(req *http.Request) (*http.Response, error) {
	a := newFloorRequest[h2FloorAttempt](req, f.clock)
	a.f = f
	trace := a.att.Trace(a)
	trace.GotConn = a.gotConn
	return floorRoundTrip(f.Transport, a.up.send(req, trace, a.readee(), true), a, &a.body)
}

func (a *h2FloorAttempt) failed(ctx context.Context, err error) {
	a.feed(a.up.failure(a.att.Failure(ctx, err), err))
	a.att.Done()
	a.up.end()
}

func (a *h2FloorAttempt) closed() {
	a.floorMachine.closed()
	a.f.count(a.att.Claim().Stream != 0, a.rec)
	a.att.Done()
	a.f.ended(&a.up, a.rec)
}

// CloseIdleConnections closes x/net's idle connections and forgets the
// Wires of every connection (a benchmark calls it when it is done with
// the client; until then the map holds one entry per dial, and a
// benchmark dials its connections once).
func (f *H2Floor) CloseIdleConnections() {
	f.Transport.CloseIdleConnections()
	f.wires.forget()
}
