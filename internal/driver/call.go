package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// Call is one RoundTrip: the call machine (fsm.Call) that bounds its
// wire attempts across tries, its decisions so far, the route's retry
// budget, and its first try. It keeps no key of its own (each try
// derives the origin's from the request's URL, originKey), nor what a
// try starts from: Run passes that on (resend).
//
// Its contract: Start makes it, validating the request and resolving
// its first try; Run carries it out once. A request Start refuses has
// its body closed and was never sent.
type Call struct {
	t    *Transport
	req  *http.Request
	cm   fsm.Call
	hist [inlineHistory]fsm.CallDecision               // the first decisions, one a wire attempt: no allocation for most calls
	more *[maxHistory - inlineHistory]fsm.CallDecision // the decisions after them, allocated with the first
	pol  *Policy                                       // shared with the calls of the same policy; cm keeps &pol.Retry
	// mu guards cm and the decisions kept, which the copies of a hedged
	// try step from their own goroutines.
	mu sync.Mutex

	in    plan.Input // the current try's plan is plan.Make(in), a table lookup
	n     uint8      // decisions kept, in hist then more, at most maxHistory
	first try        // the first try, in the same allocation

	// legacy is set for a request with the deprecated Cancel channel: a
	// context that also ends when that closes (legacyCancel), released by
	// done. Only such a call pays for it.
	legacy *legacyCtx
}

// legacyCtx is a context made for a request's Cancel channel, with the
// function that releases its watcher.
type legacyCtx struct {
	ctx  context.Context
	stop context.CancelCauseFunc
}

// context is the call's context: the caller's (the request's), or the
// one that also ends with the request's Cancel channel.
func (c *Call) context() context.Context {
	if c.legacy != nil {
		return c.legacy.ctx
	}
	return c.req.Context()
}

// errRequestCanceled is the cause of a call whose request's deprecated
// Cancel channel was closed, as http.Client closes it when its Timeout
// passes for a RoundTripper it does not know.
var errRequestCanceled = errors.New("replaysafe: request canceled (Request.Cancel closed)")

// legacyCancel returns a context that ends with ctx or when cancel
// closes, and the function that releases its watcher once the call is
// over. net/http's ClientConn watches a request's Cancel channel itself
// and fails with an error that says only "request canceled"; with the
// context ended too, that failure is decided as the caller's (RS05), not
// as a connection's.
func legacyCancel(ctx context.Context, cancel <-chan struct{}) (context.Context, context.CancelCauseFunc) {
	ctx, stop := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-cancel:
			stop(errRequestCanceled)
		case <-ctx.Done():
		}
	}()
	return ctx, stop
}

// done releases what the call holds beyond its attempts: the watcher of
// its request's Cancel channel. The call's error, or the end of the
// response body it delivered, calls it.
func (c *Call) done() {
	if c.legacy != nil {
		c.legacy.stop(nil)
	}
}

// MaxAttempts bounds the wire attempts of a call (Retry.MaxAttempts).
const MaxAttempts = 10

// Policy is how a call retries: the call machine's policy, the route's
// retry budget (counted only when Retry is on) and the hedge delay (how
// long a call waits for a response header before each hedge; zero:
// none). A policy is made once for many calls, which share it: nothing
// writes it once a call started under it.
type Policy struct {
	Retry      fsm.Retry
	Budget     Budget
	HedgeDelay time.Duration
}

// noPolicy is the policy of a call started without one.
var noPolicy Policy

