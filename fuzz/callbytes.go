package fuzz

import (
	"errors"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	modeltest "github.com/replaysafe/replaysafe/model_test"
)

// callStatuses are the statuses an outcome byte can name.
var callStatuses = [8]int{200, 201, 404, 425, 429, 502, 503, 504}

// DecodeCall reads a call trace from fuzz bytes: a request byte (method,
// key, body, resend off, retry policy), a policy byte (attempts, which
// statuses are listed), and three bytes an outcome (action and rule,
// status and Retry-After, body read, budget and jitter), at most 12
// outcomes. Missing bytes read as zero.
func DecodeCall(data []byte) modeltest.CallTrace {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	r, p := at(0), at(1)
	req := fsm.Request{
		Method:         []fsm.Method{fsm.MethodGET, fsm.MethodPOST, fsm.MethodPUT, fsm.MethodPATCH}[r&3],
		IdempotencyKey: r&4 != 0,
		Body:           fsm.BodyKind(r >> 3 & 3),
		ResendOff:      r&0x60 == 0x60, // each in one input of four
		RetryPolicy:    r&0xc0 == 0xc0,
	}
	var listed []int // bits 3 to 7 of the policy byte list 425 to 504
	for i := 3; i < len(callStatuses); i++ {
		if p>>i&1 != 0 {
			listed = append(listed, callStatuses[i])
		}
	}
	pol := fsm.Retry{Attempts: p & 7, Statuses: fsm.Statuses(listed...), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second}
	tr := modeltest.CallTrace{Request: req, Policy: pol}
	for i := 2; i+2 < len(data) && len(tr.Outcomes) < 12; i += 3 {
		a, b, c := data[i], data[i+1], data[i+2]
		o := fsm.Outcome{Budget: c&2 != 0, Jitter: float64(c>>2) / 64}
		if c&1 != 0 {
			o.Facts = fsm.FactBodyRead
		}
		rule := fsm.Rule(a>>2) % fsm.RuleCount
		switch a & 3 {
		case 0, 1:
			o.Decision = fsm.Decision{Action: fsm.ActionFail, Rule: rule, Conn: fsm.ConnDiscard}
		case 2:
			o.Decision = fsm.Decision{Action: fsm.ActionResend, Rule: rule, Conn: fsm.ConnDiscard}
		default:
			o.Decision = fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}
			o.Status = callStatuses[b&7]
			switch b >> 3 & 3 {
			case 1:
				o.RetryAfter, o.HasRetryAfter = time.Second, true
			case 2:
				o.RetryAfter, o.HasRetryAfter = time.Hour, true
			}
		}
		tr.Outcomes = append(tr.Outcomes, o)
	}
	return tr
}

// CheckCallBytes feeds the decoded call to fsm.Call, outcome by outcome
// while the attempt rules could have produced it for the facts the call
// gave the attempt, and checks it against the call model and the call
// invariants after every one.
func CheckCallBytes(data []byte) error {
	tr := DecodeCall(data)
	c := fsm.NewCall(tr.Request, &tr.Policy)
	var steps []modeltest.CallStep
	for i, o := range tr.Outcomes {
		facts := c.Next()
		if !modeltest.AttemptMayEnd(facts, o) {
			break
		}
		d := c.Step(o)
		steps = append(steps, modeltest.CallStep{Facts: facts, Outcome: o, Decision: d, Attempts: c.Attempts()})
		prefix := tr
		prefix.Outcomes = tr.Outcomes[:i+1]
		if ids, _, err := modeltest.CheckCall(prefix, modeltest.ObserveCall(&c), modeltest.CallReading{}); err != nil {
			return err
		} else if len(ids) > 0 {
			return errors.New("fsm.Call differs from the call rules by a known divergence")
		}
		if err := modeltest.CallInvariants(tr.Request, tr.Policy, steps); err != nil {
			return err
		}
		if !d.Action.Final() || d.Action != fsm.ActionResend {
			break
		}
	}
	return nil
}

