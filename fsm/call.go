package fsm

import (
	"strconv"
	"strings"
	"time"
)

// Retry is a configured retry policy in the terms the call rules read. The
// zero value configures none: a call then makes the original attempt and
// at most the one automatic resend the attempt rules allow.
type Retry struct {
	// Attempts is the most wire attempts a call makes, the original, the
	// automatic resend and every configured retry counted together. Zero
	// means no configured retries (two attempts at most, as without a
	// policy); one means a single attempt, no resend of any kind.
	Attempts uint8
	// Statuses are the response statuses a call may be retried on.
	Statuses StatusSet
	// Base and Cap shape the wait before a configured retry: full jitter
	// over min(Cap, Base·2^(k−2)) before wire attempt k.
	Base, Cap time.Duration
	// MaxRetryAfter is the longest Retry-After a retry waits for; a 429 or
	// 503 that asks for longer is delivered instead.
	MaxRetryAfter time.Duration
	// Hedges is the most extra copies (hedges) a call sends while its
	// copies in flight have no response header; each is one of Attempts
	// and needs room in the route's budget. Zero sends none. When the
	// hedge delay passes is the caller's clock: the call machine decides
	// only whether a copy may go (Call.Hedge).
	Hedges uint8
	// HedgeKeyed lets a request that is idempotent only by its
	// Idempotency-Key be hedged; without it only an idempotent method is.
	// Concurrent copies of one key are not what a key protects against
	// everywhere: a server may answer the second with 409 Conflict while
	// the first runs.
	HedgeKeyed bool
}

// On reports whether r configures retries.
func (r Retry) On() bool { return r.Attempts > 0 }

// max is the most wire attempts a call under r makes.
func (r Retry) max() uint8 {
	if r.Attempts == 0 {
		return 2
	}
	return r.Attempts
}

// String prints the policy in the trace format.
func (r Retry) String() string {
	return "retry attempts=" + strconv.Itoa(int(r.Attempts)) + " statuses=" + r.Statuses.String() +
		" base=" + r.Base.String() + " cap=" + r.Cap.String() + " max-retry-after=" + r.MaxRetryAfter.String() + r.hedgeString()
}

// hedgeString prints the hedging settings, or nothing without hedges, so
// that a policy without them prints as it always did.
func (r Retry) hedgeString() string {
	s := ""
	if r.Hedges > 0 {
		s = " hedges=" + strconv.Itoa(int(r.Hedges))
	}
	if r.HedgeKeyed {
		s += " hedge-keyed=on"
	}
	return s
}

// StatusSet is a set of HTTP status codes from 100 to 599.
type StatusSet [8]uint64

// Statuses returns the set of the codes given; codes outside 100–599 are
// left out.
func Statuses(codes ...int) StatusSet {
	var s StatusSet
	for _, c := range codes {
		if c >= 100 && c <= 599 {
			s[(c-100)/64] |= 1 << ((c - 100) % 64)
		}
	}
	return s
}

// Has reports whether code is in the set.
func (s StatusSet) Has(code int) bool {
	return code >= 100 && code <= 599 && s[(code-100)/64]&(1<<((code-100)%64)) != 0
}