// Start validates req and resolves its first try under the policy pol
// (nil: none), which the call keeps: the proxies, the dispatch plan and
// the route. An error (req's body closed) means nothing was sent and no
// attempt made: a *Failure (RS04) when the proxies could not be decided,
// else the request's own fault.
func (t *Transport) Start(req *http.Request, pol *Policy) (*Call, error) {
	key, err := validate(req)
	if err != nil {
		return nil, closeBody(req, err)
	}
	if pol == nil {
		pol = &noPolicy
	}
	facts := t.factsOf(req)
	c := &Call{t: t, req: req, cm: fsm.NewCall(facts, &pol.Retry), pol: pol}
	if pol.Retry.On() {
		t.budgets.call(key.Addr, pol.Budget, time.Now())
	}
	if err := c.resolve(&c.first, key); err != nil {
		return nil, closeBody(req, c.resolveFailed(err))
	}
	//lint:ignore SA1019 net/http still honours the deprecated Cancel channel, and a caller moving from it expects the same
	if cancel := req.Cancel; cancel != nil {
		ctx, stop := legacyCancel(req.Context(), cancel)
		c.legacy = &legacyCtx{ctx: ctx, stop: stop}
	}
	return c, nil
}

// Run carries the call out: its tries, each on the route it resolved,
// the automatic resend within a try and a configured retry as a new try
// after its wait. It returns the response, or the error: a *Failure once
// an attempt was decided, else the cause (a retry whose route could not
// be resolved).
func (c *Call) Run() (*http.Response, error) {
	resp, err := c.run()
	if err != nil {
		c.done()
	}
	return resp, err
}

func (c *Call) run() (*http.Response, error) {
	// The first try starts from the request as Start found it: no
	// attempt has stepped the call machine since.
	tr, start := &c.first, resend{facts: c.next(), body: c.req.Body}
	for {
		resp, err := tr.run(c.in, plan.Make(c.in), start)
		rn, ok := err.(*retryNext)
		if !ok {
			if err == nil {
				c.t.learnAltSvc(tr.key, resp)
			}
			return resp, err
		}
		if err = sleep(c.context(), rn.decision.Delay); err != nil {
			if rn.start.body != nil {
				rn.start.body.Close()
			}
			return nil, &Failure{Rule: fsm.RuleCanceled, Attempts: c.attempts(), History: c.History(),
				Err: fmt.Errorf("waiting %v to retry (%s): %w; attempt %d had ended: %w", rn.decision.Delay, rn.decision.Rule.ID(), err, c.attempts(), rn.err)}
		}
		tr, start = new(try), *rn.start
		if err := c.resolve(tr, originKey(c.req.URL)); err != nil {
			if start.body != nil {
				start.body.Close() // the retry's route could not be resolved
			}
			return nil, c.resolveFailed(err)
		}
	}
}

// resolveFailed is the error of a try whose route could not be
// resolved. Proxies that could not be decided or may not be used (a
// *proxy.ResolveError: the selector failed, a chain would send cleartext
// credentials) fail the acquisition before anything is sent, as a dial
// that fails does (RS04), after the attempts already made. Any other
// cause (a protocol no route can carry) is returned as it is.
func (c *Call) resolveFailed(err error) error {
	var re *proxy.ResolveError
	if !errors.As(err, &re) {
		return err
	}
	return &Failure{Rule: fsm.RuleAcquireFailed, Attempts: c.attempts(), History: c.History(), Err: err}
}

// History returns a copy of the call machine's decisions so far.
func (c *Call) History() []fsm.CallDecision {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := append([]fsm.CallDecision(nil), c.hist[:min(c.n, inlineHistory)]...)
	if c.more != nil {
		h = append(h, c.more[:c.n-inlineHistory]...)
	}
	return h
}

// attempts is the call machine's count of wire attempts.
func (c *Call) attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cm.Attempts()
}

// next is the call machine's facts of the next wire attempt.
func (c *Call) next() fsm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cm.Next()
}

// record keeps decision d in the call's history, with c.mu held.
func (c *Call) record(d fsm.CallDecision) {
	switch {
	case c.n < inlineHistory:
		c.hist[c.n] = d
		c.n++
	case c.n < maxHistory:
		if c.more == nil {
			c.more = new([maxHistory - inlineHistory]fsm.CallDecision)
		}
		c.more[c.n-inlineHistory] = d
		c.n++
	}
}

// inlineHistory is how many of a call's decisions its Call keeps without
// another allocation: an attempt and its automatic resend. Each is 16
// bytes of every call, in flight.
const inlineHistory = 2

