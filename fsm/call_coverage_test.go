package fsm_test

// Table tests that cover every statement of fsm/call.go on their own
// (go test -run TestCoverage -cover ./fsm/ covers machine.go and call.go
// alike; docs/mutation.md), written to kill the mutants gremlins makes:
// every call rule (RS22–RS28) decides at least once, every condition is
// tested both ways and every boundary on both sides.

import (
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// ccPolicy: three attempts, three statuses, a backoff that reaches its
// cap at the third attempt, and a Retry-After limit of 2s.
var ccPolicy = fsm.Retry{Attempts: 3, Statuses: fsm.Statuses(429, 503, 504), Base: 100 * time.Millisecond, Cap: 250 * time.Millisecond, MaxRetryAfter: 2 * time.Second}

// ccOut is an outcome with budget and jitter 0.5; the options change it.
func ccOut(a fsm.Action, r fsm.Rule, opts ...func(*fsm.Outcome)) fsm.Outcome {
	o := fsm.Outcome{Decision: fsm.Decision{Action: a, Rule: r, Conn: fsm.ConnDiscard}, Budget: true, Jitter: 0.5}
	for _, f := range opts {
		f(&o)
	}
	return o
}

func ccStatus(code int, opts ...func(*fsm.Outcome)) fsm.Outcome {
	o := ccOut(fsm.ActionDeliver, fsm.RuleDeliverFinalResponse, opts...)
	o.Status = code
	o.Decision.Conn = fsm.ConnReuse
	return o
}

func ccFail(r fsm.Rule, opts ...func(*fsm.Outcome)) fsm.Outcome {
	return ccOut(fsm.ActionFail, r, opts...)
}

func ccResend(r fsm.Rule, opts ...func(*fsm.Outcome)) fsm.Outcome {
	return ccOut(fsm.ActionResend, r, opts...)
}

func ccNoBudget(o *fsm.Outcome) { o.Budget = false }
func ccBodyRead(o *fsm.Outcome) { o.Facts |= fsm.FactBodyRead }
func ccJitter(j float64) func(*fsm.Outcome) {
	return func(o *fsm.Outcome) { o.Jitter = j }
}
func ccRetryAfter(d time.Duration) func(*fsm.Outcome) {
	return func(o *fsm.Outcome) { o.RetryAfter, o.HasRetryAfter = d, true }
}

func ccDeliver(r fsm.Rule) fsm.CallDecision {
	return fsm.CallDecision{Action: fsm.ActionDeliver, Rule: r}
}
func ccFailed(r fsm.Rule) fsm.CallDecision { return fsm.CallDecision{Action: fsm.ActionFail, Rule: r} }
func ccAtOnce(r fsm.Rule) fsm.CallDecision {
	return fsm.CallDecision{Action: fsm.ActionResend, Rule: r}
}
func ccRetry(r fsm.Rule, d time.Duration) fsm.CallDecision {
	return fsm.CallDecision{Action: fsm.ActionResend, Rule: r, Retry: true, Delay: d}
}

var (
	ccGET     = fsm.Request{Method: fsm.MethodGET}
	ccPOST    = fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}
	ccKeyPOST = fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered, IdempotencyKey: true}
	ccOneShot = fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}
	ccPOST1   = fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotUntouched}
)

func ccWith(r fsm.Request, f func(*fsm.Request)) fsm.Request {
	f(&r)
	return r
}

type ccCase struct {
	name     string
	req      fsm.Request
	policy   fsm.Retry
	outcomes []fsm.Outcome
	want     []fsm.CallDecision // one per outcome
}

func (c ccCase) run(t *testing.T) {
	t.Helper()
	if len(c.want) != len(c.outcomes) {
		t.Fatalf("%s: %d outcomes, %d decisions", c.name, len(c.outcomes), len(c.want))
	}
	call := fsm.NewCall(c.req, &c.policy)
	for i, o := range c.outcomes {
		if got := call.Step(o); got != c.want[i] {
			t.Errorf("%s: outcome %d: %v, want %v", c.name, i+1, got, c.want[i])
			return
		}
		if got := call.Decision(); got != c.want[i] {
			t.Errorf("%s: outcome %d: Decision() = %v", c.name, i+1, got)
		}
		if call.Attempts() != i+1 {
			t.Errorf("%s: outcome %d: Attempts() = %d", c.name, i+1, call.Attempts())
		}
	}
}

