package modeltest

import (
	"fmt"
	"strings"

	"github.com/replaysafe/replaysafe/fsm"
)

// This file is the reference model of the hedging rules (hedge,
// hedge-refused, hedge-copy-failed in spec/ruledata, and the docs of
// fsm.Call.Hedge and fsm.Retry.Hedges), written from their text. Like the
// call model it answers every question by scanning the steps again: how
// many copies are in flight, how many were sent, how many hedges. When a
// copy ends with no other in flight, the call rules decide on it as on the
// wire attempt whose number is the copies sent so far; decideAttempt (the
// call model) answers that, fed the ended copies' outcomes in the order
// they ended and a canceled outcome for each copy a winner ended.

// HedgeStep is one step of a hedged call: the hedge delay passing (Hedge,
// with Budget), or a copy's outcome.
type HedgeStep struct {
	Hedge   bool
	Budget  bool
	Outcome fsm.Outcome
}

// HedgeTrace is a call whose steps may include hedges.
type HedgeTrace struct {
	Request fsm.Request
	Policy  fsm.Retry
	Steps   []HedgeStep
}

// canceledCopy stands for a copy the winner's response ended: counted as
// sent, its own outcome never fed.
var canceledCopy = fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleCanceled, Conn: fsm.ConnDiscard}}

// hedgeState is what the model reads from the steps so far.
type hedgeState struct {
	ended    []fsm.Outcome // the copies decided, in order, the canceled ones as canceledCopy
	inFlight int           // copies on the wire: 1 while the call goes on
	hedges   int           // hedges sent
	decision fsm.CallDecision
}

// attempts is what fsm.Call.Attempts documents: the copies decided and
// the hedges in flight, that is every copy sent but the one the next
// Step decides.
func (s hedgeState) attempts() int { return len(s.ended) + max(s.inFlight-1, 0) }

func (s hedgeState) over() bool {
	return s.decision.Action == fsm.ActionDeliver || s.decision.Action == fsm.ActionFail
}

// DecideHedged returns the model's decision after each step of tr and the
// attempts counted after it.
func DecideHedged(tr HedgeTrace) ([]fsm.CallDecision, []int) {
	s := hedgeState{inFlight: 1}
	ds := make([]fsm.CallDecision, len(tr.Steps))
	ns := make([]int, len(tr.Steps))
	for i, st := range tr.Steps {
		if !s.over() {
			s = hedgeStep(tr.Request, tr.Policy, s, st)
		}
		ds[i], ns[i] = s.decision, s.attempts()
	}
	return ds, ns
}

func hedgeStep(req fsm.Request, p fsm.Retry, s hedgeState, st HedgeStep) hedgeState {
	s.ended = append([]fsm.Outcome(nil), s.ended...)
	if st.Hedge {
		sent := len(s.ended) + s.inFlight
		// "only where the ambiguous-failure rules would let the request
		// go twice": an idempotent method, or a key with keyed hedges; a
		// reproducible body; resending on, no retry policy of the
		// caller's own.
		copyHarmless := (idempotentMethod(req.Method) || req.IdempotencyKey && p.HedgeKeyed) &&
			reproducibleBody(req.Body) && !req.ResendOff && !req.RetryPolicy
		if p.Attempts > 0 && s.hedges < int(p.Hedges) && copyHarmless && sent+1 <= int(p.Attempts) && st.Budget {
			s.hedges++
			s.inFlight++
			s.decision = fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleHedge}
			return s
		}
		s.decision = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeRefused}
		return s
	}
	o := st.Outcome
	if s.inFlight > 1 {
		if o.Decision.Action != fsm.ActionDeliver {
			// Not the call's failure: it waits for the other copies.
			s.ended = append(s.ended, o)
			s.inFlight--
			s.decision = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed}
			return s
		}
		for range s.inFlight - 1 {
			s.ended = append(s.ended, canceledCopy) // the losers
		}
		s.inFlight = 1
	}
	s.ended = append(s.ended, o)
	s.decision = decideAttempt(req, p, s.ended, CallReading{})
	// The copy ended; a resend puts the next one on the wire.
	if s.decision.Action != fsm.ActionResend {
		s.inFlight = 0
	}
	return s
}

