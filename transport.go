package replaysafe

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/adapters/recorder"
)

// Transport is an http.RoundTripper for HTTP/1.1, HTTP/2 and HTTP/3
// (Options.Protocol) whose replay behaviour is decided by fsm: each wire
// attempt's observations go through its protocol's adapter
// (adapters) into an fsm.Machine, and the Transport delivers,
// fails naming the rule, or resends once, at once.
//
// Each call first resolves its route (proxies and credentials, once) and
// its dispatch plan (fsm/plan): the protocol legs it may run on and when
// it may move to the next, before anything was sent. Every protocol runs
// its stack's single-connection client directly (net/http's
// http.Transport.NewClientConn, x/net's http2 ClientConn, quic-go's
// http3 ClientConn), so no stack's own retry loop runs underneath.
//
// Connections are pooled per route: HTTP/1.1 ones carry one request at a
// time and go back to the pool only when the machine says ConnReuse;
// HTTP/2 and HTTP/3 ones are multiplexed up to the server's limits.
// MaxIdleConnsPerHost and MaxConnsPerHost bound every pool. A resend runs
// on a new connection (over HTTP/2 and HTTP/3, one opened after the
// failure, shared by the requests the failure displaced; after a refusal
// of the stream alone (HTTP/2 REFUSED_STREAM), the same connection).
//
// A Transport is safe for concurrent use. Close idle connections with
// CloseIdleConnections when done with it.
type Transport struct {
	opt     Options
	limits  fsm.Limits
	clock   recorder.Clock
	factory *http.Transport
	limit   *connLimit // connections per route, every protocol (MaxConnsPerHost)
	pool    *pool

	// HTTP/2 (Options.Protocol): x/net's connection factory, the
	// multiplexed pool, and the routes ALPN answered with HTTP/1.1 under
	// ProtocolNegotiate (connKey → true).
	h2factory *http2.Transport
	h2pool    *muxPool[*h2Conn]
	h1Only    memo[connKey, struct{}]

	// HTTP/3 (Options.Protocol): quic-go's connection factory, the pool,
	// and under ProtocolPreferHTTP3 the destinations (host:port) whose
	// QUIC connection failed, with the time (h3.go).
	h3factory *http3.Transport
	h3pool    *muxPool[*h3Conn]
	h3Broken  memo[string, time.Time] // destination → when its QUIC handshake failed
	h3mu      sync.Mutex
	h3dials   map[connKey]*h3Dial // background QUIC dials (raceH3)
	altSvc    *altSvcCache        // ProtocolDiscoverHTTP3: origin → HTTP/3 port
	udp       udpSockets          // the QUIC connections' shared UDP sockets

	// closes counts CloseIdleConnections calls: a background QUIC dial
	// that ends after one closes its connection instead of keeping it.
	closes atomic.Uint64

	// Direct routes built once (route.go): directRoute → cachedSnapshot.
	directRoutes     sync.Map
	directRouteCount atomic.Int64

	budgets retryBudgets   // Retry.Budget, per route
	rand    func() float64 // a retry's jitter; nil: math/rand/v2 (tests set it)
}

// New returns a Transport configured by o.
func New(o Options) *Transport {
	o = o.normalized()
	limit := newConnLimit(o.MaxConnsPerHost)
	t := &Transport{
		opt:     o,
		clock:   recorder.NewClock(),
		factory: newFactory(o),
		limit:   limit,
		pool:    newPool(o.MaxIdleConnsPerHost, o.IdleConnTimeout, limit),

		h2factory: newH2Factory(o),
		h2pool:    newMuxPool[*h2Conn](o.MaxIdleConnsPerHost, o.IdleConnTimeout, limit),

		h3factory: newH3Factory(o),
		altSvc:    newAltSvcCache(),
		h3pool:    newMuxPool[*h3Conn](o.MaxIdleConnsPerHost, o.IdleConnTimeout, limit),
	}
	t.h3Broken.stale = func(at time.Time) bool { return time.Since(at) >= H3RetryAfter }
	if o.AcquireTimeout > 0 {
		t.limits.Acquire = o.AcquireTimeout
	}
	t.limits.Write = max(o.WriteTimeout, 0)
	t.limits.Header = max(o.ResponseHeaderTimeout, 0)
	return t
}