// TestCoverageCallDelivered: a delivered response is delivered, retried
// by status (RS23), retried once on 425 (RS22), or delivered by RS26,
// RS27 or RS28.
func TestCoverageCallDelivered(t *testing.T) {
	deliver := ccDeliver(fsm.RuleDeliverFinalResponse)
	listed425 := ccPolicy
	listed425.Statuses = fsm.Statuses(425, 503)
	cases := []ccCase{
		{"no policy delivers a 503", ccGET, fsm.Retry{}, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{deliver}},
		{"a listed status is retried", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond)}},
		{"an unlisted status is delivered", ccGET, ccPolicy, []fsm.Outcome{ccStatus(500)}, []fsm.CallDecision{deliver}},
		{"a 200 is delivered", ccGET, ccPolicy, []fsm.Outcome{ccStatus(200)}, []fsm.CallDecision{deliver}},
		{"a POST without a key keeps its 503", ccPOST, ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{deliver}},
		{"a keyed POST is retried", ccKeyPOST, ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond)}},
		{"a one-shot body keeps its 503", ccOneShot, ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{deliver}},
		{"resend off keeps the 503", ccWith(ccGET, func(r *fsm.Request) { r.ResendOff = true }), ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{deliver}},
		{"a caller's policy keeps the 503", ccWith(ccGET, func(r *fsm.Request) { r.RetryPolicy = true }), ccPolicy, []fsm.Outcome{ccStatus(503)}, []fsm.CallDecision{deliver}},
		{"Retry-After longer than the backoff", ccGET, ccPolicy, []fsm.Outcome{ccStatus(429, ccRetryAfter(time.Second))}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, time.Second)}},
		{"Retry-After at MaxRetryAfter", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503, ccRetryAfter(2*time.Second))}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 2*time.Second)}},
		{"Retry-After past MaxRetryAfter (RS28)", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503, ccRetryAfter(2*time.Second+1))}, []fsm.CallDecision{ccDeliver(fsm.RuleRetryAfterTooLong)}},
		{"Retry-After shorter than the backoff", ccGET, ccPolicy, []fsm.Outcome{ccStatus(429, ccRetryAfter(time.Millisecond))}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond)}},
		{"Retry-After on a 504 is not read", ccGET, ccPolicy, []fsm.Outcome{ccStatus(504, ccRetryAfter(time.Hour))}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond)}},
		{"a Retry-After value not sent is not read", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503, func(o *fsm.Outcome) { o.RetryAfter = time.Hour })}, []fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond)}},
		{"status retries until the attempts are made (RS26)", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503), ccStatus(503), ccStatus(503)},
			[]fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond), ccRetry(fsm.RuleRetryStatus, 100*time.Millisecond), ccDeliver(fsm.RuleRetryExhausted)}},
		{"no budget for a status retry (RS27)", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503, ccNoBudget)}, []fsm.CallDecision{ccDeliver(fsm.RuleRetryBudget)}},
		{"a 425 is retried once without a policy (RS22)", ccGET, fsm.Retry{}, []fsm.Outcome{ccStatus(425), ccStatus(425)},
			[]fsm.CallDecision{ccRetry(fsm.RuleTooEarly, 0), deliver}},
		{"a second 425 is delivered though listed", ccGET, listed425, []fsm.Outcome{ccStatus(425), ccStatus(425)},
			[]fsm.CallDecision{ccRetry(fsm.RuleTooEarly, 0), deliver}},
		{"a 425 for a POST", ccPOST, fsm.Retry{}, []fsm.Outcome{ccStatus(425), ccStatus(200)}, []fsm.CallDecision{ccRetry(fsm.RuleTooEarly, 0), deliver}},
		{"a 425 with a one-shot body", ccOneShot, fsm.Retry{}, []fsm.Outcome{ccStatus(425)}, []fsm.CallDecision{deliver}},
		{"a 425 with resending off", ccWith(ccGET, func(r *fsm.Request) { r.ResendOff = true }), fsm.Retry{}, []fsm.Outcome{ccStatus(425)}, []fsm.CallDecision{deliver}},
		{"a 425 under a policy of one attempt", ccGET, fsm.Retry{Attempts: 1}, []fsm.Outcome{ccStatus(425)}, []fsm.CallDecision{deliver}},
		{"a listed 425 under a policy of one attempt", ccGET, fsm.Retry{Attempts: 1, Statuses: fsm.Statuses(425)}, []fsm.Outcome{ccStatus(425)}, []fsm.CallDecision{ccDeliver(fsm.RuleRetryExhausted)}},
		{"a 425 before the last attempt", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503), ccStatus(425), ccStatus(200)},
			[]fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond), ccRetry(fsm.RuleTooEarly, 0), deliver}},
		{"a 425 at the last attempt", ccGET, ccPolicy, []fsm.Outcome{ccStatus(503), ccStatus(503), ccStatus(425)},
			[]fsm.CallDecision{ccRetry(fsm.RuleRetryStatus, 50*time.Millisecond), ccRetry(fsm.RuleRetryStatus, 100*time.Millisecond), deliver}},
		{"a listed status after a 425", ccGET, ccPolicy, []fsm.Outcome{ccStatus(425), ccStatus(503), ccStatus(425)},
			[]fsm.CallDecision{ccRetry(fsm.RuleTooEarly, 0), ccRetry(fsm.RuleRetryStatus, 100*time.Millisecond), deliver}},
		{"a 503 after a 425 without a policy", ccGET, fsm.Retry{}, []fsm.Outcome{ccStatus(425), ccStatus(503)}, []fsm.CallDecision{ccRetry(fsm.RuleTooEarly, 0), deliver}},
	}
	for _, c := range cases {
		c.run(t)
	}
}