// hedgedFailRules and hedgedResendRules are the attempt rules that end
// an attempt failing and resending: a hedged call's outcome byte names
// one of the action it has, as an attempt machine would.
var (
	hedgedFailRules = []fsm.Rule{fsm.RuleInvalidOrder, fsm.RuleAcquireFailed, fsm.RuleCanceled, fsm.RuleTimeout, fsm.RuleResponseStarted,
		fsm.RuleNoSecondResend, fsm.RuleResendOff, fsm.RuleRetryPolicy, fsm.RuleEvidenceBodyConsumed, fsm.RuleAmbiguousFreshConn,
		fsm.RuleAmbiguousNotIdempotent, fsm.RuleAmbiguousBodyNotReproducible, fsm.RuleLocalFailure, fsm.RuleEarlyDataUnsafe}
	hedgedResendRules = []fsm.Rule{fsm.RuleEvidenceHandedBack, fsm.RuleEvidenceRefusedStream, fsm.RuleEvidenceGoAwayBoundary,
		fsm.RuleEvidenceRequestRejected, fsm.RuleEvidenceNothingWritten, fsm.RuleAmbiguousIdempotentResend, fsm.RuleEarlyDataRejected}
)

// DecodeHedged reads a hedged call from fuzz bytes: the request byte of
// DecodeCall, a policy byte (attempts in bits 0–2, hedges in bits 3–4,
// keyed hedges in bit 5, 503 listed in bit 6), and two bytes a step, at
// most 16 steps. A step whose first byte has its low three bits set is the
// hedge delay passing, with the budget spent when bit 3 is set; any other
// is a copy's outcome (action in bits 0–1, a rule of that action above
// bit 3; a status in
// bits 0–2 of the second byte, the body read in bit 3, the budget in bit
// 4, the jitter in bits 5–7).
func DecodeHedged(data []byte) modeltest.HedgeTrace {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	r, p := at(0), at(1)
	tr := modeltest.HedgeTrace{
		Request: fsm.Request{
			Method:         []fsm.Method{fsm.MethodGET, fsm.MethodPOST, fsm.MethodPUT, fsm.MethodPATCH}[r&3],
			IdempotencyKey: r&4 != 0,
			Body:           fsm.BodyKind(r >> 3 & 3),
			ResendOff:      r&0x60 == 0x60,
			RetryPolicy:    r&0xc0 == 0xc0,
		},
		Policy: fsm.Retry{Attempts: p & 7, Hedges: p >> 3 & 3, HedgeKeyed: p&0x20 != 0, Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second},
	}
	if p&0x40 != 0 {
		tr.Policy.Statuses = fsm.Statuses(503)
	}
	for i := 2; i+1 < len(data) && len(tr.Steps) < 16; i += 2 {
		a, b := data[i], data[i+1]
		if a&7 == 7 {
			tr.Steps = append(tr.Steps, modeltest.HedgeStep{Hedge: true, Budget: a&8 == 0})
			continue
		}
		o := fsm.Outcome{Budget: b&16 != 0, Jitter: float64(b>>5) / 8}
		if b&8 != 0 {
			o.Facts = fsm.FactBodyRead
		}
		switch a & 3 {
		case 0, 1:
			o.Decision = fsm.Decision{Action: fsm.ActionFail, Rule: hedgedFailRules[int(a>>3)%len(hedgedFailRules)], Conn: fsm.ConnDiscard}
		case 2:
			o.Decision = fsm.Decision{Action: fsm.ActionResend, Rule: hedgedResendRules[int(a>>3)%len(hedgedResendRules)], Conn: fsm.ConnDiscard}
		default:
			o.Decision = fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}
			o.Status = callStatuses[b&7]
		}
		tr.Steps = append(tr.Steps, modeltest.HedgeStep{Outcome: o})
	}
	return tr
}

// CheckHedgedBytes checks the decoded hedged call against the hedging
// model and its invariants (modeltest.CheckHedged).
func CheckHedgedBytes(data []byte) error { return modeltest.CheckHedged(DecodeHedged(data)) }