// maxHistory bounds the decisions a Call keeps: one a wire attempt and
// one a hedge decision (a hedge, or the refusal that ends hedging), and
// one more than a call makes.
const maxHistory = 2*MaxAttempts + 1

// resolve makes tr the call's next try to origin, the key of the
// request's URL: its proxies, dispatch plan and route snapshot, anew for
// every configured retry ("a configured retry is a new wire attempt and
// resolves a new snapshot"); the automatic resend and fallbacks run
// inside a try and keep them.
func (c *Call) resolve(tr *try, origin pool.Key) error {
	t := c.t
	urls, err := t.dial.Proxies(c.req)
	if err != nil {
		return err
	}
	c.in = t.planInput(c.req, origin, len(urls) > 0)
	p := plan.Make(c.in)
	if p.Err != nil {
		if c.in.Proxied {
			return &proxy.ResolveError{Err: p.Err}
		}
		return fmt.Errorf("replaysafe: %w", p.Err)
	}
	key, snap, err := t.dial.Route(c.req, origin, urls, p.First().Route)
	if err != nil {
		return err
	}
	*tr = try{call: c, key: key, snap: snap}
	return nil
}

// planInput is what the dispatch plan of a call to key is made from: the
// policy, the URL's scheme and route, and what earlier calls learned
// about the destination (a failed QUIC handshake, an Alt-Svc
// advertisement). Whether ALPN chose HTTP/1.1 is keyed by the route, so
// run fills it in once the route is known.
func (t *Transport) planInput(req *http.Request, key pool.Key, proxied bool) plan.Input {
	in := plan.Input{Policy: t.cfg.Protocol, HTTPS: key.Scheme == "https", Proxied: proxied,
		ExtendedConnect: isExtendedConnect(req)}
	if in.HTTPS && !proxied && (t.cfg.Protocol == plan.PreferHTTP3 || t.cfg.Protocol == plan.DiscoverHTTP3) {
		if at, ok := t.h3Broken.Load(key.Addr); ok && time.Since(at) < t.cfg.H3RetryAfter {
			in.H3Broken = true
		}
		if t.cfg.Protocol == plan.DiscoverHTTP3 {
			_, in.AltSvcH3 = t.altSvc.Lookup(key.Addr, time.Now())
		}
	}
	return in
}

// run carries out plan p, made from in: the first leg, and the next one
// only when the leg hands over (plan.Fallback) before anything was sent,
// re-planning with what the leg showed: no QUIC connection, or ALPN's
// HTTP/1.1. Each hand-over sets one more fact, so it ends within
// three legs. Every leg's first attempt starts from start: a leg hands
// over only before anything was sent.
func (tr *try) run(in plan.Input, p plan.Plan, start resend) (*http.Response, error) {
	for {
		leg := p.First()
		if leg.Route == route.PolicyNegotiate && !in.ALPNChoseH1 {
			if _, h1 := tr.call.t.h1Only.Load(tr.key); h1 {
				in.ALPNChoseH1 = true
				p = plan.Make(in)
				continue
			}
		}
		tr.leg = leg
		resp, err := tr.runLeg(start)
		switch {
		case leg.Next == plan.FallbackNoConn && errors.Is(err, errFallbackTCP):
			in.H3Broken = true // for this call: no QUIC connection now
		case leg.Next == plan.FallbackALPN && errors.Is(err, errFallbackH1):
			in.ALPNChoseH1 = true
			if h, ok := err.(*alpnH1); ok {
				tr.handoff = &h.conn // the HTTP/1.1 leg's first attempt runs on it
			}
		default:
			return resp, err
		}
		p = plan.Make(in)
		if next := p.First(); next.Route != leg.Route {
			if err := tr.reroute(next.Route); err != nil {
				if tr.handoff != nil {
					tr.handoff.Conn.Close() // no HTTP/1.1 leg will take it
				}
				return nil, closeBody(tr.call.req, err)
			}
		}
	}
}

