package modeltest

import (
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// TestHedgeExhaustive walks every hedged call over an alphabet of hedge
// steps (budget on and off) and copy outcomes, for every request of
// callRequests and hedging policies of one to four attempts and up to
// three hedges, keyed hedges on and off, and compares fsm.Call with the
// hedging model after every step (CheckHedged: the decision, the attempt
// count, HedgeInvariants on both). States are merged as in
// TestCallExhaustive: fsm.Call is comparable, and two calls that leave it
// and the model's reading (copies in flight, sent, hedges, body read, a
// 425, the decision) alike have the same futures. Every policy bounds the
// copies, so every call ends or refuses every hedge within
// hedgeDepth steps; a decided call is fed one step more of each letter,
// which must change nothing.
func TestHedgeExhaustive(t *testing.T) {
	depth := hedgeDepth
	if testing.Short() || raceEnabled {
		depth = 5
	}
	requireFullDepth(t, depth < hedgeDepth)
	var configs, states, edges, ruled int
	seenRule := map[fsm.Rule]int{}
	for _, p := range hedgePolicies() {
		for _, req := range callRequests() {
			configs++
			s, e, err := exploreHedged(req, p, depth, seenRule)
			states += s
			edges += e
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range []fsm.Rule{fsm.RuleHedge, fsm.RuleHedgeRefused, fsm.RuleHedgeCopyFailed, fsm.RuleRetryAmbiguous, fsm.RuleRetryExhausted, fsm.RuleDeliverFinalResponse} {
		if seenRule[r] == 0 {
			t.Errorf("the walk never decided by %s %s", r.ID(), r)
		}
		ruled += seenRule[r]
	}
	t.Logf("hedge exhaustive: %d request/policy combinations, %d letters, depth %d: %d distinct states, %d steps compared with the model; %d decisions by the hedging rules (%d hedges, %d refused, %d copies failed beside another)",
		configs, len(hedgeLetters), depth, states, edges, seenRule[fsm.RuleHedge]+seenRule[fsm.RuleHedgeRefused]+seenRule[fsm.RuleHedgeCopyFailed],
		seenRule[fsm.RuleHedge], seenRule[fsm.RuleHedgeRefused], seenRule[fsm.RuleHedgeCopyFailed])
}

// hedgeDepth is deep enough for the largest policy: four copies, each
// hedge refused once and each copy ending, and a configured retry after.
const hedgeDepth = 9

func hedgePolicies() []fsm.Retry {
	var out []fsm.Retry
	for _, n := range []uint8{0, 1, 2, 3, 4} {
		for _, h := range []uint8{0, 1, 2, 3} {
			for _, keyed := range []bool{false, true} {
				out = append(out, fsm.Retry{Attempts: n, Statuses: fsm.Statuses(503), Base: 100 * time.Millisecond, Cap: 300 * time.Millisecond,
					MaxRetryAfter: 10 * time.Second, Hedges: h, HedgeKeyed: keyed})
			}
		}
	}
	return out
}

// hedgeLetters: the hedge delay with and without budget; a copy
// delivering 200, 425 and a listed 503; failing by a timeout, a failed
// dial, a cancellation and RS08; resending on evidence and on an
// ambiguous failure; the failures once with the body read.
var hedgeLetters = func() []HedgeStep {
	out := []HedgeStep{{Hedge: true, Budget: true}, {Hedge: true}}
	for _, status := range []int{200, 425, 503} {
		out = append(out, HedgeStep{Outcome: fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}, Status: status, Budget: true}})
	}
	for _, r := range []fsm.Rule{fsm.RuleTimeout, fsm.RuleAcquireFailed, fsm.RuleCanceled, fsm.RuleNoSecondResend} {
		for _, read := range []fsm.Facts{0, fsm.FactBodyRead} {
			out = append(out, HedgeStep{Outcome: fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: r, Conn: fsm.ConnDiscard}, Facts: read, Budget: true, Jitter: 0.5}})
		}
	}
	for _, r := range []fsm.Rule{fsm.RuleEvidenceRefusedStream, fsm.RuleAmbiguousIdempotentResend} {
		out = append(out, HedgeStep{Outcome: fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: r, Conn: fsm.ConnDiscard}, Budget: true}})
	}
	return out
}()