// String lists the codes joined by ",", or "none".
func (s StatusSet) String() string {
	var b strings.Builder
	for c := 100; c <= 599; c++ {
		if s.Has(c) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(c))
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// StatusTooEarly is 425 Too Early (RFC 8470 §5.2): the server did not
// process a request it would not risk having replayed.
const StatusTooEarly = 425

// Outcome is how one wire attempt ended, in the terms the call rules read.
type Outcome struct {
	// Decision is the attempt machine's final decision.
	Decision Decision
	// Facts are what the attempt established; FactBodyRead says whether
	// it read a one-shot body.
	Facts Facts
	// Status is the delivered response's status code.
	Status int
	// RetryAfter is the delivered response's Retry-After as a wait, when
	// HasRetryAfter is set (ParseRetryAfter reads the field).
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Budget reports that the route's retry budget has room for one more
	// configured retry.
	Budget bool
	// Jitter is a random fraction in [0, 1) that picks the wait of a
	// configured retry.
	Jitter float64
}

// CallDecision is the call machine's answer to one attempt's outcome.
type CallDecision struct {
	// Action is ActionDeliver (hand the response over), ActionFail (return
	// the error) or ActionResend (make one more wire attempt).
	Action Action
	// Rule is the rule that decided.
	Rule Rule
	// Retry is set on a resend that is a configured retry rather than the
	// call's automatic resend: it resolves a new route and, when Delay is
	// positive, waits first.
	Retry bool
	// Delay is how long to wait before a configured retry.
	Delay time.Duration
}

// String prints the decision as "action rule [retry after=DELAY]"; a
// hedge prints as "resend hedge".
func (d CallDecision) String() string {
	s := d.Action.String() + " " + d.Rule.String()
	if d.Retry {
		s += " retry after=" + d.Delay.String()
	}
	return s
}

// Call decides, attempt by attempt, how a call goes on: deliver, fail, the
// automatic resend, or a configured retry. It wraps the attempt machine's
// decisions and never overrides a refusal of theirs for a request whose
// copies could have a side effect. Like Machine it is pure and
// comparable (two calls of one policy compare their states).
//
// The calling contract: create it with NewCall; before each wire attempt
// start the attempt's Machine with Next's request facts; when the attempt
// decides (a delivered response's status is known, or it failed or asked
// for a resend), feed its Outcome to Step and act on the CallDecision.
//
// Under a policy with Hedges, a call may have several copies in flight:
// when the hedge delay passes and none of them has a response header,
// ask Hedge; on ActionResend start one more copy, with Next's facts, on
// another connection. Feed every copy's outcome to Step as it ends: a
// failure while another copy is in flight decides ActionContinue (the
// call waits for the others); the first delivered response wins, and the
// caller cancels the other copies, closes their bodies and feeds them no
// more.
type Call struct {
	req      Request
	retry    *Retry // shared, never written (NewCall)
	made     uint8  // wire attempts decided so far, the canceled copies of a hedged call counted
	live     uint8  // hedges in flight beside the copy Step decides next
	hedges   uint8  // hedges sent
	bodyRead bool   // an attempt read the one-shot body
	tooEarly bool   // the one 425 retry was made
	decision CallDecision
}

// NewCall returns the call machine for a request with facts req under
// policy r (nil: none, as the zero Retry). req.Attempt is ignored; Next
// sets it.
//
// The call keeps r, not a copy, so that the calls of one policy share it
// (a call is held per request in flight, and a Retry is most of its
// size): r must not change while the call is in use.
func NewCall(req Request, r *Retry) Call {
	req.Attempt = AttemptOriginal
	if r == nil {
		r = &noRetry
	}
	return Call{req: req, retry: r}
}

// noRetry is the policy of a call made without one. Nothing writes it.
var noRetry Retry

// Attempts returns the number of wire attempts decided so far, with the
// hedges in flight.
func (c *Call) Attempts() int { return int(c.made) + int(c.live) }

// final reports whether the call has delivered or failed.
func (c *Call) final() bool {
	return c.decision.Action == ActionDeliver || c.decision.Action == ActionFail
}

// Decision returns the latest decision.
func (c *Call) Decision() CallDecision { return c.decision }

// RetriesStatus reports whether the call's retry policy lists status
// code among those a call may be retried on (Retry.Statuses).
func (c *Call) RetriesStatus(code int) bool { return c.retry.Statuses.Has(code) }

// Next returns the request facts of the call's next wire attempt: the
// attempt that is the last the policy allows is marked AttemptResend (the
// attempt rules never resend it, RS08), a policy of one attempt switches
// resending off (RS09), and a one-shot body an earlier attempt read is
// consumed.
func (c *Call) Next() Request {
	r := c.req
	if c.bodyRead && r.Body == BodyOneShotUntouched {
		r.Body = BodyOneShotConsumed
	}
	switch m := c.retry.max(); {
	case m <= 1:
		r.ResendOff = true
	case c.made+c.live+1 >= m:
		r.Attempt = AttemptResend
	}
	return r
}

// Step feeds the outcome of the attempt Next described and returns the
// call's decision. A Step after a final delivery or failure changes
// nothing. With hedges in flight, a copy that did not deliver leaves the
// others to go on (RuleHedgeCopyFailed), and a delivered one ends them:
// they count as sent.
func (c *Call) Step(o Outcome) CallDecision {
	if c.final() {
		return c.decision
	}
	if c.live > 0 {
		if o.Decision.Action != ActionDeliver {
			c.live--
			c.made++
			if o.Facts&FactBodyRead != 0 {
				c.bodyRead = true
			}
			c.decision = CallDecision{Action: ActionContinue, Rule: RuleHedgeCopyFailed}
			return c.decision
		}
		c.made += c.live // the losers, canceled
		c.live = 0
	}
	next := c.Next()
	c.made++
	if o.Facts&FactBodyRead != 0 {
		c.bodyRead = true
	}
	d := c.decide(next, &o)
	if d.Rule == RuleTooEarly {
		c.tooEarly = true
	}
	c.decision = d
	return d
}

// Hedge decides, when the hedge delay has passed and no copy of the call
// in flight has a response header, whether one more copy goes out:
// ActionResend by RuleHedge (start it with Next's facts, on a connection
// no copy of the call uses), or ActionContinue by RuleHedgeRefused. budget
// reports that the route's retry budget has room for one more. A copy
// goes only where the ambiguous-failure rules would let the request go
// twice: an idempotent method (or a key, with HedgeKeyed), a reproducible
// body, resending on and no retry policy of the caller's own; and only
// while the policy's Hedges and Attempts leave one. A Hedge after the call
// delivered or failed changes nothing.
func (c *Call) Hedge(budget bool) CallDecision {
	if c.final() {
		return c.decision
	}
	d := CallDecision{Action: ActionContinue, Rule: RuleHedgeRefused}
	switch r := &c.req; {
	case c.hedges >= c.retry.Hedges || c.retry.Attempts == 0: // no hedges, or none left
	case r.ResendOff || r.RetryPolicy || !r.Body.Reproducible():
	case !r.Method.Idempotent() && !(r.IdempotencyKey && c.retry.HedgeKeyed):
	case int(c.made)+int(c.live)+2 > int(c.retry.Attempts): // the copy in flight and this one
	case !budget:
	default:
		c.live++
		c.hedges++
		d = CallDecision{Action: ActionResend, Rule: RuleHedge}
	}
	c.decision = d
	return d
}

// decide applies the call rules, in the order of spec/ruledata, to the
// outcome of an attempt made with facts req.
func (c *Call) decide(req Request, o *Outcome) CallDecision {
	d := o.Decision
	switch d.Action {
	case ActionDeliver:
		return c.delivered(req, o)
	case ActionResend:
		if r := c.refusal(req, d.Rule); r != RuleNone {
			return CallDecision{Action: ActionFail, Rule: r} // a broken adapter never earns a resend
		}
		if c.made == 1 {
			return CallDecision{Action: ActionResend, Rule: d.Rule} // the automatic resend
		}
		return c.configured(d.Rule, o) // a later one is a configured retry
	case ActionFail:
		if !c.retry.On() || c.req.ResendOff || c.req.RetryPolicy {
			return CallDecision{Action: ActionFail, Rule: d.Rule}
		}
		switch d.Rule {
		case RuleAcquireFailed:
			// Nothing was sent: any method, with a body still as it was.
			if c.bodyUsable() {
				return c.configured(RuleRetryAcquire, o)
			}
		case RuleTimeout, RuleResponseStarted, RuleAmbiguousFreshConn, RuleNoSecondResend:
			if eligible(req) && c.bodyReproducible() {
				return c.configured(RuleRetryAmbiguous, o)
			}
		}
	}
	return CallDecision{Action: ActionFail, Rule: d.Rule}
}

// delivered decides on a delivered response: the one retry a 425 earns,
// a configured retry on a listed status, or delivery.
func (c *Call) delivered(req Request, o *Outcome) CallDecision {
	deliver := CallDecision{Action: ActionDeliver, Rule: o.Decision.Rule}
	if c.req.ResendOff || c.req.RetryPolicy || !c.bodyReproducible() {
		return deliver
	}
	switch {
	case o.Status == StatusTooEarly && c.tooEarly:
		return deliver // a second 425 is the caller's, whatever the policy lists
	case o.Status == StatusTooEarly && c.made < c.retry.max():
		return CallDecision{Action: ActionResend, Rule: RuleTooEarly, Retry: true}
	}
	if !c.retry.On() || !c.retry.Statuses.Has(o.Status) || !eligible(req) {
		return deliver
	}
	wait := time.Duration(0)
	if o.HasRetryAfter && (o.Status == 429 || o.Status == 503) {
		if o.RetryAfter > c.retry.MaxRetryAfter {
			return CallDecision{Action: ActionDeliver, Rule: RuleRetryAfterTooLong}
		}
		wait = o.RetryAfter
	}
	d := c.configured(RuleRetryStatus, o)
	if d.Action == ActionFail {
		d.Action = ActionDeliver // the response is what the caller gets
	} else {
		d.Delay = max(d.Delay, wait)
	}
	return d
}

// refusal returns the rule by which the attempt rules refuse a resend by
// rule of an attempt made with facts req, or RuleNone: a resend the
// attempt machine cannot decide for those facts comes from a broken
// driver and is never followed.
func (c *Call) refusal(req Request, rule Rule) Rule {
	switch {
	case req.Attempt == AttemptResend:
		return RuleNoSecondResend
	case req.ResendOff:
		return RuleResendOff
	case req.RetryPolicy:
		return RuleRetryPolicy
	case rule == RuleAmbiguousIdempotentResend && !eligible(req):
		return RuleAmbiguousNotIdempotent
	case rule == RuleAmbiguousIdempotentResend && !req.Body.Reproducible():
		return RuleAmbiguousBodyNotReproducible
	case (rule < RuleEvidenceHandedBack || rule > RuleAmbiguousIdempotentResend) && rule != RuleEarlyDataRejected ||
		rule == RuleAmbiguousFreshConn || rule == RuleAmbiguousNotIdempotent || rule == RuleAmbiguousBodyNotReproducible:
		return RuleInvalidOrder // not a resend rule
	case rule != RuleAmbiguousIdempotentResend && !c.bodyUsable():
		return RuleEvidenceBodyConsumed
	}
	return RuleNone
}

// configured decides a configured retry by rule: refused when the call
// has made its attempts or the route's budget is spent, else a retry after
// the jittered backoff.
func (c *Call) configured(rule Rule, o *Outcome) CallDecision {
	switch {
	case c.made >= c.retry.max():
		return CallDecision{Action: ActionFail, Rule: RuleRetryExhausted}
	case !o.Budget:
		return CallDecision{Action: ActionFail, Rule: RuleRetryBudget}
	}
	return CallDecision{Action: ActionResend, Rule: rule, Retry: true, Delay: c.backoff(o.Jitter)}
}

// backoff is the full-jitter wait before the configured retry that would
// be wire attempt c.made+1: a fraction j of min(Cap, Base·2^(n−1)) for the
// n-th retry.
func (c *Call) backoff(j float64) time.Duration {
	ceiling := c.retry.Base
	for i := uint8(2); i <= c.made && ceiling < c.retry.Cap; i++ {
		if ceiling > c.retry.Cap/2 {
			ceiling = c.retry.Cap // doubling would pass the cap, or wrap
			break
		}
		ceiling *= 2
	}
	ceiling = min(ceiling, c.retry.Cap)
	if j < 0 || j >= 1 || ceiling <= 0 {
		return 0
	}
	return time.Duration(j * float64(ceiling))
}

// eligible reports whether a copy of req has no side effect beyond the
// first: an idempotent method, or an idempotency key.
func eligible(req Request) bool { return req.Method.Idempotent() || req.IdempotencyKey }

// bodyReproducible reports whether the body can be sent again after any
// attempt read it: none or buffered.
func (c *Call) bodyReproducible() bool { return c.req.Body.Reproducible() }

// bodyUsable reports whether the body can be sent as it was: reproducible,
// or a one-shot reader no attempt has read.
func (c *Call) bodyUsable() bool {
	return c.req.Body.Reproducible() || c.req.Body == BodyOneShotUntouched && !c.bodyRead
}

// ParseRetryAfter reads a Retry-After field value (RFC 9110 §10.2.3) as
// the wait it asks for at wall time now: delay-seconds, or an HTTP-date in
// any of the three forms a recipient accepts (RFC 9110 §5.6.7). A date in
// the past asks for no wait.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return time.Duration(1<<63 - 1), true // longer than any cap
			}
			return 0, false
		}
		if n > uint64((1<<63-1)/time.Second) {
			return time.Duration(1<<63 - 1), true
		}
		return time.Duration(n) * time.Second, true
	}
	for _, layout := range []string{
		"Mon, 02 Jan 2006 15:04:05 GMT",  // IMF-fixdate
		"Monday, 02-Jan-06 15:04:05 GMT", // obsolete RFC 850
		"Mon Jan _2 15:04:05 2006",       // obsolete asctime
	} {
		if t, err := time.Parse(layout, v); err == nil {
			return max(t.Sub(now), 0), true
		}
	}
	return 0, false
}