// reroute moves the call to the same route under policy p (a fallback
// before anything was sent): the same destination, proxies and
// credentials, none of the selectors called again.
func (tr *try) reroute(p route.Policy) error {
	if !tr.snap.Proxied() {
		key := tr.key
		key.Route = route.Key{}
		k, snap, err := tr.call.t.dial.Direct(key, p)
		if err != nil {
			return err
		}
		tr.key, tr.snap = k, snap
		return nil
	}
	snap, err := tr.snap.WithPolicy(p)
	if err != nil {
		return err
	}
	tr.key.Route = snap.Key()
	tr.snap = snap
	return nil
}

// runLeg runs the call's wire attempts on its current leg, the first
// from start.
func (tr *try) runLeg(start resend) (*http.Response, error) {
	switch tr.leg.Proto {
	case fsm.ProtoH3:
		return tr.runH3(start)
	case fsm.ProtoH2:
		return tr.runH2(start)
	}
	return tr.attempts((*try).attemptH1, start)
}

// validate checks what net/http's ClientConn would reject only after a
// connection was acquired, and returns the request's route.
func validate(req *http.Request) (pool.Key, error) {
	switch {
	case req == nil:
		return pool.Key{}, errors.New("replaysafe: nil Request")
	case req.URL == nil:
		return pool.Key{}, errors.New("replaysafe: nil Request.URL")
	case req.Header == nil:
		return pool.Key{}, errors.New("replaysafe: nil Request.Header")
	case req.Method != "" && !validMethod(req.Method):
		return pool.Key{}, fmt.Errorf("replaysafe: invalid method %q", req.Method)
	}
	for i, h := range []http.Header{req.Header, req.Trailer} {
		for k, vv := range h {
			if k == ":protocol" && i == 0 && req.Method == http.MethodConnect && len(vv) == 1 && validMethod(vv[0]) {
				continue // extended CONNECT (RFC 8441, RFC 9220): the protocol is a token
			}
			if !httpguts.ValidHeaderFieldName(k) {
				return pool.Key{}, fmt.Errorf("replaysafe: invalid header field name %q", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					return pool.Key{}, fmt.Errorf("replaysafe: invalid header field value for %q", k)
				}
			}
		}
	}
	switch scheme := req.URL.Scheme; {
	case scheme != "http" && scheme != "https":
		return pool.Key{}, fmt.Errorf("replaysafe: unsupported protocol scheme %q", scheme)
	case req.URL.Hostname() == "":
		return pool.Key{}, errors.New("replaysafe: no Host in request URL")
	}
	return originKey(req.URL), nil
}

