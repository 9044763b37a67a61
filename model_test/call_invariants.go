package modeltest

import (
	"fmt"

	"github.com/replaysafe/replaysafe/fsm"
)

// CallStep is one step of a call as a driver sees it: the facts Next gave
// the attempt, the attempt's outcome, and the call's decision on it (or,
// after the call ended, its unchanged decision and attempt count).
type CallStep struct {
	Facts    fsm.Request
	Outcome  fsm.Outcome
	Decision fsm.CallDecision
	Attempts int
}

// CallInvariants checks the safety properties of a call whatever the
// details of the call rules, so that no policy can produce a copy the
// rules forbid. steps[i] is the (i+1)-th Step of a call of req under p;
// the outcomes must be ones the attempt rules can decide (AttemptMayEnd).
//
//   - The call makes at most Attempts wire attempts, two without a policy
//     (RS08, fsm.Retry.Attempts).
//   - A decided call does not move: a Step after a final decision changes
//     neither the decision nor the attempt count.
//   - A request that is neither idempotent nor keyed is sent again only
//     after an outcome that shows the server did not process it: a failed
//     dial (RS04, RS24), the attempt rules' evidence (RS12–RS16) or a 425
//     (RS22); never after an ambiguous failure or a delivered response.
//   - A one-shot body an attempt read is never sent again, and the next
//     attempt's facts say it is consumed.
//   - A 425 is retried at most once (RS22).
//   - Nothing is sent again when the caller switched resending off or has
//     a retry policy of their own (RS09, RS10).
//   - Retry is unset on a resend exactly when it is the automatic resend
//     after the first attempt; a final decision has no Retry and no Delay;
//     RS22 waits for nothing; without a policy the only retry is RS22.
//   - A configured retry other than RS22 needs the route's budget (RS27),
//     and waits at most the longer of Cap and the Retry-After it read.
//   - The last attempt the policy allows is one the attempt rules never
//     resend (AttemptResend, or ResendOff under a policy of one attempt).
func CallInvariants(req fsm.Request, p fsm.Retry, steps []CallStep) error {
	most := mostAttempts(p)
	keyed := idempotentMethod(req.Method) || req.IdempotencyKey
	read, tooEarly := req.Body == fsm.BodyOneShotConsumed, 0
	end := -1
	for i, s := range steps {
		o, d := s.Outcome, s.Decision
		bad := func(format string, args ...any) error {
			return fmt.Errorf("step %d (%s) decided %v: %s", i+1, formatOutcome(o), d, fmt.Sprintf(format, args...))
		}
		if end >= 0 {
			if d != steps[end].Decision || s.Attempts != steps[end].Attempts {
				return bad("the call had ended with %v after %d attempts, now %d", steps[end].Decision, steps[end].Attempts, s.Attempts)
			}
			continue
		}
		if s.Attempts != i+1 {
			return bad("%d attempts counted after %d outcomes", s.Attempts, i+1)
		}
		if s.Attempts == most && s.Facts.Attempt != fsm.AttemptResend && !s.Facts.ResendOff {
			return bad("attempt %d is the last the policy allows, but its facts (%v) let the attempt rules resend it", s.Attempts, s.Facts)
		}
		if read && s.Facts.Body == fsm.BodyOneShotUntouched {
			return bad("an earlier attempt read the one-shot body, but this attempt's facts say %v", s.Facts.Body)
		}
		if req.Body == fsm.BodyOneShotUntouched && o.Facts&fsm.FactBodyRead != 0 {
			read = true
		}
		if d.Action != fsm.ActionResend {
			if d.Retry || d.Delay != 0 {
				return bad("a final decision with a retry or a wait")
			}
			end = i
			continue
		}
		switch automatic := i == 0 && o.Decision.Action == fsm.ActionResend; {
		case s.Attempts+1 > most:
			return bad("a wire attempt %d, the policy allows %d", s.Attempts+1, most)
		case req.ResendOff || req.RetryPolicy:
			return bad("the caller switched resending off or has a retry policy of their own")
		case read:
			return bad("the one-shot body was read; it cannot be sent again")
		case !keyed && !(o.Decision.Action == fsm.ActionFail && o.Decision.Rule == fsm.RuleAcquireFailed ||
			o.Decision.Action == fsm.ActionResend && evidenceResendRule(o.Decision.Rule) ||
			o.Decision.Action == fsm.ActionDeliver && o.Status == fsm.StatusTooEarly):
			return bad("a request that is neither idempotent nor keyed, sent again after an outcome that does not show it unprocessed")
		case d.Retry == automatic:
			return bad("Retry is %v on a resend that is %sthe automatic resend after the first attempt", d.Retry, map[bool]string{true: "", false: "not "}[automatic])
		case d.Delay < 0:
			return bad("a negative wait")
		case d.Rule == fsm.RuleTooEarly:
			if tooEarly++; tooEarly > 1 {
				return bad("a second 425 retry")
			}
			if d.Delay != 0 {
				return bad("the 425 retry waits")
			}
		case d.Retry && p.Attempts == 0:
			return bad("a configured retry without a policy")
		case d.Retry && !o.Budget:
			return bad("a configured retry with the route's budget spent")
		case d.Delay > max(p.Cap, o.RetryAfter):
			return bad("a wait longer than both the cap %v and the Retry-After", p.Cap)
		}
	}
	return nil
}