// CloseIdleConnections closes the connections sitting idle in the pool.
// Connections in use close when their exchange ends.
func (t *Transport) CloseIdleConnections() {
	t.closes.Add(1)
	t.pool.closeIdle()
	t.h2pool.closeIdle()
	t.h3pool.closeIdle()
}

// IdleConns returns the number of idle pooled connections: HTTP/1.1
// connections in the pool, and pooled HTTP/2 and HTTP/3 connections
// carrying no request.
func (t *Transport) IdleConns() int {
	return t.pool.idleCount() + t.h2pool.idleCount() + t.h3pool.idleCount()
}

// RoundTrip sends req and returns its response, resending it at most once
// when fsm allows, and retrying it as Options.Retry (or WithRetry)
// configures. A failure is an *Error naming the rule that decided.
// Like every RoundTripper it closes req.Body, also on error (perhaps after
// it returns).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := validate(req)
	if err != nil {
		return nil, closeBody(req, err)
	}
	pol, budget := t.retryFor(req)
	cs := &callState{cm: fsm.NewCall(factsOf(req, t.opt), pol), statuses: pol.Statuses, budget: budget}
	if pol.On() {
		t.budgets.call(key.addr, budget, time.Now())
	}
	start := resend{facts: cs.cm.Next(), body: req.Body}
	for try := 0; ; try++ {
		c, in, p, err := t.newCall(req, key, cs, start)
		if err != nil && try == 0 {
			return nil, closeBody(req, err)
		}
		if try == 0 {
			t.opt.Observer.request(req)
		}
		var resp *http.Response
		if err == nil {
			resp, err = c.run(in, p)
		} else if start.body != nil {
			start.body.Close() // the retry's route could not be resolved
		}
		if rn, ok := err.(*retryNext); ok {
			if err = sleep(req.Context(), rn.decision.Delay); err == nil {
				start = *rn.start
				continue
			}
			if rn.start.body != nil {
				rn.start.body.Close()
			}
			err = &Error{Rule: fsm.RuleCanceled, Attempts: cs.cm.Attempts(), History: cs.History(),
				Err: fmt.Errorf("waiting %v to retry (%s): %w; attempt %d had ended: %w", rn.decision.Delay, rn.decision.Rule.ID(), err, cs.cm.Attempts(), rn.err)}
		}
		if err != nil {
			t.opt.Observer.fail(req, err)
			return nil, err
		}
		t.learnAltSvc(c.key, resp)
		t.opt.Observer.response(req, resp)
		return resp, nil
	}
}

// newCall resolves one try of req: its proxies, dispatch plan and route
// snapshot, anew for every configured retry ("a configured retry is a new
// wire attempt and resolves a new snapshot"); the automatic resend and
// fallbacks run inside a try and keep them.
func (t *Transport) newCall(req *http.Request, key connKey, cs *callState, start resend) (*call, plan.Input, plan.Plan, error) {
	urls, err := t.proxies(req)
	if err != nil {
		return nil, plan.Input{}, plan.Plan{}, err
	}
	in := t.planInput(req, key, len(urls) > 0)
	p := plan.Make(in)
	if p.Err != nil {
		err := fmt.Errorf("replaysafe: %w", p.Err)
		if in.Proxied {
			err = &ProxyError{Err: p.Err}
		}
		return nil, in, p, err
	}
	key, snap, err := t.snapshot(req, key, urls, p.First().Route) // route.go
	if err != nil {
		return nil, in, p, err
	}
	var c *call
	if cs.firstUsed {
		c = new(call)
	} else {
		c, cs.firstUsed = &cs.first, true // the common call has one try
	}
	*c = call{t: t, req: req, ctx: req.Context(), key: key, snap: snap, cs: cs, start: start}
	return c, in, p, nil
}