// TestCoverageCallResend: the attempt machine's resend is the automatic
// resend on the first attempt, a configured retry later, and refused by
// the rule the attempt rules would have applied when no attempt machine
// could have decided it for the facts Next gave.
func TestCoverageCallResend(t *testing.T) {
	resendOff := ccWith(ccGET, func(r *fsm.Request) { r.ResendOff = true })
	callerPolicy := ccWith(ccGET, func(r *fsm.Request) { r.RetryPolicy = true })
	consumed := ccWith(ccOneShot, func(r *fsm.Request) { r.Body = fsm.BodyOneShotConsumed })
	cases := []ccCase{
		{"the automatic resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend), ccStatus(200)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleAmbiguousIdempotentResend), ccDeliver(fsm.RuleDeliverFinalResponse)}},
		{"evidence for a POST", ccPOST, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream)}, []fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceRefusedStream)}},
		{"no second resend without a policy (RS08)", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceNothingWritten), ccResend(fsm.RuleEvidenceNothingWritten)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceNothingWritten), ccFailed(fsm.RuleNoSecondResend)}},
		{"later evidence is a configured retry", ccPOST, ccPolicy, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream), ccResend(fsm.RuleEvidenceRefusedStream), ccResend(fsm.RuleEvidenceRefusedStream)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceRefusedStream), ccRetry(fsm.RuleEvidenceRefusedStream, 100*time.Millisecond), ccFailed(fsm.RuleNoSecondResend)}},
		{"later evidence without budget", ccPOST, ccPolicy, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream), ccResend(fsm.RuleEvidenceRefusedStream, ccNoBudget)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceRefusedStream), ccFailed(fsm.RuleRetryBudget)}},
		{"resending off (RS09)", resendOff, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceNothingWritten)}, []fsm.CallDecision{ccFailed(fsm.RuleResendOff)}},
		{"one attempt switches resending off", ccGET, fsm.Retry{Attempts: 1}, []fsm.Outcome{ccResend(fsm.RuleEvidenceHandedBack)}, []fsm.CallDecision{ccFailed(fsm.RuleResendOff)}},
		{"a caller's policy (RS10)", callerPolicy, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream)}, []fsm.CallDecision{ccFailed(fsm.RuleRetryPolicy)}},
		{"RS20 for a POST", ccPOST, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend)}, []fsm.CallDecision{ccFailed(fsm.RuleAmbiguousNotIdempotent)}},
		{"RS20 for a keyed POST", ccKeyPOST, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend)}, []fsm.CallDecision{ccAtOnce(fsm.RuleAmbiguousIdempotentResend)}},
		{"RS20 for a one-shot PUT", ccOneShot, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend)}, []fsm.CallDecision{ccFailed(fsm.RuleAmbiguousBodyNotReproducible)}},
		{"RS20 for a buffered PUT", ccWith(ccOneShot, func(r *fsm.Request) { r.Body = fsm.BodyBuffered }), fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend)}, []fsm.CallDecision{ccAtOnce(fsm.RuleAmbiguousIdempotentResend)}},
		{"RS11 is below the resend rules", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceBodyConsumed)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS12 is the first resend rule", ccPOST1, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceHandedBack)}, []fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceHandedBack)}},
		{"RS14", ccPOST1, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceGoAwayBoundary)}, []fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceGoAwayBoundary)}},
		{"RS15", ccPOST1, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceRequestRejected)}, []fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceRequestRejected)}},
		{"RS17 is no resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousFreshConn)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS18 is no resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousNotIdempotent)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS19 is no resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleAmbiguousBodyNotReproducible)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS21 is above the resend rules", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleLocalFailure)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS02 is no resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleDeliverFinalResponse)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS33 is a resend rule, the call's automatic resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEarlyDataRejected), ccFail(fsm.RuleNoSecondResend)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleEarlyDataRejected), ccFailed(fsm.RuleNoSecondResend)}},
		{"RS32 is no resend", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEarlyDataUnsafe)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"RS32 is not retried under a policy", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleEarlyDataUnsafe)}, []fsm.CallDecision{ccFailed(fsm.RuleEarlyDataUnsafe)}},
		{"RS22 is no attempt rule", ccGET, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleTooEarly)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
		{"evidence after the one-shot body was read (RS11)", ccPOST1, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceNothingWritten, ccBodyRead)}, []fsm.CallDecision{ccFailed(fsm.RuleEvidenceBodyConsumed)}},
		{"evidence for a consumed body (RS11)", consumed, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream)}, []fsm.CallDecision{ccFailed(fsm.RuleEvidenceBodyConsumed)}},
		{"evidence after a buffered body was read", ccPOST, fsm.Retry{}, []fsm.Outcome{ccResend(fsm.RuleEvidenceRefusedStream, ccBodyRead)}, []fsm.CallDecision{ccAtOnce(fsm.RuleEvidenceRefusedStream)}},
		{"a one-shot body read by a retry", ccPOST1, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed), ccResend(fsm.RuleEvidenceNothingWritten, ccBodyRead)},
			[]fsm.CallDecision{ccRetry(fsm.RuleRetryAcquire, 50*time.Millisecond), ccFailed(fsm.RuleEvidenceBodyConsumed)}},
	}
	for _, c := range cases {
		c.run(t)
	}
}

