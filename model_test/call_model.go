package modeltest

import (
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// This file is the reference model of the call rules (RS22–RS28, the rules
// of spec/ruledata marked Call, with RS08 and the docs of fsm.Call,
// fsm.Retry and fsm.Outcome). Like model.go it is a plain function over a
// whole trace, written from the text and not from fsm/call.go: every
// question ("did an attempt read the body?", "was there a 425 before?") is
// answered by scanning the outcomes again. It uses fsm's data types only,
// never fsm.Call nor a helper method that encodes a rule.

// CallTrace is one call as the call model sees it: the request facts, the
// retry policy, and how each wire attempt ended, in order. Outcomes after
// the one that ended the call are fed but change nothing.
type CallTrace struct {
	Request  fsm.Request
	Policy   fsm.Retry
	Outcomes []fsm.Outcome
}

// CallReading chooses how the call model reads a point where the text and
// fsm.Call are known to disagree. The zero CallReading is the model's own
// reading of the text; each field switches one point to what fsm.Call
// does, so that a comparison can name a known disagreement instead of
// failing on it. CallDivergences documents each one; there is none now,
// so it has no field.
type CallReading struct{}

// DecideCall returns what the call rules decide after every outcome of
// tr: the decision on the outcome that ended the call, or on the last one
// while it goes on; the zero CallDecision before any outcome.
func DecideCall(tr CallTrace, rd CallReading) fsm.CallDecision {
	d, _ := decideCall(tr, rd)
	return d
}

// CallAttempts returns how many wire attempts the call of tr has made:
// one per outcome up to the one that ended it.
func CallAttempts(tr CallTrace, rd CallReading) int {
	_, n := decideCall(tr, rd)
	return n
}

func decideCall(tr CallTrace, rd CallReading) (d fsm.CallDecision, attempts int) {
	for k := 1; k <= len(tr.Outcomes); k++ {
		if k > 1 && d.Action != fsm.ActionResend {
			break // "A Step after a final delivery or failure changes nothing."
		}
		d = decideAttempt(tr.Request, tr.Policy, tr.Outcomes[:k], rd)
		attempts = k
	}
	return d, attempts
}

// NextAttempt returns the request facts of the call's next wire attempt
// after the outcomes of tr, as fsm.Call.Next documents them: the last
// attempt the policy allows is marked AttemptResend (RS08), a policy of
// one attempt switches resending off (RS09), and a one-shot body an
// earlier attempt read is consumed. The facts' own Attempt is ignored
// (fsm.NewCall).
func NextAttempt(tr CallTrace, rd CallReading) fsm.Request {
	return attemptFacts(tr.Request, tr.Policy, tr.Outcomes[:CallAttempts(tr, rd)])
}

// attemptFacts returns the facts of the wire attempt that follows the
// outcomes before.
func attemptFacts(req fsm.Request, p fsm.Retry, before []fsm.Outcome) fsm.Request {
	req.Attempt = fsm.AttemptOriginal
	if req.Body == fsm.BodyOneShotUntouched && bodyReadBy(before) {
		req.Body = fsm.BodyOneShotConsumed
	}
	switch k := len(before) + 1; {
	case p.Attempts == 1:
		req.ResendOff = true
	case k >= mostAttempts(p):
		req.Attempt = fsm.AttemptResend
	}
	return req
}

// mostAttempts is the most wire attempts a call makes under p: the
// policy's Attempts, the original and the automatic resend counted; two,
// the original and the automatic resend, without a policy (RS08).
func mostAttempts(p fsm.Retry) int {
	if p.Attempts == 0 {
		return 2
	}
	return int(p.Attempts)
}

// decideAttempt applies the call rules to the last of the outcomes, the
// k-th wire attempt of a call that has gone on so far.
func decideAttempt(req fsm.Request, p fsm.Retry, outcomes []fsm.Outcome, rd CallReading) fsm.CallDecision {
	k := len(outcomes)
	o := outcomes[k-1]
	facts := attemptFacts(req, p, outcomes[:k-1])
	policy := p.Attempts > 0 // "Zero means no configured retries"
	// The caller switched resending off or has a retry policy of their
	// own: replaysafe resends nothing underneath (RS09, RS10).
	off := req.ResendOff || req.RetryPolicy
	keyed := idempotentMethod(req.Method) || req.IdempotencyKey
	reproducible := reproducibleBody(req.Body)
	asItWas := reproducible || req.Body == fsm.BodyOneShotUntouched && !bodyReadBy(outcomes)
	lastAttempt := k >= mostAttempts(p)

	// retry is a configured retry that the rules allow, before the count
	// (RS26) and the budget (RS27) are asked; refused, the call ends with
	// the action given.
	retry := func(rule fsm.Rule, refused fsm.Action, wait time.Duration) fsm.CallDecision {
		switch {
		case lastAttempt:
			return fsm.CallDecision{Action: refused, Rule: fsm.RuleRetryExhausted}
		case !o.Budget:
			return fsm.CallDecision{Action: refused, Rule: fsm.RuleRetryBudget}
		}
		return fsm.CallDecision{Action: fsm.ActionResend, Rule: rule, Retry: true, Delay: max(backoffBefore(p, k+1, o.Jitter, rd), wait)}
	}

	switch o.Decision.Action {
	case fsm.ActionDeliver:
		own := fsm.CallDecision{Action: fsm.ActionDeliver, Rule: o.Decision.Rule}
		if off {
			return own
		}
		if o.Status == fsm.StatusTooEarly {
			// RS22: once, any method, a reproducible body, no policy and
			// no budget needed; it counts as an attempt.
			if !tooEarlyBefore(outcomes[:k-1]) {
				if reproducible && !lastAttempt {
					return fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleTooEarly, Retry: true}
				}
			} else {
				return own // "a second 425 is delivered"
			}
		}
		// RS23 and the rules that refuse it: a listed status, a request
		// whose copy has no further effect, a reproducible body.
		if !policy || !listed(p.Statuses, o.Status) || !keyed || !reproducible {
			return own
		}
		var wait time.Duration
		if o.HasRetryAfter && (o.Status == 429 || o.Status == 503) {
			if o.RetryAfter > p.MaxRetryAfter {
				return fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleRetryAfterTooLong} // RS28
			}
			wait = o.RetryAfter
		}
		return retry(fsm.RuleRetryStatus, fsm.ActionDeliver, wait)

	case fsm.ActionResend:
		if rule, forbidden := resendForbidden(facts, o, keyed, reproducible); forbidden {
			return fsm.CallDecision{Action: fsm.ActionFail, Rule: rule}
		}
		if k == 1 {
			// The automatic resend: immediate, no budget, not a retry.
			return fsm.CallDecision{Action: fsm.ActionResend, Rule: o.Decision.Rule}
		}
		// A resend decided on a later attempt is a configured retry.
		return retry(o.Decision.Rule, fsm.ActionFail, 0)

	case fsm.ActionFail:
		own := fsm.CallDecision{Action: fsm.ActionFail, Rule: o.Decision.Rule}
		if off || !policy {
			return own
		}
		switch o.Decision.Rule {
		case fsm.RuleAcquireFailed: // RS24: nothing was sent
			if asItWas {
				return retry(fsm.RuleRetryAcquire, fsm.ActionFail, 0)
			}
		case fsm.RuleTimeout, fsm.RuleResponseStarted, fsm.RuleAmbiguousFreshConn, fsm.RuleNoSecondResend: // RS25
			if keyed && reproducible {
				return retry(fsm.RuleRetryAmbiguous, fsm.ActionFail, 0)
			}
		}
		return own
	}
	// Not a final decision of the attempt machine: the call cannot go on.
	return fsm.CallDecision{Action: fsm.ActionFail, Rule: o.Decision.Rule}
}

