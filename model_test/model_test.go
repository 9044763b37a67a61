package modeltest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec"
)

func traceOf(t spec.Trace) Trace {
	tr := Trace{Request: t.Request, Limits: t.Limits, Start: t.Start}
	for _, s := range t.Steps {
		tr.Events = append(tr.Events, s.Event)
	}
	return tr
}

// The model is checked against the spec's own examples first, without fsm:
// every expect line of every example, and every example's claim.
func TestModelAgreesWithSpecExamples(t *testing.T) {
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no spec examples")
	}
	expects := 0
	for _, ex := range all {
		if ex.IsCall() {
			continue // call traces: TestCallModelAgreesWithSpecExamples
		}
		tr := traceOf(ex.Trace)
		var last fsm.Decision
		for i, s := range ex.Steps {
			last = Decide(Trace{Request: tr.Request, Limits: tr.Limits, Start: tr.Start, Events: tr.Events[:i+1]}, Reading{}).Decision
			if s.Expect != nil {
				expects++
				if !s.Expect.Holds(last) {
					t.Errorf("%s line %d: model says %v, the example %v", ex.File, s.Line, last, s.Expect)
				}
			}
		}
		if ex.Claim != fsm.RuleNone && (last.Rule == ex.Claim) != ex.Decides {
			t.Errorf("%s: example %q: the model's final decision is %v", ex.File, ex.Name, last)
		}
	}
	t.Logf("%d examples, %d expect lines agree with the model", len(all), expects)
}

// Every rule is reachable in the model, so the exhaustive check below
// compares fsm with every branch of it.
func TestModelReachesEveryRule(t *testing.T) {
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[fsm.Rule]bool{}
	for _, ex := range all {
		if ex.IsCall() {
			continue
		}
		tr := traceOf(ex.Trace)
		for i := range tr.Events {
			seen[Decide(Trace{Request: tr.Request, Limits: tr.Limits, Events: tr.Events[:i+1]}, Reading{}).Decision.Rule] = true
		}
	}
	for r := fsm.Rule(1); r < fsm.RuleTooEarly; r++ { // the attempt rules; RS22 on: TestCallModelAgreesWithSpecExamples
		if !seen[r] {
			t.Errorf("no spec example makes the model decide %s %v", r.ID(), r)
		}
	}
}

// The model must stay independent of fsm's implementation: model.go may
// use fsm's data types and constants, never the machine, nor the helper
// methods that encode a rule (Idempotent, Reproducible, Failure, Final).
func TestModelUsesOnlyFSMDataTypes(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "model.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != "time" && p != "github.com/replaysafe/replaysafe/fsm" {
			t.Errorf("model.go imports %s", p)
		}
	}
	banned := map[string]bool{"New": true, "Machine": true, "Step": true,
		"Idempotent": true, "Reproducible": true, "Failure": true, "Final": true, "ParseMethod": true}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && banned[sel.Sel.Name] {
			t.Errorf("%v: model.go uses %s", fset.Position(sel.Pos()), sel.Sel.Name)
		}
		return true
	})
}

// Each known divergence must still reproduce: fsm does what its Reading
// says on the example and not what the text says. When this fails, fsm or
// the text was fixed: delete the entry from Divergences.
func TestDivergencesStillDiverge(t *testing.T) {
	for _, d := range Divergences {
		m := fsm.New(d.Example.Request, d.Example.Limits, d.Example.Start)
		for _, e := range d.Example.Events {
			m.Step(e)
		}
		got := Observed(&m)
		text, theirs := Decide(d.Example, Reading{}), Decide(d.Example, d.Reading)
		if got == text {
			t.Errorf("%s no longer diverges (fsm: %s): delete it from Divergences", d.ID, describe(got))
		}
		if got != theirs {
			t.Errorf("%s: fsm %s, but the divergence's reading says %s", d.ID, describe(got), describe(theirs))
		}
		t.Logf("%s: %s\n  fsm:  %s\n  text: %s\n%s", d.ID, d.Summary, describe(got), describe(text), indent(FormatTrace(d.Example, &text.Decision)))
	}
}

