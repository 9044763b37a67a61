package replaysafe

import (
	"net/http"

	"github.com/replaysafe/replaysafe/internal/driver"
)

// Transport is an http.RoundTripper for HTTP/1.1, HTTP/2 and HTTP/3
// (Options.Protocol) whose replay behaviour is decided by package fsm:
// each wire attempt's observations go through its protocol's adapter
// (package adapters) into an fsm.Machine, and the Transport delivers,
// fails naming the rule, or resends once, at once.
//
// Each call first resolves its route (proxies and credentials, once) and
// its dispatch plan (fsm/plan): the protocol legs it may run on and when
// it may move to the next, before anything was sent. Every protocol runs
// its stack's single-connection client directly (net/http's
// http.Transport.NewClientConn, our own HTTP/2 connection, quic-go's
// http3 ClientConn), so no stack's own retry loop runs underneath.
//
// Connections are pooled per route: HTTP/1.1 ones carry one request at a
// time and go back to the pool only when the machine says ConnReuse;
// HTTP/2 and HTTP/3 ones are multiplexed up to the server's limits.
// MaxIdleConnsPerHost and MaxConnsPerHost bound every pool. A resend runs
// on a connection opened after the failure, except after a refusal of
// the stream alone (HTTP/2 REFUSED_STREAM), which may take the same
// connection while it has room (spec/choices.md choice 22); choice 23
// says when the requests one failure displaced wait on one new dial and
// share its connection.
//
// A Transport is safe for concurrent use. Close idle connections with
// CloseIdleConnections when done with it. Over HTTP/2 a request's
// httptrace hooks run with its connection's lock held: they must return
// quickly and must not send a request through the same Transport (do
// such work on a goroutine of your own).
type Transport struct {
	opt Options
	d   *driver.Transport
	pol *driver.Policy // opt.Retry's, made once
}

// New returns a Transport configured by o. It panics when o contradicts
// itself (see Options.CallerRetries): that is a programming error, not
// one of a call.
func New(o Options) *Transport {
	o = o.normalized()
	if err := o.check(); err != nil {
		panic(err)
	}
	return &Transport{opt: o, d: driver.New(o.config()), pol: compileRetry(o.Retry)}
}

// RoundTrip sends req and returns its response, resending it at most once
// when fsm allows, and retrying it as Options.Retry (or WithRetry)
// configures. A call that fails after its first wire attempt started
// returns an *Error naming the rule that decided; a request refused
// before (an invalid request, a proxy that could not be decided) returns
// the reason. Like every RoundTripper it closes req.Body, also on error
// (perhaps after it returns).
//
// Bound a call with its request's context (http.NewRequestWithContext
// and a deadline): the *Error then reaches the caller through
// http.Client.Do, decided by RS06. http.Client.Timeout may replace it
// with net/http's own error, which keeps only the text, so errors.As
// finds nothing; Options.Observer's OnError receives the *Error in every
// case, before RoundTrip returns (see ExampleObserver_clientTimeout).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	call, err := t.d.Start(req, retryFor(req, t.pol))
	if err != nil {
		return nil, callError(err) // an *Error (RS04) when the proxies could not be used
	}
	t.opt.Observer.request(req)
	resp, err := call.Run()
	if err != nil {
		err = callError(err)
		t.opt.Observer.fail(req, err)
		return nil, err
	}
	t.opt.Observer.response(req, resp)
	return resp, nil
}

// CloseIdleConnections closes the connections sitting idle in the pool.
// Connections in use close when their exchange ends.
func (t *Transport) CloseIdleConnections() { t.d.CloseIdle() }

// IdleConns returns the number of idle pooled connections: HTTP/1.1
// connections in the pool, and pooled HTTP/2 and HTTP/3 connections
// carrying no request.
func (t *Transport) IdleConns() int { return t.d.IdleConns() }