// TestCoverageCallFail: a failure is final without a policy; with one, a
// failed dial is retried for any method whose body is as it was (RS24),
// and an ambiguous failure for an idempotent request with a reproducible
// body (RS25); every other refusal stays final.
func TestCoverageCallFail(t *testing.T) {
	cases := []ccCase{
		{"no policy", ccGET, fsm.Retry{}, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccFailed(fsm.RuleAcquireFailed)}},
		{"a failed dial (RS24)", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryAcquire, 50*time.Millisecond)}},
		{"a failed dial, one-shot POST unread", ccPOST1, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryAcquire, 50*time.Millisecond)}},
		{"a failed dial, one-shot POST read", ccPOST1, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed, ccBodyRead)}, []fsm.CallDecision{ccFailed(fsm.RuleAcquireFailed)}},
		{"a failed dial, consumed body", ccWith(ccPOST1, func(r *fsm.Request) { r.Body = fsm.BodyOneShotConsumed }), ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccFailed(fsm.RuleAcquireFailed)}},
		{"a failed dial, resending off", ccWith(ccGET, func(r *fsm.Request) { r.ResendOff = true }), ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccFailed(fsm.RuleAcquireFailed)}},
		{"a failed dial, a caller's policy", ccWith(ccGET, func(r *fsm.Request) { r.RetryPolicy = true }), ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed)}, []fsm.CallDecision{ccFailed(fsm.RuleAcquireFailed)}},
		{"dials until the attempts are made (RS26)", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed), ccFail(fsm.RuleAcquireFailed), ccFail(fsm.RuleAcquireFailed)},
			[]fsm.CallDecision{ccRetry(fsm.RuleRetryAcquire, 50*time.Millisecond), ccRetry(fsm.RuleRetryAcquire, 100*time.Millisecond), ccFailed(fsm.RuleRetryExhausted)}},
		{"no budget for a dial (RS27)", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAcquireFailed, ccNoBudget)}, []fsm.CallDecision{ccFailed(fsm.RuleRetryBudget)}},
		{"a timeout (RS25)", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleTimeout)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryAmbiguous, 50*time.Millisecond)}},
		{"a cut response", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleResponseStarted)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryAmbiguous, 50*time.Millisecond)}},
		{"a fresh connection", ccKeyPOST, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAmbiguousFreshConn)}, []fsm.CallDecision{ccRetry(fsm.RuleRetryAmbiguous, 50*time.Millisecond)}},
		{"the failed automatic resend", ccGET, ccPolicy, []fsm.Outcome{ccResend(fsm.RuleAmbiguousIdempotentResend), ccFail(fsm.RuleNoSecondResend), ccStatus(200)},
			[]fsm.CallDecision{ccAtOnce(fsm.RuleAmbiguousIdempotentResend), ccRetry(fsm.RuleRetryAmbiguous, 100*time.Millisecond), ccDeliver(fsm.RuleDeliverFinalResponse)}},
		{"a timeout for a POST", ccPOST, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleTimeout)}, []fsm.CallDecision{ccFailed(fsm.RuleTimeout)}},
		{"a timeout for a one-shot PUT", ccOneShot, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleTimeout)}, []fsm.CallDecision{ccFailed(fsm.RuleTimeout)}},
		{"a timeout without budget", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleTimeout, ccNoBudget)}, []fsm.CallDecision{ccFailed(fsm.RuleRetryBudget)}},
		{"canceled", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleCanceled)}, []fsm.CallDecision{ccFailed(fsm.RuleCanceled)}},
		{"a local failure", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleLocalFailure)}, []fsm.CallDecision{ccFailed(fsm.RuleLocalFailure)}},
		{"RS18 stays final", ccPOST, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAmbiguousNotIdempotent)}, []fsm.CallDecision{ccFailed(fsm.RuleAmbiguousNotIdempotent)}},
		{"RS19 stays final", ccOneShot, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleAmbiguousBodyNotReproducible)}, []fsm.CallDecision{ccFailed(fsm.RuleAmbiguousBodyNotReproducible)}},
		{"an invalid order stays final", ccGET, ccPolicy, []fsm.Outcome{ccFail(fsm.RuleInvalidOrder)}, []fsm.CallDecision{ccFailed(fsm.RuleInvalidOrder)}},
	}
	for _, c := range cases {
		c.run(t)
	}
}

