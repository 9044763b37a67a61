package modeltest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec"
	"pgregory.net/rapid"
)

// The call model agrees with every expect line of the spec's call traces,
// and so does fsm.Call, with no divergence needed; the examples make the
// model decide by every call rule.
func TestCallModelAgreesWithSpecExamples(t *testing.T) {
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	calls, expects := 0, 0
	decided := map[fsm.Rule]bool{}
	for _, ex := range all {
		if !ex.IsCall() {
			continue
		}
		calls++
		if hedgedExample(ex) {
			expects += checkHedgedExample(t, ex, decided)
			continue
		}
		tr := CallTrace{Request: ex.Request, Policy: ex.Retry}
		c := fsm.NewCall(ex.Request, &ex.Retry)
		var last fsm.CallDecision
		for _, s := range ex.Calls {
			tr.Outcomes = append(tr.Outcomes, s.Outcome)
			last = DecideCall(tr, CallReading{})
			decided[last.Rule] = true
			c.Step(s.Outcome)
			if ids, _, err := CheckCall(tr, ObserveCall(&c), CallReading{}); err != nil || len(ids) > 0 {
				t.Errorf("%s line %d: fsm.Call %v, divergences %v", ex.File, s.Line, err, ids)
			}
			if s.Expect != nil {
				expects++
				if !s.Expect.Holds(last) {
					t.Errorf("%s line %d: the model says %v, the example %v", ex.File, s.Line, last, s.Expect)
				}
			}
		}
		if ex.Claim != fsm.RuleNone && (last.Rule == ex.Claim) != ex.Decides {
			t.Errorf("%s: example %q: the model's final decision is %v", ex.File, ex.Name, last)
		}
	}
	if calls == 0 {
		t.Fatal("no call traces in the spec")
	}
	for r := fsm.RuleTooEarly; r < fsm.RuleCount; r++ {
		if callRule(r) && !decided[r] {
			t.Errorf("no spec call example makes the model decide %s %v", r.ID(), r)
		}
	}
	t.Logf("%d call examples, %d expect lines agree with the model", calls, expects)
}

// TestCallMatchesModel runs the call property (call_property.go) fifty
// times with rapid.Check, each with its own seed (rerun a failure with
// -rapid.seed=N), and shows that the generator reaches every call rule.
func TestCallMatchesModel(t *testing.T) {
	stats := &callStats{diverged: map[string]int{}}
	rounds := 50
	if testing.Short() {
		rounds = 2
	}
	for range rounds {
		rapid.Check(t, func(t *rapid.T) { callProperty(t, stats) })
	}
	var reached []string
	for r := fsm.RuleTooEarly; r < fsm.RuleCount; r++ {
		if !callRule(r) {
			continue
		}
		if hedgeRule(r) {
			continue // TestHedgeMatchesModel reaches them
		}
		reached = append(reached, r.ID()+"="+strconv.Itoa(stats.rules[r]))
		if stats.rules[r] == 0 && !testing.Short() {
			t.Errorf("no call decided by %s %v", r.ID(), r)
		}
	}
	t.Logf("%d calls, %d outcomes fed, %d configured retries; call rules decided: %s; known divergences met: %v",
		stats.calls, stats.outcomes, stats.retries, strings.Join(reached, " "), stats.diverged)
}

// Each known call divergence must still reproduce: on its example fsm.Call
// does what its reading says and not what the text says. When this fails,
// fsm or the text was fixed: delete the entry from CallDivergences.
func TestCallDivergencesStillDiverge(t *testing.T) {
	for _, d := range CallDivergences {
		c := fsm.NewCall(d.Example.Request, &d.Example.Policy)
		for _, o := range d.Example.Outcomes {
			c.Step(o)
		}
		got := ObserveCall(&c)
		text, theirs := ModelCall(d.Example, CallReading{}), ModelCall(d.Example, d.Reading)
		if got == text {
			t.Errorf("%s no longer diverges (fsm: %s): delete it from CallDivergences", d.ID, describeCall(got))
		}
		if got != theirs {
			t.Errorf("%s: fsm %s, but the divergence's reading says %s", d.ID, describeCall(got), describeCall(theirs))
		}
		trace := FormatCallTrace(d.Example, &text.Decision)
		if n := len(d.Example.Outcomes); n > 8 {
			trace = "(" + strconv.Itoa(n) + " outcomes, the last: " + formatOutcome(d.Example.Outcomes[n-1]) + ")"
		}
		t.Logf("%s: %s\n  fsm:  %s\n  text: %s\n%s", d.ID, d.Summary, describeCall(got), describeCall(text), indent(trace))
	}
}