// evidenceResendRule reports whether r is one of the attempt rules that resend
// on evidence the server did not process the request (RS12–RS16).
func evidenceResendRule(r fsm.Rule) bool {
	switch r {
	case fsm.RuleEvidenceHandedBack, fsm.RuleEvidenceRefusedStream, fsm.RuleEvidenceGoAwayBoundary,
		fsm.RuleEvidenceRequestRejected, fsm.RuleEvidenceNothingWritten, fsm.RuleEarlyDataRejected:
		return true
	}
	return false
}

// attemptEndRules are the rules that can end a wire attempt other than by
// delivery: RS03 to RS21, and the early-data rules RS32 and RS33.
var attemptEndRules = func() []fsm.Rule {
	var out []fsm.Rule
	for r := fsm.RuleInvalidOrder; r <= fsm.RuleLocalFailure; r++ {
		out = append(out, r)
	}
	return append(out, fsm.RuleEarlyDataUnsafe, fsm.RuleEarlyDataRejected)
}()

// attemptEndRule reports whether r is one of attemptEndRules.
func attemptEndRule(r fsm.Rule) bool {
	for _, a := range attemptEndRules {
		if a == r {
			return true
		}
	}
	return false
}

// AttemptMayEnd reports whether the attempt rules can end an attempt with
// facts as o: each refusal needs the fact it cites (RS08 the last
// attempt, RS09 resending off, RS10 a retry policy, RS11 a read one-shot
// body, RS18 a request neither idempotent nor keyed, RS19 a one-shot body
// of one that is), a resend needs the facts that allow one, and a failed
// dial read no body.
func AttemptMayEnd(facts fsm.Request, o fsm.Outcome) bool {
	keyed := idempotentMethod(facts.Method) || facts.IdempotencyKey
	oneShot := facts.Body == fsm.BodyOneShotUntouched || facts.Body == fsm.BodyOneShotConsumed
	switch o.Decision.Action {
	case fsm.ActionDeliver:
		return o.Status >= 100 && o.Status <= 599
	case fsm.ActionResend:
		_, forbidden := resendForbidden(facts, o, keyed, reproducibleBody(facts.Body))
		return !forbidden && (evidenceResendRule(o.Decision.Rule) || o.Decision.Rule == fsm.RuleAmbiguousIdempotentResend)
	case fsm.ActionFail:
		switch o.Decision.Rule {
		case fsm.RuleAcquireFailed:
			return o.Facts&fsm.FactBodyRead == 0
		case fsm.RuleNoSecondResend:
			return facts.Attempt == fsm.AttemptResend
		case fsm.RuleResendOff:
			return facts.ResendOff
		case fsm.RuleRetryPolicy:
			return facts.RetryPolicy
		case fsm.RuleEvidenceBodyConsumed:
			return facts.Body == fsm.BodyOneShotConsumed || facts.Body == fsm.BodyOneShotUntouched && o.Facts&fsm.FactBodyRead != 0
		case fsm.RuleAmbiguousNotIdempotent:
			return !keyed
		case fsm.RuleAmbiguousBodyNotReproducible:
			return keyed && oneShot
		case fsm.RuleEarlyDataUnsafe:
			return !earlySafe(facts)
		}
		return attemptEndRule(o.Decision.Rule) && !evidenceResendRule(o.Decision.Rule) &&
			o.Decision.Rule != fsm.RuleAmbiguousIdempotentResend
	}
	return false
}