// TestCoverageCallSteps: Next's facts attempt by attempt, and a decided
// call that does not move.
func TestCoverageCallSteps(t *testing.T) {
	cases := []struct {
		name      string
		policy    fsm.Retry
		attempts  []fsm.Attempt
		resendOff bool
	}{
		{"no policy", fsm.Retry{}, []fsm.Attempt{fsm.AttemptOriginal, fsm.AttemptResend}, false},
		{"one attempt", fsm.Retry{Attempts: 1}, []fsm.Attempt{fsm.AttemptOriginal}, true},
		{"two attempts", fsm.Retry{Attempts: 2}, []fsm.Attempt{fsm.AttemptOriginal, fsm.AttemptResend}, false},
		{"three attempts", ccPolicy, []fsm.Attempt{fsm.AttemptOriginal, fsm.AttemptOriginal, fsm.AttemptResend}, false},
	}
	for _, c := range cases {
		// NewCall ignores the attempt it is given.
		call := fsm.NewCall(ccWith(ccGET, func(r *fsm.Request) { r.Attempt = fsm.AttemptResend }), &c.policy)
		for i, want := range c.attempts {
			next := call.Next()
			if next.Attempt != want || next.ResendOff != c.resendOff || next.Method != fsm.MethodGET {
				t.Errorf("%s: attempt %d: %v, want attempt=%v, resend off %v", c.name, i+1, next, want, c.resendOff)
			}
			call.Step(ccFail(fsm.RuleAcquireFailed))
		}
	}

	// A decided call does not move, whatever it is fed.
	for _, first := range []fsm.Outcome{ccStatus(200), ccFail(fsm.RuleCanceled)} {
		call := fsm.NewCall(ccGET, &ccPolicy)
		d := call.Step(first)
		before := call
		for _, o := range []fsm.Outcome{ccStatus(503), ccFail(fsm.RuleAcquireFailed), ccResend(fsm.RuleEvidenceHandedBack, ccBodyRead), ccStatus(425)} {
			if got := call.Step(o); got != d || call != before {
				t.Errorf("decided by %v, then fed %v: %v, call changed %v", d, o.Decision, got, call != before)
			}
		}
	}

	// The body is consumed for the attempts after one that read it, and
	// only a one-shot body is.
	for _, c := range []struct {
		body, want fsm.BodyKind
		read       bool
	}{
		{fsm.BodyOneShotUntouched, fsm.BodyOneShotConsumed, true},
		{fsm.BodyOneShotUntouched, fsm.BodyOneShotUntouched, false},
		{fsm.BodyBuffered, fsm.BodyBuffered, true},
	} {
		call := fsm.NewCall(fsm.Request{Method: fsm.MethodPUT, Body: c.body}, &ccPolicy)
		o := ccFail(fsm.RuleAcquireFailed)
		if c.read {
			o.Facts = fsm.FactAcquired | fsm.FactBodyRead
		} else {
			o.Facts = fsm.FactAcquired | fsm.FactWroteAny
		}
		call.Step(o)
		if got := call.Next().Body; got != c.want {
			t.Errorf("body %v, read %v: next attempt's body %v, want %v", c.body, c.read, got, c.want)
		}
	}
}