// A resend the attempt rules forbid (a read one-shot body, RS20 for a
// POST, the last attempt): fsm.Call refuses it by the text's rule.
func TestCallTrustsAnImpossibleResend(t *testing.T) {
	cases := []struct {
		name string
		tr   CallTrace
		want fsm.Rule // the text's
	}{
		{"one-shot body read", CallTrace{Request: fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched},
			Outcomes: []fsm.Outcome{{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream}, Facts: fsm.FactBodyRead, Budget: true}}},
			fsm.RuleEvidenceBodyConsumed},
		{"RS20 for a POST", CallTrace{Request: fsm.Request{Method: fsm.MethodPOST},
			Outcomes: []fsm.Outcome{{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend}, Budget: true}}},
			fsm.RuleAmbiguousNotIdempotent},
		{"resend on the last attempt", CallTrace{Request: fsm.Request{Method: fsm.MethodGET},
			Outcomes: []fsm.Outcome{resendUnsent, resendUnsent}},
			fsm.RuleNoSecondResend},
	}
	for _, tc := range cases {
		c := fsm.NewCall(tc.tr.Request, &tc.tr.Policy)
		var steps []CallStep
		for _, o := range tc.tr.Outcomes {
			facts := c.Next()
			steps = append(steps, CallStep{Facts: facts, Outcome: o, Decision: c.Step(o), Attempts: c.Attempts()})
		}
		text := DecideCall(tc.tr, CallReading{})
		if text.Action != fsm.ActionFail || text.Rule != tc.want {
			t.Errorf("%s: the model says %v, want fail %v", tc.name, text, tc.want)
		}
		ids, _, err := CheckCall(tc.tr, ObserveCall(&c), CallReading{})
		if err != nil || len(ids) != 0 || c.Decision() != text {
			t.Errorf("%s: fsm.Call %v, divergences %v %v; want the text's %v", tc.name, c.Decision(), ids, err, text)
		}
		t.Logf("%s: fsm.Call %v (invariants: %v); the text: %v", tc.name, c.Decision(), CallInvariants(tc.tr.Request, tc.tr.Policy, steps), text)
	}
}

// The backoff of the model: full jitter over min(Cap, Base·2^(k−2)), the
// automatic resend counted, saturating instead of wrapping.
func TestCallModelBackoff(t *testing.T) {
	p := fsm.Retry{Base: 100 * time.Millisecond, Cap: 300 * time.Millisecond}
	for _, c := range []struct {
		k    int
		j    float64
		want time.Duration
	}{
		{2, 0.5, 50 * time.Millisecond}, {3, 0.5, 100 * time.Millisecond}, {4, 0.5, 150 * time.Millisecond},
		{200, 0.5, 150 * time.Millisecond}, {3, 0, 0}, {3, 1, 0},
	} {
		if got := backoffBefore(p, c.k, c.j, CallReading{}); got != c.want {
			t.Errorf("before attempt %d, jitter %v: %v, want %v", c.k, c.j, got, c.want)
		}
	}
	huge := fsm.Retry{Base: time.Second, Cap: 1<<63 - 1}
	if got := backoffBefore(huge, 36, 0.5, CallReading{}); got != time.Duration(0.5*float64(huge.Cap)) {
		t.Errorf("a ceiling past int64: %v, want half the cap", got)
	}
}