// originKey is the key of the origin of u, which validate accepted: its
// scheme, host:port with the scheme's default port made explicit, and
// host. A configured retry derives it again, so that a Call in flight
// does not keep a copy beside its try's.
func originKey(u *url.URL) pool.Key {
	host := u.Hostname()
	if u.Port() != "" {
		// URL.Host is already host:port, as JoinHostPort would write it.
		return pool.Key{Scheme: u.Scheme, Addr: u.Host, Host: host}
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return pool.Key{Scheme: u.Scheme, Addr: net.JoinHostPort(host, port), Host: host}
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

// closeBody closes req's body, as a RoundTripper must also on error, and
// returns err.
func closeBody(req *http.Request, err error) error {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
	return err
}

// factsOf returns the fsm facts of req's original attempt.
func (t *Transport) factsOf(req *http.Request) fsm.Request {
	f := fsm.Request{
		Method:      fsm.ParseMethod(req.Method),
		RetryPolicy: t.cfg.CallerRetries,
		ResendOff:   t.cfg.DisableResend,
		EarlyKeyed:  t.cfg.EarlyDataKeyed,
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

// try is one try of a call on one route snapshot: its first wire
// attempt and the automatic resend on each leg of its plan, a later leg
// only when nothing was sent on the one before. A configured retry is a
// new try of the same Call.
type try struct {
	call *Call // its Transport, request and context are the try's
	key  pool.Key
	snap *dial.Route // the route of every attempt; nil for a direct one route.New could not build
	leg  plan.Leg    // the leg running
	// handoff is the TLS connection on which ALPN chose HTTP/1.1 for the
	// leg before, nothing sent on it: the HTTP/1.1 leg's first attempt
	// takes it as a fresh connection instead of dialing.
	handoff *dial.Conn
	// hedge is what the copies of a hedged try share; nil when the try
	// is not hedged.
	hedge *hedging
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
func (tr *try) step(o fsm.Outcome) fsm.CallDecision {
	c := tr.call
	c.mu.Lock()
	defer c.mu.Unlock()
	var now time.Time // read for the budget alone: most calls read no clock here
	if c.pol.Budget.Window > 0 && (o.Decision.Action != fsm.ActionDeliver || c.cm.RetriesStatus(o.Status)) {
		now = time.Now()
		o.Budget = tr.call.t.budgets.reserve(tr.key.Addr, c.pol.Budget, now)
		o.Jitter = tr.call.t.jitter()
	}
	d := c.cm.Step(o)
	if o.Budget && !(d.Retry && d.Rule != fsm.RuleTooEarly) {
		tr.call.t.budgets.unreserve(tr.key.Addr, c.pol.Budget, now)
	}
	c.record(d)
	return d
}

// attemptFunc runs wire attempt n of try tr from its start; it returns
// the response, or the final error, or the next attempt's start when fsm
// decided the automatic resend. It is a method expression ((*try).attemptH2):
// a method value bound to the try would be allocated per call.
type attemptFunc func(tr *try, n int, start resend) (*http.Response, *resend, error)

// attempts runs a try's wire attempts: the first, from start, and, when
// fsm decides so, the automatic resend, at once; under a hedging policy
// that applies to the request, the copies run side by side instead
// (hedged). The call machine bounds them: every attempt is counted, and
// the last it allows is never resent.
func (tr *try) attempts(attempt attemptFunc, start resend) (*http.Response, error) {
	if tr.call.hedgeApplies() {
		return tr.hedged(attempt, start)
	}
	for n := 1; n <= MaxAttempts+1; n++ {
		resp, next, err := attempt(tr, n, start)
		if next == nil {
			return resp, err
		}
		start = *next
	}
	panic("replaysafe: fsm decided more attempts than a call allows")
}

// refuse fails a call before any attempt: it closes the request body, as
// a RoundTripper must, and returns err.
func (tr *try) refuse(err error) (*http.Response, error) {
	return nil, closeBody(tr.call.req, err)
}

// resend is what an attempt starts from: the request facts and body,
// and, for a resend on a multiplexed protocol, which pooled connections
// it may take: those that joined the pool after mark after (opened after
// the failure), or same, the connection that refused only the stream.
type resend struct {
	facts fsm.Request
	// displaced marks the automatic resend of a request whose
	// connection failed under it: its acquisition waits out a route that
	// refuses new connections (pool.Mux.Acquire's redial). (Beside facts,
	// in the word they leave room in.)
	displaced bool
	// hedge marks a hedge: a copy sent while another is in flight.
	hedge bool
	body  io.ReadCloser
	after uint64
	same  any // *h2Conn or *h3Conn, or nil
}

// abortCause returns the error to report for err: the acquisition's
// TimeoutError naming the step on a proxied route, the TimeoutError when a phase limit
// aborted the attempt (cause, what the attempt was canceled with), else
// err.
func abortCause(cause, err error) error {
	var te *recorder.TimeoutError
	if errors.As(err, &te) && te.Step != nil {
		return te // the acquire timeout, naming the step (internal/dial)
	}
	if errors.As(cause, &te) {
		var down *pool.DownError
		if errors.As(err, &down) {
			// The deadline ended a wait for a route that refused: say how.
			return &pool.DownError{Cause: te, LastDial: down.LastDial}
		}
		return te
	}
	return err
}

// afterFailure acts on the call decision cd, made after an attempt ended
// with err: the next attempt's start for the automatic resend (see
// nextStart), a *retryNext for a configured retry, or the call's *Error.
// body is the attempt's request body (nil without one).
func (tr *try) afterFailure(cd fsm.CallDecision, err error, body *reqBody) (*http.Response, *resend, error) {
	switch cd.Action {
	case fsm.ActionResend:
		next, err := tr.again(cd, err, body)
		if err != nil {
			return nil, nil, err
		}
		return nil, next, nil
	case fsm.ActionFail:
		if body != nil {
			body.release(false)
		}
		return nil, nil, tr.fail(cd.Rule, err)
	case fsm.ActionContinue:
		// A copy of a hedged call failed beside another in flight: the
		// call goes on with the others.
		if body != nil {
			body.release(false)
		}
		return nil, nil, errCopyFailed
	}
	panic("replaysafe: attempt failed with decision " + cd.String())
}

// again prepares the attempt after one that ended with err: the
// automatic resend's start, or the *retryNext of a configured retry.
func (tr *try) again(cd fsm.CallDecision, err error, body *reqBody) (*resend, error) {
	n := tr.call.attempts()
	next, gerr := tr.nextStart(body)
	if gerr != nil {
		// The next attempt cannot be made as the caller meant it: its
		// machine decides the local failure (RS21) before any
		// connection, and the error keeps both causes.
		m := fsm.New(tr.call.next(), tr.call.t.limits, tr.call.t.clock.Now())
		ld := m.Step(fsm.Event{Kind: fsm.EventLocalFailure, At: tr.call.t.clock.Now()})
		return nil, tr.fail(ld.Rule, fmt.Errorf("GetBody for attempt %d: %w; attempt %d had ended: %w", n+1, gerr, n, err))
	}
	if cd.Retry {
		return nil, &retryNext{decision: cd, start: next, err: err}
	}
	return next, nil
}

// fail returns the call's Failure: rule decided, after the attempts made.
func (tr *try) fail(rule fsm.Rule, err error) *Failure {
	return &Failure{Rule: rule, Attempts: tr.call.attempts(), History: tr.call.History(), Err: err}
}

// nextStart prepares the call's next attempt after one whose request body
// was body: the facts the call machine gives it, and the body again
// (GetBody's copy, or the untouched one-shot reader).
func (tr *try) nextStart(body *reqBody) (*resend, error) {
	next := tr.call.next()
	switch next.Body {
	case fsm.BodyNone:
		return &resend{facts: next, body: tr.call.req.Body}, nil
	case fsm.BodyBuffered:
		if body != nil {
			body.release(false)
		}
		b, err := tr.call.req.GetBody()
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
	return &resend{facts: next, body: tr.call.req.Body}, nil
}

// report tells the caller's observer (Config.OnAttempt) how wire attempt n of the call ended, and how
// the call went on after it (cd).
func (tr *try) report(n int, reused, hedge bool, status int, err error, rec attemptRecorder, cd fsm.CallDecision) {
	if tr.call.t.cfg.OnAttempt == nil {
		return
	}
	// The machine's last word, its events and its trace, taken together:
	// a stack hook that reported a write after the response ended (HTTP/2
	// writes on its own goroutine) moves a delivered attempt's connection
	// decision on, and the trace must replay to what is reported.
	// The action is the one the Transport acted on: a final action never
	// changes, only a delivered attempt's connection decision does.
	final, events, trace := rec.Seal()
	tr.call.t.cfg.OnAttempt(Report{
		Request:  tr.call.req,
		Number:   n,
		Facts:    rec.Request(),
		Reused:   reused,
		Status:   status,
		Decision: final,
		Call:     cd,
		Events:   events,
		Err:      err,
		Trace:    trace,
		Hedge:    hedge,
	})
}

// informationalLimit bounds the informational (1xx) responses of one
// attempt: informational.DefaultCount of them, and header bytes in total
// up to MaxResponseHeaderBytes when the caller set it (1 MiB,
// informational.DefaultBytes, otherwise), as net/http shares its header
// bound between the 1xx responses and the final one.
func (t *Transport) informationalLimit() informational.Limit {
	return informational.Limit{Count: informational.DefaultCount, Bytes: t.cfg.MaxResponseHeaderBytes}
}