// TestCoverageCallBackoff: full jitter over min(Cap, Base·2^(n−1)) for
// the n-th retry, the cap reached without overflow, and no wait for a
// jitter outside [0, 1) or a ceiling of zero or below.
func TestCoverageCallBackoff(t *testing.T) {
	// delays feeds n failed dials to a call under p with jitter j and
	// returns the waits it asks for.
	delays := func(p fsm.Retry, n int, j float64) []time.Duration {
		call := fsm.NewCall(ccGET, &p)
		var out []time.Duration
		for range n {
			d := call.Step(ccFail(fsm.RuleAcquireFailed, ccJitter(j)))
			if d.Action != fsm.ActionResend || !d.Retry {
				t.Fatalf("%v: %v", p, d)
			}
			out = append(out, d.Delay)
		}
		return out
	}
	ms := time.Millisecond
	cases := []struct {
		name string
		p    fsm.Retry
		j    float64
		want []time.Duration
	}{
		{"doubling to the cap", fsm.Retry{Attempts: 6, Base: 100 * ms, Cap: 250 * ms}, 0.5, []time.Duration{50 * ms, 100 * ms, 125 * ms, 125 * ms, 125 * ms}},
		{"the whole ceiling, almost", fsm.Retry{Attempts: 3, Base: 100 * ms, Cap: time.Second}, 0.999, []time.Duration{99900 * time.Microsecond, 199800 * time.Microsecond}},
		// 150 is not above 301/2, so it doubles to 300, under the cap.
		{"half the cap, odd", fsm.Retry{Attempts: 3, Base: 150, Cap: 301}, 0.999, []time.Duration{149, 299}},
		{"a cap of exactly twice the base", fsm.Retry{Attempts: 4, Base: 150, Cap: 300}, 0.5, []time.Duration{75, 150, 150}},
		{"a base above the cap", fsm.Retry{Attempts: 3, Base: time.Second, Cap: 100 * ms}, 0.5, []time.Duration{50 * ms, 50 * ms}},
		{"jitter 0", fsm.Retry{Attempts: 2, Base: time.Second, Cap: time.Second}, 0, []time.Duration{0}},
		{"jitter 1 is out of range", fsm.Retry{Attempts: 2, Base: time.Second, Cap: time.Second}, 1, []time.Duration{0}},
		{"negative jitter", fsm.Retry{Attempts: 2, Base: time.Second, Cap: time.Second}, -0.5, []time.Duration{0}},
		{"no base", fsm.Retry{Attempts: 3, Cap: time.Second}, 0.5, []time.Duration{0, 0}},
		{"a negative base", fsm.Retry{Attempts: 3, Base: -time.Second, Cap: time.Second}, 0.5, []time.Duration{0, 0}},
		{"no cap", fsm.Retry{Attempts: 2, Base: time.Second}, 0.5, []time.Duration{0}},
	}
	for _, c := range cases {
		got := delays(c.p, len(c.want), c.j)
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Errorf("%s: waits %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	// The cap of a Duration: doubling stops at it without wrapping.
	huge := fsm.Retry{Attempts: 70, Base: time.Second, Cap: 1<<63 - 1}
	got := delays(huge, 69, 0.5)
	if want := time.Duration(0.5 * float64(time.Duration(1<<63-1))); got[68] != want || got[34] != want || got[33] >= want || got[33] != 2*got[32] {
		t.Errorf("waits near the cap of a Duration: %v", got[30:])
	}
}

// TestCoverageCallStatuses: the set holds 100 to 599 and nothing else.
func TestCoverageCallStatuses(t *testing.T) {
	in := []int{100, 163, 164, 227, 228, 425, 598, 599}
	s := fsm.Statuses(append([]int{-1, 0, 99, 600, 700}, in...)...)
	for c := 90; c <= 610; c++ {
		want := false
		for _, v := range in {
			want = want || v == c
		}
		if s.Has(c) != want {
			t.Errorf("Has(%d) = %v", c, s.Has(c))
		}
	}
	if got := s.String(); got != "100,163,164,227,228,425,598,599" {
		t.Errorf("String() = %q", got)
	}
	if got := fsm.Statuses(599).String(); got != "599" {
		t.Errorf("String() = %q", got)
	}
	if got := (fsm.StatusSet{}).String(); got != "none" {
		t.Errorf("String() = %q", got)
	}
	if fsm.Statuses(99, 600) != (fsm.StatusSet{}) {
		t.Error("codes outside 100-599 were added")
	}
}

// TestCoverageCallRetriesStatus: a call reports the statuses its policy
// lists, and none without a policy.
func TestCoverageCallRetriesStatus(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &ccPolicy)
	for code := 90; code <= 610; code++ {
		if got, want := c.RetriesStatus(code), ccPolicy.Statuses.Has(code); got != want {
			t.Errorf("RetriesStatus(%d) = %v, want %v", code, got, want)
		}
	}
	if !c.RetriesStatus(503) || c.RetriesStatus(500) {
		t.Errorf("RetriesStatus(503), RetriesStatus(500) = %v, %v; want true, false", c.RetriesStatus(503), c.RetriesStatus(500))
	}
	none := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &fsm.Retry{})
	if none.RetriesStatus(503) {
		t.Error("a call without a policy retries 503")
	}
	// A nil policy is the zero one: the same decisions, step by step.
	zero, nilPol := none, fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, nil)
	if nilPol.RetriesStatus(503) || nilPol.Next() != zero.Next() {
		t.Errorf("NewCall(nil) starts as %v, want %v", nilPol.Next(), zero.Next())
	}
	for _, o := range []fsm.Outcome{ccFail(fsm.RuleAmbiguousIdempotentResend), ccFail(fsm.RuleTimeout)} {
		if got, want := nilPol.Step(o), zero.Step(o); got != want {
			t.Errorf("NewCall(nil).Step(%v) = %v, want %v", o, got, want)
		}
	}
}