// The call model must stay independent of fsm.Call: call_model.go may use
// fsm's data types and constants, never the call machine nor a helper
// method that encodes a rule.
func TestCallModelUsesOnlyFSMDataTypes(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "call_model.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != "time" && p != "github.com/replaysafe/replaysafe/fsm" {
			t.Errorf("call_model.go imports %s", p)
		}
	}
	banned := map[string]bool{"NewCall": true, "Call": true, "Step": true, "Next": true, "On": true, "Has": true,
		"Idempotent": true, "Reproducible": true, "Failure": true, "Final": true, "ParseMethod": true, "ParseRetryAfter": true}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && banned[sel.Sel.Name] {
			t.Errorf("%v: call_model.go uses %s", fset.Position(sel.Pos()), sel.Sel.Name)
		}
		return true
	})
}

// The call invariants are not vacuous: each rejects a call that breaks it.
func TestCallInvariantsRejectViolations(t *testing.T) {
	get, post := fsm.Request{Method: fsm.MethodGET}, fsm.Request{Method: fsm.MethodPOST}
	last := fsm.Request{Method: fsm.MethodGET, Attempt: fsm.AttemptResend}
	p3 := fsm.Retry{Attempts: 3, Cap: time.Second}
	timeout := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout}, Budget: true}
	ok503 := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: 503, Budget: true}
	tooEarly := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: 425, Budget: true}
	read := resendUnsent
	read.Facts = fsm.FactBodyRead
	retry := func(r fsm.Rule) fsm.CallDecision {
		return fsm.CallDecision{Action: fsm.ActionResend, Rule: r, Retry: true, Delay: time.Millisecond}
	}
	auto := fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceNothingWritten}
	failed := fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout}
	cases := []struct {
		name  string
		req   fsm.Request
		p     fsm.Retry
		steps []CallStep
		want  string
	}{
		{"fine", get, p3, []CallStep{{get, resendUnsent, auto, 1}, {get, timeout, retry(fsm.RuleRetryAmbiguous), 2}, {last, timeout, fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleRetryExhausted}, 3}}, ""},
		{"too many", get, fsm.Retry{}, []CallStep{{get, resendUnsent, auto, 1}, {last, timeout, retry(fsm.RuleRetryAmbiguous), 2}}, "the policy allows 2"},
		{"last attempt resendable", get, fsm.Retry{}, []CallStep{{get, resendUnsent, auto, 1}, {get, timeout, failed, 2}}, "let the attempt rules resend"},
		{"moved after the end", get, fsm.Retry{}, []CallStep{{get, timeout, failed, 1}, {get, resendUnsent, auto, 2}}, "had ended"},
		{"POST after a timeout", post, p3, []CallStep{{post, timeout, retry(fsm.RuleRetryAmbiguous), 1}}, "neither idempotent nor keyed"},
		{"POST after a 503", post, p3, []CallStep{{post, ok503, retry(fsm.RuleRetryStatus), 1}}, "neither idempotent nor keyed"},
		{"read one-shot", fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyOneShotUntouched}, p3, []CallStep{{get, read, auto, 1}}, "one-shot body was read"},
		{"two 425 retries", get, p3, []CallStep{{get, tooEarly, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleTooEarly, Retry: true}, 1}, {get, tooEarly, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleTooEarly, Retry: true}, 2}}, "second 425"},
		{"resend off", fsm.Request{Method: fsm.MethodGET, ResendOff: true}, p3, []CallStep{{get, ok503, retry(fsm.RuleRetryStatus), 1}}, "switched resending off"},
		{"automatic marked retry", get, p3, []CallStep{{get, resendUnsent, retry(fsm.RuleEvidenceNothingWritten), 1}}, "Retry is true"},
		{"retry not marked", get, p3, []CallStep{{get, timeout, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryAmbiguous}, 1}}, "Retry is false"},
		{"retry without a policy", get, fsm.Retry{}, []CallStep{{get, timeout, retry(fsm.RuleRetryAmbiguous), 1}}, "without a policy"},
		{"retry without budget", get, p3, []CallStep{{get, fsm.Outcome{Decision: timeout.Decision}, retry(fsm.RuleRetryAmbiguous), 1}}, "budget spent"},
		{"wait past the cap", get, p3, []CallStep{{get, timeout, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryAmbiguous, Retry: true, Delay: time.Hour}, 1}}, "longer than both"},
		{"final with a wait", get, p3, []CallStep{{get, timeout, fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout, Delay: 1}, 1}}, "final decision with"},
	}
	for _, c := range cases {
		err := CallInvariants(c.req, c.p, c.steps)
		wantErrorAbout(t, c.name, err, c.want)
	}
}