// closeBody closes req's body, as a RoundTripper must also on error, and
// returns err.
func closeBody(req *http.Request, err error) error {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
	return err
}

// planInput is what the dispatch plan of a call to key is made from: the
// policy, the URL's scheme and route, and what earlier calls learned
// about the destination (a failed QUIC handshake, an Alt-Svc
// advertisement). Whether ALPN chose HTTP/1.1 is keyed by the route, so
// run fills it in once the route is known.
func (t *Transport) planInput(req *http.Request, key connKey, proxied bool) plan.Input {
	in := plan.Input{Policy: plan.Policy(t.opt.Protocol), HTTPS: key.scheme == "https", Proxied: proxied,
		ExtendedConnect: isExtendedConnect(req)}
	if in.HTTPS && !proxied && (t.opt.Protocol == ProtocolPreferHTTP3 || t.opt.Protocol == ProtocolDiscoverHTTP3) {
		if at, ok := t.h3Broken.load(key.addr); ok && time.Since(at) < H3RetryAfter {
			in.H3Broken = true
		}
		if t.opt.Protocol == ProtocolDiscoverHTTP3 {
			_, in.AltSvcH3 = t.altSvc.lookup(key.addr, time.Now())
		}
	}
	return in
}

// run carries out plan p, made from in: the first leg, and the next one
// only when the leg hands over (plan.Fallback) before anything was sent,
// re-planning with what the leg showed: no QUIC connection, or ALPN's
// HTTP/1.1. Each hand-over sets one more fact, so it ends within
// three legs.
func (c *call) run(in plan.Input, p plan.Plan) (*http.Response, error) {
	for {
		leg := p.First()
		if leg.Route == route.PolicyNegotiate && !in.ALPNChoseH1 {
			if _, h1 := c.t.h1Only.load(c.key); h1 {
				in.ALPNChoseH1 = true
				p = plan.Make(in)
				continue
			}
		}
		c.leg = leg
		resp, err := c.runLeg()
		switch {
		case leg.Next == plan.FallbackNoConn && errors.Is(err, errFallbackTCP):
			in.H3Broken = true // for this call: no QUIC connection now
		case leg.Next == plan.FallbackALPN && errors.Is(err, errFallbackH1):
			in.ALPNChoseH1 = true
		default:
			return resp, err
		}
		p = plan.Make(in)
		if next := p.First(); next.Route != leg.Route {
			if err := c.reroute(next.Route); err != nil {
				return nil, closeBody(c.req, err)
			}
		}
	}
}

// reroute moves the call to the same route under policy p (a fallback
// before anything was sent): the same destination, proxies and
// credentials, none of the selectors called again.
func (c *call) reroute(p route.Policy) error {
	if c.snap == nil || !c.snap.route.Proxied() {
		key := c.key
		key.route = route.Key{}
		k, snap, err := c.t.directSnapshot(key, p)
		if err != nil {
			return err
		}
		c.key, c.snap = k, snap
		return nil
	}
	snap, err := c.snap.withPolicy(p)
	if err != nil {
		return err
	}
	c.key.route = snap.route.Key()
	c.snap = snap
	return nil
}

// runLeg runs the call's wire attempts on its current leg.
func (c *call) runLeg() (*http.Response, error) {
	switch c.leg.Proto {
	case plan.ProtoH3:
		return c.runH3()
	case plan.ProtoH2:
		return c.runH2()
	}
	return c.attempts(c.attemptH1)
}