// TestCoverageCallStrings: the policy and decision printers, and On.
func TestCoverageCallStrings(t *testing.T) {
	if got := ccPolicy.String(); got != "retry attempts=3 statuses=429,503,504 base=100ms cap=250ms max-retry-after=2s" {
		t.Errorf("Retry.String() = %q", got)
	}
	if got := (fsm.Retry{}).String(); got != "retry attempts=0 statuses=none base=0s cap=0s max-retry-after=0s" {
		t.Errorf("Retry.String() = %q", got)
	}
	for d, want := range map[fsm.CallDecision]string{
		ccRetry(fsm.RuleRetryStatus, 1500*time.Millisecond): "resend retry-status retry after=1.5s",
		ccRetry(fsm.RuleTooEarly, 0):                        "resend too-early retry after=0s",
		ccAtOnce(fsm.RuleEvidenceRefusedStream):             "resend evidence-refused-stream",
		ccDeliver(fsm.RuleRetryAfterTooLong):                "deliver retry-after-too-long",
		{}:                                                  "continue none",
	} {
		if got := d.String(); got != want {
			t.Errorf("CallDecision.String() = %q, want %q", got, want)
		}
	}
	for n, want := range map[uint8]bool{0: false, 1: true, 2: true} {
		if got := (fsm.Retry{Attempts: n}).On(); got != want {
			t.Errorf("Retry{Attempts: %d}.On() = %v", n, got)
		}
	}
}