// TestFormerCallDivergences: fsm.Call and the model agree on every call
// on which fsm.Call once decided otherwise than the rule text.
func TestFormerCallDivergences(t *testing.T) {
	for name, tr := range formerCallDivergences {
		c := fsm.NewCall(tr.Request, &tr.Policy)
		for _, o := range tr.Outcomes {
			c.Step(o)
		}
		text := DecideCall(tr, CallReading{})
		ids, _, err := CheckCall(tr, ObserveCall(&c), CallReading{})
		if err != nil || len(ids) != 0 || c.Decision() != text {
			t.Errorf("%s: fsm.Call %v, the text %v (divergences %v, %v)", name, c.Decision(), text, ids, err)
		}
	}
}

// hedgedExample reports whether a call example hedges or has a hedging
// policy: the hedging model (DecideHedged) reads it.
func hedgedExample(ex spec.Example) bool {
	for _, s := range ex.Calls {
		if s.Hedge {
			return true
		}
	}
	return ex.Retry.Hedges > 0
}

// checkHedgedExample checks the hedging model and fsm.Call against a
// hedged example's expect lines and claim, noting the rules the model
// decided by; it returns the expect lines it checked.
func checkHedgedExample(t *testing.T, ex spec.Example, decided map[fsm.Rule]bool) int {
	t.Helper()
	tr := HedgeTrace{Request: ex.Request, Policy: ex.Retry}
	for _, s := range ex.Calls {
		tr.Steps = append(tr.Steps, HedgeStep{Hedge: s.Hedge, Budget: s.Outcome.Budget, Outcome: s.Outcome})
	}
	if err := CheckHedged(tr); err != nil {
		t.Errorf("%s line %d: %v", ex.File, ex.Line, err)
	}
	ds, _ := DecideHedged(tr)
	expects := 0
	for i, s := range ex.Calls {
		decided[ds[i].Rule] = true
		if s.Expect != nil {
			expects++
			if !s.Expect.Holds(ds[i]) {
				t.Errorf("%s line %d: the hedging model says %v, the example %v", ex.File, s.Line, ds[i], s.Expect)
			}
		}
	}
	if last := ds[len(ds)-1]; ex.Claim != fsm.RuleNone && (last.Rule == ex.Claim) != ex.Decides {
		t.Errorf("%s: example %q: the hedging model's final decision is %v", ex.File, ex.Name, last)
	}
	return expects
}

// hedgeRule reports the hedging rules, which only a hedged call decides.
func hedgeRule(r fsm.Rule) bool {
	return r == fsm.RuleHedge || r == fsm.RuleHedgeRefused || r == fsm.RuleHedgeCopyFailed
}

// TestHedgeMatchesModel runs the hedge property (call_hedge_property.go)
// fifty times with rapid.Check (rerun a failure with -rapid.seed=N) and
// shows that it reaches every hedging rule.
func TestHedgeMatchesModel(t *testing.T) {
	stats := &hedgeStats{}
	rounds := 50
	if testing.Short() {
		rounds = 2
	}
	for range rounds {
		rapid.Check(t, func(t *rapid.T) { hedgeProperty(t, stats) })
	}
	for _, r := range []fsm.Rule{fsm.RuleHedge, fsm.RuleHedgeRefused, fsm.RuleHedgeCopyFailed} {
		if stats.rules[r] == 0 {
			t.Errorf("no hedged call decided by %s %v", r.ID(), r)
		}
	}
	t.Logf("%d hedged calls; hedge %d, hedge-refused %d, hedge-copy-failed %d decisions", stats.calls,
		stats.rules[fsm.RuleHedge], stats.rules[fsm.RuleHedgeRefused], stats.rules[fsm.RuleHedgeCopyFailed])
}