// HedgeInvariants checks the safety of a hedged call, whatever the
// details of the rules: decisions[i] and attempts[i] are what came of
// tr.Steps[i].
//
//   - The copies sent never pass the policy's Attempts (two without one);
//     the hedges never pass its Hedges.
//   - A hedge goes only for a request whose copies have no further side
//     effect (an idempotent method, or a key and HedgeKeyed), with a
//     reproducible body, resending on, no retry policy of the caller's
//     own, and budget.
//   - A copy that ends without a response while another is in flight
//     neither ends the call nor starts a copy.
//   - A decided call does not move.
func HedgeInvariants(tr HedgeTrace, decisions []fsm.CallDecision, attempts []int) error {
	most := mostAttempts(tr.Policy)
	req, p := tr.Request, tr.Policy
	inFlight, sent, hedges := 1, 1, 0
	end := -1
	for i, st := range tr.Steps {
		d := decisions[i]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("step %d (%s) decided %v: %s", i+1, formatHedgeStep(st), d, fmt.Sprintf(format, args...))
		}
		if end >= 0 {
			if d != decisions[end] || attempts[i] != attempts[end] {
				return bad("the call had ended with %v after %d attempts", decisions[end], attempts[end])
			}
			continue
		}
		switch {
		case st.Hedge && d.Action == fsm.ActionResend:
			if d.Rule != fsm.RuleHedge {
				return bad("a hedge decided a resend by another rule")
			}
			inFlight++
			sent++
			hedges++
			switch {
			case hedges > int(p.Hedges):
				return bad("hedge %d, the policy allows %d", hedges, p.Hedges)
			case !(idempotentMethod(req.Method) || req.IdempotencyKey && p.HedgeKeyed):
				return bad("a hedge of a request that is neither idempotent nor keyed with keyed hedges allowed")
			case !reproducibleBody(req.Body):
				return bad("a hedge of a body that cannot be produced again")
			case req.ResendOff || req.RetryPolicy:
				return bad("a hedge with resending off or a retry policy of the caller's own")
			case !st.Budget:
				return bad("a hedge with the route's budget spent")
			}
		case st.Hedge:
			if d.Action != fsm.ActionContinue {
				return bad("a refused hedge must leave the call going")
			}
		case inFlight > 1 && st.Outcome.Decision.Action != fsm.ActionDeliver:
			if d.Action != fsm.ActionContinue {
				return bad("a copy failed beside %d others in flight and the call did not wait for them", inFlight-1)
			}
			inFlight--
		default:
			inFlight = 1 // a winner ends the others
			switch d.Action {
			case fsm.ActionResend:
				sent++
			case fsm.ActionDeliver, fsm.ActionFail:
				end = i
			default:
				return bad("the last copy's outcome left the call with nothing in flight")
			}
		}
		if sent > most {
			return bad("copy %d sent, the policy allows %d", sent, most)
		}
	}
	return nil
}

// CheckHedged runs tr through fsm.Call (Hedge for a hedge step, Step for
// an outcome) and compares each decision and attempt count with the
// model, then checks HedgeInvariants on both.
func CheckHedged(tr HedgeTrace) error {
	c := fsm.NewCall(tr.Request, &tr.Policy)
	want, wantN := DecideHedged(tr)
	got := make([]fsm.CallDecision, len(tr.Steps))
	gotN := make([]int, len(tr.Steps))
	for i, st := range tr.Steps {
		if st.Hedge {
			got[i] = c.Hedge(st.Budget)
		} else {
			got[i] = c.Step(st.Outcome)
		}
		gotN[i] = c.Attempts()
		if got[i] != want[i] || gotN[i] != wantN[i] {
			return fmt.Errorf("step %d: fsm %v after %d attempts, model %v after %d\n%s", i+1, got[i], gotN[i], want[i], wantN[i], indent(FormatHedgeTrace(tr)))
		}
	}
	if err := HedgeInvariants(tr, want, wantN); err != nil {
		return fmt.Errorf("the model breaks a hedging invariant: %w\n%s", err, indent(FormatHedgeTrace(tr)))
	}
	if err := HedgeInvariants(tr, got, gotN); err != nil {
		return fmt.Errorf("fsm.Call breaks a hedging invariant: %w\n%s", err, indent(FormatHedgeTrace(tr)))
	}
	return nil
}

// FormatHedgeTrace prints tr in the call trace format of spec/examples.
func FormatHedgeTrace(tr HedgeTrace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n%v\n", tr.Request, tr.Policy)
	for _, st := range tr.Steps {
		b.WriteString(formatHedgeStep(st) + "\n")
	}
	return b.String()
}

func formatHedgeStep(st HedgeStep) string {
	switch {
	case st.Hedge && st.Budget:
		return "hedge"
	case st.Hedge:
		return "hedge budget=off"
	}
	return formatOutcome(st.Outcome)
}