// validate checks what net/http's ClientConn would reject only after a
// connection was acquired, and returns the request's route.
func validate(req *http.Request) (connKey, error) {
	switch {
	case req == nil:
		return connKey{}, errors.New("replaysafe: nil Request")
	case req.URL == nil:
		return connKey{}, errors.New("replaysafe: nil Request.URL")
	case req.Header == nil:
		return connKey{}, errors.New("replaysafe: nil Request.Header")
	case req.Method != "" && !validMethod(req.Method):
		return connKey{}, fmt.Errorf("replaysafe: invalid method %q", req.Method)
	}
	for i, h := range []http.Header{req.Header, req.Trailer} {
		for k, vv := range h {
			if k == ":protocol" && i == 0 && req.Method == http.MethodConnect && len(vv) == 1 && validMethod(vv[0]) {
				continue // extended CONNECT (RFC 8441, RFC 9220): the protocol is a token
			}
			if !httpguts.ValidHeaderFieldName(k) {
				return connKey{}, fmt.Errorf("replaysafe: invalid header field name %q", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					return connKey{}, fmt.Errorf("replaysafe: invalid header field value for %q", k)
				}
			}
		}
	}
	scheme := req.URL.Scheme
	var port string
	switch scheme {
	case "http":
		port = "80"
	case "https":
		port = "443"
	default:
		return connKey{}, fmt.Errorf("replaysafe: unsupported protocol scheme %q", scheme)
	}
	host := req.URL.Hostname()
	if host == "" {
		return connKey{}, errors.New("replaysafe: no Host in request URL")
	}
	if req.URL.Port() != "" {
		// URL.Host is already host:port, as JoinHostPort would write it.
		return connKey{scheme: scheme, addr: req.URL.Host, host: host}, nil
	}
	return connKey{scheme: scheme, addr: net.JoinHostPort(host, port), host: host}, nil
}

// isExtendedConnect reports a CONNECT that names a protocol in the
// :protocol pseudo-header, as x/net's client takes it (RFC 8441: a
// WebSocket over HTTP/2, RFC 9220 over HTTP/3).
func isExtendedConnect(req *http.Request) bool {
	return req.Method == http.MethodConnect && len(req.Header[":protocol"]) > 0
}

func validMethod(m string) bool {
	return len(m) > 0 && strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) < 0
}

// factsOf returns the fsm facts of req's original attempt.
func factsOf(req *http.Request, o Options) fsm.Request {
	f := fsm.Request{
		Method:      fsm.ParseMethod(req.Method),
		RetryPolicy: o.RetryPolicy,
		ResendOff:   o.DisableResend,
	}
	// Presence counts, as in net/http: a nil value marks the request
	// idempotent without sending the field.
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	f.IdempotencyKey = key || xkey
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		f.Body = fsm.BodyNone
	case req.GetBody != nil:
		f.Body = fsm.BodyBuffered
	default:
		f.Body = fsm.BodyOneShotUntouched
	}
	return f
}

// call is one try of a RoundTrip on one route snapshot: its first wire
// attempt and the automatic resend on each leg of its plan, a later leg
// only when nothing was sent on the one before. A configured retry is a
// new call sharing the callState.
type call struct {
	t     *Transport
	req   *http.Request
	ctx   context.Context // the caller's
	key   connKey
	snap  *routeSnapshot // the route of every attempt; nil for a direct one route.New could not build
	leg   plan.Leg       // the leg running
	cs    *callState
	start resend // the try's first attempt
}

// callState is what the tries of one RoundTrip share: the call machine,
// its decisions so far, and the route's retry budget.
type callState struct {
	cm       fsm.Call
	hist     [maxRetryAttempts + 1]fsm.CallDecision // one a wire attempt; no allocation on the common path
	n        int
	statuses fsm.StatusSet // the policy's retried statuses
	budget   RetryBudget

	first     call // the first try's call, in the same allocation
	firstUsed bool
}

// History returns a copy of the call machine's decisions so far.
func (cs *callState) History() []fsm.CallDecision {
	return append([]fsm.CallDecision(nil), cs.hist[:cs.n]...)
}

// retryNext ends a try with a configured retry: the next try starts from
// start after decision.Delay; err is what ended the attempt.
type retryNext struct {
	decision fsm.CallDecision
	start    *resend
	err      error
}

func (r *retryNext) Error() string { return "replaysafe: retry after " + r.decision.Delay.String() }