type hedgeKey struct {
	c                       fsm.Call
	inFlight, hedges, ended int
	read, early             bool
	decision                fsm.CallDecision
}

// exploreHedged walks the calls of one request and policy breadth first,
// checking every step; it returns the states and steps it saw.
func exploreHedged(req fsm.Request, p fsm.Retry, depth int, seenRule map[fsm.Rule]int) (states, edges int, err error) {
	type node struct {
		c     fsm.Call
		steps []HedgeStep
	}
	seen := map[hedgeKey]bool{}
	frontier := []node{{c: fsm.NewCall(req, &p)}}
	for d := 0; d < depth && len(frontier) > 0; d++ {
		var next []node
		for _, n := range frontier {
			for _, l := range hedgeLetters {
				tr := HedgeTrace{Request: req, Policy: p, Steps: append(clone(n.steps), l)}
				edges++
				if err := CheckHedged(tr); err != nil {
					return states, edges, err
				}
				c := n.c
				var dec fsm.CallDecision
				if l.Hedge {
					dec = c.Hedge(l.Budget)
				} else {
					dec = c.Step(l.Outcome)
				}
				seenRule[dec.Rule]++
				s := modelState(tr)
				k := hedgeKey{c: c, inFlight: s.inFlight, hedges: s.hedges, ended: len(s.ended), read: bodyReadBy(s.ended), early: tooEarlyBefore(s.ended), decision: s.decision}
				if seen[k] {
					continue
				}
				seen[k] = true
				states++
				next = append(next, node{c: c, steps: tr.Steps}) // a decided call is fed each letter once more, then stops
				if s.over() && len(n.steps) > 0 && modelState(HedgeTrace{Request: req, Policy: p, Steps: n.steps}).over() {
					next = next[:len(next)-1]
				}
			}
		}
		frontier = next
	}
	return states, edges, nil
}

// modelState is the model's reading of tr after all its steps.
func modelState(tr HedgeTrace) hedgeState {
	s := hedgeState{inFlight: 1}
	for _, st := range tr.Steps {
		if !s.over() {
			s = hedgeStep(tr.Request, tr.Policy, s, st)
		}
	}
	return s
}

// TestHedgeExamples: the hedging model agrees with the spec examples'
// expectations too (spec checks fsm.Call against them).
func TestHedgeModelCases(t *testing.T) {
	get := fsm.Request{Method: fsm.MethodGET}
	p := fsm.Retry{Attempts: 3, Hedges: 1, Base: 100 * time.Millisecond, Cap: time.Second}
	timeout := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout}, Budget: true, Jitter: 0.5}
	ok := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: 200}
	tr := HedgeTrace{Request: get, Policy: p, Steps: []HedgeStep{{Hedge: true, Budget: true}, {Outcome: timeout}, {Outcome: timeout}, {Outcome: ok}}}
	ds, ns := DecideHedged(tr)
	want := []fsm.CallDecision{
		{Action: fsm.ActionResend, Rule: fsm.RuleHedge},
		{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed},
		{Action: fsm.ActionResend, Rule: fsm.RuleRetryAmbiguous, Retry: true, Delay: 100 * time.Millisecond},
		{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse},
	}
	wantN := []int{1, 1, 2, 3}
	for i := range want {
		if ds[i] != want[i] || ns[i] != wantN[i] {
			t.Errorf("step %d: model %v after %d attempts, want %v after %d", i+1, ds[i], ns[i], want[i], wantN[i])
		}
	}
	if err := CheckHedged(tr); err != nil {
		t.Error(err)
	}
	post := HedgeTrace{Request: fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}, Policy: p, Steps: []HedgeStep{{Hedge: true, Budget: true}}}
	if ds, _ := DecideHedged(post); ds[0].Rule != fsm.RuleHedgeRefused {
		t.Errorf("a POST without a key: %v", ds[0])
	}
}