// TestCoverageCallRetryAfter: delay-seconds and the three HTTP-date forms
// (RFC 9110 §10.2.3, §5.6.7), at the edges of what a Duration holds.
func TestCoverageCallRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	longest := time.Duration(1<<63 - 1)
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"9", 9 * time.Second, true},
		{" 120\t", 2 * time.Minute, true},
		{"9223372036", 9223372036 * time.Second, true}, // the most whole seconds a Duration holds
		{"9223372037", longest, true},
		{"18446744073709551615", longest, true}, // too large for int64
		{"99999999999999999999999", longest, true},
		{"5x", 0, false},
		{"/5", 0, false}, // '/' is just below '0'
		{":5", 0, false}, // ':' is just above '9'
		{"-5", 0, false},
		{"+5", 0, false},
		{"", 0, false},
		{"   ", 0, false},
		{"Thu, 03 Dec 2026 08:00:30 GMT", 30 * time.Second, true},
		{"Thursday, 03-Dec-26 08:01:00 GMT", time.Minute, true},
		{"Thu Dec  3 08:00:05 2026", 5 * time.Second, true},
		{"Thu, 03 Dec 2026 08:00:00 GMT", 0, true},
		{"Wed, 02 Dec 2026 08:00:00 GMT", 0, true}, // in the past: no wait
		{"Thu, 03 Dec 2026 08:00:30 UTC", 0, false},
		{"tomorrow", 0, false},
	}
	for _, c := range cases {
		got, ok := fsm.ParseRetryAfter(c.v, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}