// step feeds the outcome of the call's latest attempt to the call
// machine, with a jitter and a retry reserved from the route's budget
// when retries are configured and the outcome could be retried (a
// failure, a later resend, a listed status); the reservation is given
// back unless a configured retry that draws on the budget is decided, so
// concurrent calls never overdraw it.
func (c *call) step(o fsm.Outcome) fsm.CallDecision {
	cs := c.cs
	var now time.Time // read for the budget alone: most calls read no clock here
	if cs.budget.Window > 0 && (o.Decision.Action != fsm.ActionDeliver || cs.statuses.Has(o.Status)) {
		now = time.Now()
		o.Budget = c.t.budgets.reserve(c.key.addr, cs.budget, now)
		o.Jitter = c.t.jitter()
	}
	d := cs.cm.Step(o)
	if o.Budget && !(d.Retry && d.Rule != fsm.RuleTooEarly) {
		c.t.budgets.unreserve(c.key.addr, cs.budget, now)
	}
	if cs.n < len(cs.hist) {
		cs.hist[cs.n] = d
		cs.n++
	}
	return d
}

// attemptFunc runs wire attempt n of a try from its start; it returns
// the response, or the final error, or the next attempt's start when fsm
// decided the automatic resend.
type attemptFunc func(n int, start resend) (*http.Response, *resend, error)

// attempts runs a try's wire attempts: the first and, when fsm decides
// so, the automatic resend, at once. The call machine bounds them: every
// attempt is counted, and the last it allows is never resent.
func (c *call) attempts(attempt attemptFunc) (*http.Response, error) {
	start := c.start
	for n := 1; n <= maxRetryAttempts+1; n++ {
		resp, next, err := attempt(n, start)
		if next == nil {
			return resp, err
		}
		start = *next
	}
	panic("replaysafe: fsm decided more attempts than a call allows")
}

// refuse fails a call before any attempt: it closes the request body, as
// a RoundTripper must, and returns err.
func (c *call) refuse(err error) (*http.Response, error) {
	return nil, closeBody(c.req, err)
}

// resend is what an attempt starts from: the request facts and body,
// and, for a resend on a multiplexed protocol, which pooled connections
// it may take: those that joined the pool after mark after (opened after
// the failure), or same, the connection that refused only the stream.
type resend struct {
	facts fsm.Request
	body  io.ReadCloser
	after uint64
	same  any // *h2Conn or *h3Conn, or nil
}

// acquire returns a connection for key: for an original attempt the most
// recently pooled one that is still usable, else a new one. A resend
// always gets a new one. The connection is attached to rec and reserved
// for one request.
//
// A route at MaxConnsPerHost waits, under the acquisition deadline, until
// a connection closes or (for an original attempt) one comes back idle.
func (t *Transport) acquire(ctx context.Context, key connKey, snap *routeSnapshot, alpn []string, pooled bool, rec *h1.Recorder) (*persistConn, bool, error) {
	for {
		if pooled {
			if pc := t.pooled(key, rec); pc != nil {
				return pc, true, nil
			}
		}
		if t.limit.tryOpen(key) {
			break
		}
		if err := t.limit.wait(ctx, key); err != nil {
			return nil, false, err
		}
	}
	pc, err := t.dial(ctx, key, snap, alpn, rec.Start())
	if err != nil {
		t.limit.closed(key)
		return nil, false, err
	}
	if !usable(pc, rec) {
		pc.close()
		return nil, false, errors.New("replaysafe: new connection unusable at once")
	}
	rec.Acquired(false)
	return pc, false, nil
}

// pooled returns the most recently pooled connection for key that is
// still usable, attached to rec, or nil; the unusable ones met on the way
// close.
func (t *Transport) pooled(key connKey, rec *h1.Recorder) *persistConn {
	for range t.opt.MaxIdleConnsPerHost {
		pc := t.pool.get(key)
		if pc == nil {
			return nil
		}
		if usable(pc, rec) {
			rec.Acquired(true)
			return pc
		}
		pc.close()
	}
	return nil
}