// resendForbidden reports whether the attempt rules cannot resend an
// attempt with these facts that ended as o, and the rule that refuses it,
// first in precedence order: RS08, RS09, RS10, RS11, RS18, RS19.
func resendForbidden(facts fsm.Request, o fsm.Outcome, keyed, reproducible bool) (fsm.Rule, bool) {
	bodyGone := facts.Body == fsm.BodyOneShotConsumed || facts.Body == fsm.BodyOneShotUntouched && o.Facts&fsm.FactBodyRead != 0
	switch {
	case facts.Attempt == fsm.AttemptResend:
		return fsm.RuleNoSecondResend, true
	case facts.ResendOff:
		return fsm.RuleResendOff, true
	case facts.RetryPolicy:
		return fsm.RuleRetryPolicy, true
	case o.Decision.Rule == fsm.RuleAmbiguousIdempotentResend && !keyed:
		return fsm.RuleAmbiguousNotIdempotent, true
	case o.Decision.Rule == fsm.RuleAmbiguousIdempotentResend && !reproducible:
		return fsm.RuleAmbiguousBodyNotReproducible, true
	case bodyGone:
		return fsm.RuleEvidenceBodyConsumed, true
	}
	return fsm.RuleNone, false
}

// backoffBefore is the wait before wire attempt k (k ≥ 2) after a
// configured retry: full jitter, the fraction j of
// min(Cap, Base·2^(k−2)), counting the automatic resend as a retry.
func backoffBefore(p fsm.Retry, k int, j float64, rd CallReading) time.Duration {
	ceiling := p.Cap
	if e := k - 2; e < 63 && p.Base <= p.Cap>>e {
		ceiling = min(ceiling, p.Base<<e)
	}
	if ceiling <= 0 || j < 0 || j >= 1 {
		return 0
	}
	return time.Duration(j * float64(ceiling))
}

// bodyReadBy reports whether one of the attempts that ended as outcomes
// read the request body.
func bodyReadBy(outcomes []fsm.Outcome) bool {
	for _, o := range outcomes {
		if o.Facts&fsm.FactBodyRead != 0 {
			return true
		}
	}
	return false
}

// tooEarlyBefore reports whether one of outcomes delivered a 425. In a
// call that went on past it, that 425 was the one RS22 retries.
func tooEarlyBefore(outcomes []fsm.Outcome) bool {
	for _, o := range outcomes {
		if o.Decision.Action == fsm.ActionDeliver && o.Status == fsm.StatusTooEarly {
			return true
		}
	}
	return false
}

// listed reports whether the policy's status set holds code: bit
// (code−100) of the set, for codes from 100 to 599.
func listed(s fsm.StatusSet, code int) bool {
	if code < 100 || code > 599 {
		return false
	}
	i := code - 100
	return s[i/64]>>(i%64)&1 == 1
}