func TestCheckReportsAMismatchWithTheTrace(t *testing.T) {
	tr := Trace{
		Request: fsm.Request{Method: fsm.MethodGET},
		Events:  []fsm.Event{{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH1}, {Kind: fsm.EventClosed, At: 1}},
	}
	right := Decide(tr, Reading{})
	if right.Decision.Rule != fsm.RuleEvidenceNothingWritten {
		t.Fatalf("model: %v, want evidence-nothing-written", right.Decision)
	}
	if ids, err := Check(tr, right); err != nil || ids != nil {
		t.Fatalf("Check(the model's own outcome) = %v, %v", ids, err)
	}
	wrong := right
	wrong.Decision.Action = fsm.ActionFail
	_, err := Check(tr, wrong)
	var mm *Mismatch
	if !errors.As(err, &mm) {
		t.Fatalf("Check(wrong) = %v, want a *Mismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "@1ns closed") || !strings.Contains(msg, "expect resend evidence-nothing-written") {
		t.Errorf("the mismatch does not show the trace and the model's decision:\n%s", msg)
	}
	// A difference in the deadline alone is a mismatch too.
	late := right
	late.HasDeadline, late.Deadline = true, 5
	if _, err := Check(tr, late); err == nil {
		t.Error("Check ignores the deadline")
	}
}

// FormatTrace writes what spec.ParseTrace reads back, zero values included.
func TestFormatTraceParsesBack(t *testing.T) {
	want := Trace{
		Request: fsm.Request{Body: fsm.BodyOneShotUntouched, RetryPolicy: true, Attempt: fsm.AttemptResend},
		Limits:  fsm.Limits{Write: 3 * ms, Body: 7},
		Start:   4,
		Events: []fsm.Event{
			{Kind: fsm.EventConnAcquired, At: 5, Reused: true},
			{Kind: fsm.EventTimeout, At: 6},
			{Kind: fsm.EventH3GoAway, At: 7, Stream: 8, Boundary: 4, BoundaryKnown: true},
			{Kind: fsm.EventH2GoAway, At: 7, Stream: 3, Boundary: 1},
		},
	}
	dec := fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout, Conn: fsm.ConnDiscard}
	text := FormatTrace(want, &dec)
	got, err := spec.ParseTrace(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if g := traceOf(got); g.Request != want.Request || g.Limits != want.Limits || g.Start != want.Start || len(g.Events) != len(want.Events) {
		t.Fatalf("parsed %+v\nfrom\n%s", g, text)
	}
	for i, e := range traceOf(got).Events {
		if e != want.Events[i] {
			t.Errorf("event %d: parsed %+v, want %+v", i, e, want.Events[i])
		}
	}
	if x := got.Steps[len(got.Steps)-1].Expect; x == nil || !x.Holds(dec) {
		t.Errorf("expect line: %v", x)
	}
	if s := FormatTrace(Trace{Events: []fsm.Event{{Kind: 99}}}, nil); !strings.Contains(s, "not expressible") {
		t.Errorf("an event outside the vocabulary is not marked:\n%s", s)
	}
}

// The invariants are not vacuous: each one rejects a decision sequence
// that breaks it.
func TestInvariantsRejectViolations(t *testing.T) {
	acquired := fsm.Event{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH2}
	progress := fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}
	resend := fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend, Conn: fsm.ConnDiscard}
	fail := fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout, Conn: fsm.ConnDiscard}
	get := fsm.Request{Method: fsm.MethodGET}
	post := fsm.Request{Method: fsm.MethodPOST}
	wrote := fsm.Event{Kind: fsm.EventFirstByteWritten}
	closed := fsm.Event{Kind: fsm.EventClosed}
	cases := []struct {
		name      string
		req       fsm.Request
		events    []fsm.Event
		decisions []fsm.Decision
		want      string // "" when the sequence is fine
	}{
		{"fine", get, []fsm.Event{acquired, wrote, closed}, []fsm.Decision{progress, progress, resend}, ""},
		{"resend of a resend", get.Resend(), []fsm.Event{acquired, wrote, closed}, []fsm.Decision{progress, progress, resend}, "already the automatic resend"},
		{"resend off", fsm.Request{Method: fsm.MethodGET, ResendOff: true}, []fsm.Event{acquired, closed}, []fsm.Decision{progress, resend}, "switched off"},
		{"retry policy", fsm.Request{Method: fsm.MethodGET, RetryPolicy: true}, []fsm.Event{acquired, closed}, []fsm.Decision{progress, resend}, "retry policy"},
		{"after a response byte", get, []fsm.Event{acquired, {Kind: fsm.EventInformational}, closed}, []fsm.Decision{progress, progress, resend}, "response byte"},
		{"after a timeout", get, []fsm.Event{acquired, {Kind: fsm.EventTimeout}}, []fsm.Decision{progress, resend}, "timed out"},
		{"at a tick", get, []fsm.Event{acquired, {Kind: fsm.EventTick}}, []fsm.Decision{progress, resend}, "timed out"},
		{"after a cancellation", get, []fsm.Event{acquired, {Kind: fsm.EventCanceled}}, []fsm.Decision{progress, resend}, "canceled"},
		{"consumed body", fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyOneShotConsumed}, []fsm.Event{acquired, closed}, []fsm.Decision{progress, resend}, "consumed"},
		{"read one-shot body", fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyOneShotUntouched}, []fsm.Event{acquired, {Kind: fsm.EventBodyRead}, closed}, []fsm.Decision{progress, progress, resend}, "consumed"},
		{"POST without evidence", post, []fsm.Event{acquired, wrote, closed}, []fsm.Decision{progress, progress, resend}, "not idempotent"},
		{"POST at the GOAWAY boundary", post, []fsm.Event{acquired, wrote, {Kind: fsm.EventH2GoAway, Stream: 5, Boundary: 5}}, []fsm.Decision{progress, progress, resend}, "not idempotent"},
		{"POST refused", post, []fsm.Event{acquired, wrote, {Kind: fsm.EventRefusedStream}}, []fsm.Decision{progress, progress, resend}, ""},
		{"POST above the h3 GOAWAY", post, []fsm.Event{acquired, wrote, {Kind: fsm.EventH3GoAway, Stream: 8, Boundary: 8, BoundaryKnown: true}}, []fsm.Decision{progress, progress, resend}, ""},
		{"POST nothing written", post, []fsm.Event{acquired, closed}, []fsm.Decision{progress, resend}, ""},
		{"POST nothing written, GOAWAY", post, []fsm.Event{acquired, {Kind: fsm.EventH2GoAway, Stream: 1, Boundary: 1}}, []fsm.Decision{progress, resend}, ""},
		{"final changes", get, []fsm.Event{acquired, closed, closed}, []fsm.Decision{progress, fail, resend}, "changed"},
		{"verdict moves twice", get, []fsm.Event{acquired, closed, closed}, []fsm.Decision{progress, fail, {Action: fsm.ActionFail, Rule: fsm.RuleTimeout, Conn: fsm.ConnReuse}}, "verdict moved"},
		{"verdict before final", get, []fsm.Event{acquired}, []fsm.Decision{{Conn: fsm.ConnDiscard}}, "before the decision is final"},
		{"lengths", get, []fsm.Event{acquired}, nil, "decisions"},
	}
	for _, c := range cases {
		err := Invariants(c.req, c.events, c.decisions)
		wantErrorAbout(t, c.name, err, c.want)
	}
}

// Run replays a trace through fsm, checks it against the model at every
// step and names the divergences it met.
func TestRunNamesDivergences(t *testing.T) {
	for _, d := range Divergences {
		_, ids, err := Run(d.Example)
		if err != nil {
			t.Fatalf("%s: %v", d.ID, err)
		}
		if len(ids) != 1 || ids[0] != d.ID {
			t.Errorf("%s: Run names %v", d.ID, ids)
		}
	}
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range all {
		if _, ids, err := Run(traceOf(ex.Trace)); err != nil || len(ids) != 0 {
			t.Errorf("%s %s: %v %v", ex.File, ex.Name, ids, err)
		}
	}
}

// wantErrorAbout checks that err is nil when want is empty, else an error
// whose text contains want.
func wantErrorAbout(t *testing.T, name string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", name, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: got %v, want an error about %q", name, err, want)
	}
}