// usable attaches rec to pc and reserves pc's one request slot, unless pc
// is closed or a read returned while it sat idle (the peer closed or
// reset it, or sent unsolicited bytes).
func usable(pc *persistConn, rec *h1.Recorder) bool {
	if pc.cc.Err() != nil {
		return false
	}
	if err := pc.conn.Attach(rec); err != nil {
		return false
	}
	if err := pc.cc.Reserve(); err != nil {
		pc.conn.Detach()
		return false
	}
	return true
}

// gotConn calls the caller's httptrace GotConn hook, if any: net/http's
// single-connection client does not, since it does not acquire.
func (t *Transport) gotConn(ctx context.Context, pc *persistConn, reused bool) {
	trace := httptrace.ContextClientTrace(ctx)
	if trace == nil || trace.GotConn == nil {
		return
	}
	info := httptrace.GotConnInfo{Conn: pc.conn, Reused: reused, WasIdle: reused}
	if reused && !pc.idleSince.IsZero() {
		info.IdleTime = time.Since(pc.idleSince)
	}
	trace.GotConn(info)
}

// withTrace returns ctx with ours, an attempt's httptrace hooks, composed
// with the caller's hooks in ctx as httptrace.WithClientTrace composes
// them, except for Got1xxResponse: a 1xx over the attempt's bound fails
// the request even when the caller has that hook too. httptrace's own
// composition calls both hooks and returns the caller's verdict alone,
// and net/http and x/net stop counting 1xx header bytes once any hook is
// installed, so a caller's hook that accepts every 1xx (the Forwarder's
// relay does) would leave the bound to nobody. Here the attempt's hook
// runs first; when it refuses, the caller's hook does not see the
// response, and otherwise the caller's verdict stands.
func withTrace(ctx context.Context, ours *httptrace.ClientTrace) context.Context {
	caller := httptrace.ContextClientTrace(ctx)
	if caller == nil || caller.Got1xxResponse == nil || ours.Got1xxResponse == nil {
		return httptrace.WithClientTrace(ctx, ours)
	}
	own, theirs := ours.Got1xxResponse, caller.Got1xxResponse
	rest, merged := *caller, *ours
	rest.Got1xxResponse = nil
	merged.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		if err := own(code, h); err != nil {
			return err
		}
		return theirs(code, h)
	}
	ctx = httptrace.WithClientTrace(withoutTrace{ctx, caller}, &rest)
	return httptrace.WithClientTrace(ctx, &merged)
}

// withoutTrace is a context whose Value hides t, the caller's
// ClientTrace, so that httptrace.WithClientTrace finds no hooks to
// compose with (withTrace composes them itself).
type withoutTrace struct {
	context.Context
	t *httptrace.ClientTrace
}

func (c withoutTrace) Value(key any) any {
	v := c.Context.Value(key)
	if t, ok := v.(*httptrace.ClientTrace); ok && t == c.t {
		return nil
	}
	return v
}

// abortCause returns the error to report for err: the AcquireDeadlineError
// naming the step on a proxied route, the TimeoutError when a phase limit
// aborted the attempt (cause, what the attempt was canceled with), else
// err.
func abortCause(cause, err error) error {
	var ad *AcquireDeadlineError
	if errors.As(err, &ad) {
		return ad // the acquire TimeoutError, naming the step (proxy_dial.go)
	}
	var te *TimeoutError
	if errors.As(cause, &te) {
		return te
	}
	return err
}

// afterFailure acts on the call decision cd, made after an attempt ended
// with err: the next attempt's start for the automatic resend (see
// nextStart), a *retryNext for a configured retry, or the call's *Error.
// body is the attempt's request body (nil without one).
func (c *call) afterFailure(cd fsm.CallDecision, err error, body *reqBody) (*http.Response, *resend, error) {
	switch cd.Action {
	case fsm.ActionResend:
		next, err := c.again(cd, err, body)
		if err != nil {
			return nil, nil, err
		}
		return nil, next, nil
	case fsm.ActionFail:
		if body != nil {
			body.release(false)
		}
		return nil, nil, c.fail(cd.Rule, err)
	}
	panic("replaysafe: attempt failed with decision " + cd.String())
}

// again prepares the attempt after one that ended with err: the
// automatic resend's start, or the *retryNext of a configured retry.
func (c *call) again(cd fsm.CallDecision, err error, body *reqBody) (*resend, error) {
	n := c.cs.cm.Attempts()
	next, gerr := c.nextStart(body)
	if gerr != nil {
		// The next attempt cannot be made as the caller meant it: its
		// machine decides the local failure (RS21) before any
		// connection, and the error keeps both causes.
		m := fsm.New(c.cs.cm.Next(), c.t.limits, c.t.clock.Now())
		ld := m.Step(fsm.Event{Kind: fsm.EventLocalFailure, At: c.t.clock.Now()})
		return nil, c.fail(ld.Rule, fmt.Errorf("GetBody for attempt %d: %w; attempt %d had ended: %w", n+1, gerr, n, err))
	}
	if cd.Retry {
		return nil, &retryNext{decision: cd, start: next, err: err}
	}
	return next, nil
}

// fail returns the call's *Error: rule decided, after the attempts made.
func (c *call) fail(rule fsm.Rule, err error) *Error {
	return &Error{Rule: rule, Attempts: c.cs.cm.Attempts(), History: c.cs.History(), Err: err}
}

// nextStart prepares the call's next attempt after one whose request body
// was body: the facts the call machine gives it, and the body again
// (GetBody's copy, or the untouched one-shot reader).
func (c *call) nextStart(body *reqBody) (*resend, error) {
	next := c.cs.cm.Next()
	switch next.Body {
	case fsm.BodyNone:
		return &resend{facts: next, body: c.req.Body}, nil
	case fsm.BodyBuffered:
		if body != nil {
			body.release(false)
		}
		b, err := c.req.GetBody()
		if err != nil {
			return nil, err
		}
		return &resend{facts: next, body: b}, nil
	}
	if next.Body != fsm.BodyOneShotUntouched {
		panic("replaysafe: fsm decided to resend a consumed one-shot body") // RS11 forbids it
	}
	if body != nil {
		body.release(true)
	}
	return &resend{facts: next, body: c.req.Body}, nil
}

// attemptRecord is what an attempt's recorder tells the Observer.
type attemptRecord interface {
	Request() fsm.Request
	Seal() (fsm.Decision, []fsm.Event, string)
}

// report tells the Observer how wire attempt n of the call ended, and how
// the call went on after it (cd).
func (c *call) report(n int, reused bool, err error, rec attemptRecord, cd fsm.CallDecision) {
	if c.t.opt.Observer.OnAttempt == nil {
		return
	}
	// The machine's last word, its events and its trace, taken together:
	// a stack hook that reported a write after the response ended (HTTP/2
	// writes on its own goroutine) moves a delivered attempt's connection
	// decision on, and the trace must replay to what is reported.
	// The action is the one the Transport acted on: a final action never
	// changes, only a delivered attempt's connection decision does.
	final, events, trace := rec.Seal()
	c.t.opt.Observer.attempt(AttemptReport{
		Request:  c.req,
		Number:   n,
		Facts:    rec.Request(),
		Reused:   reused,
		Decision: final,
		Call:     cd,
		Events:   events,
		Err:      err,
		Trace:    trace,
	})
}

// informationalLimit bounds the informational (1xx) responses of one
// attempt: informational.DefaultCount of them, and header bytes in total
// up to MaxResponseHeaderBytes when the caller set it (1 MiB,
// informational.DefaultBytes, otherwise), as net/http shares its header
// bound between the 1xx responses and the final one.
func (t *Transport) informationalLimit() informational.Limit {
	return informational.Limit{Count: informational.DefaultCount, Bytes: t.opt.MaxResponseHeaderBytes}
}
