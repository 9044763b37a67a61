package fsm_test

// Table tests of the hedging rules (hedge, hedge-refused,
// hedge-copy-failed): every condition of Call.Hedge both ways, every
// boundary of the counts on both sides, and how Step treats the copies of
// a hedged call. Their names start with TestCoverage so that the coverage
// run of docs/mutation.md counts them.

import (
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
)

var (
	hedgeOn      = fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleHedge}
	hedgeRefused = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeRefused}
	copyFailed   = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed}
)

// hedgePolicy is ccPolicy with n hedges.
func hedgePolicy(n uint8, keyed bool) fsm.Retry {
	p := ccPolicy
	p.Hedges, p.HedgeKeyed = n, keyed
	return p
}

func TestCoverageCallHedgeEligibility(t *testing.T) {
	get := fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyNone}
	post := fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}
	keyed := post
	keyed.IdempotencyKey = true
	for _, c := range []struct {
		name   string
		req    fsm.Request
		p      fsm.Retry
		budget bool
		want   fsm.CallDecision
	}{
		{"GET hedged", get, hedgePolicy(1, false), true, hedgeOn},
		{"PUT with a buffered body hedged", fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyBuffered}, hedgePolicy(1, false), true, hedgeOn},
		{"no hedges configured", get, hedgePolicy(0, false), true, hedgeRefused},
		{"hedges without attempts", get, fsm.Retry{Hedges: 1}, true, hedgeRefused},
		{"budget spent", get, hedgePolicy(1, false), false, hedgeRefused},
		{"POST without a key", post, hedgePolicy(1, true), true, hedgeRefused},
		{"keyed POST without keyed hedges", keyed, hedgePolicy(1, false), true, hedgeRefused},
		{"keyed POST with keyed hedges", keyed, hedgePolicy(1, true), true, hedgeOn},
		{"one-shot body", fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}, hedgePolicy(1, false), true, hedgeRefused},
		{"resend off", ccWith(get, func(r *fsm.Request) { r.ResendOff = true }), hedgePolicy(1, false), true, hedgeRefused},
		{"caller's retry policy", ccWith(get, func(r *fsm.Request) { r.RetryPolicy = true }), hedgePolicy(1, false), true, hedgeRefused},
		{"one attempt", get, fsm.Retry{Attempts: 1, Hedges: 1}, true, hedgeRefused},
		{"two attempts", get, fsm.Retry{Attempts: 2, Hedges: 1}, true, hedgeOn},
	} {
		call := fsm.NewCall(c.req, &c.p)
		if got := call.Hedge(c.budget); got != c.want {
			t.Errorf("%s: Hedge decided %v, want %v", c.name, got, c.want)
		}
		wantAttempts := 0
		if c.want == hedgeOn {
			wantAttempts = 1
		}
		if call.Attempts() != wantAttempts || call.Decision() != c.want {
			t.Errorf("%s: after Hedge %d attempts, decision %v; want %d and %v", c.name, call.Attempts(), call.Decision(), wantAttempts, c.want)
		}
	}
}

// TestCoverageCallHedgeCounts: the hedges a policy allows and the attempts
// bound the copies, the copy in flight counted, and a hedge's facts mark
// the last attempt the policy allows.
func TestCoverageCallHedgeCounts(t *testing.T) {
	get := fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyNone}
	for _, c := range []struct {
		attempts, hedges uint8
		want             int // hedges sent before the first refusal
	}{
		{2, 1, 1}, {2, 3, 1}, {3, 1, 1}, {3, 2, 2}, {3, 5, 2}, {5, 3, 3}, {5, 4, 4}, {5, 9, 4},
	} {
		p := fsm.Retry{Attempts: c.attempts, Hedges: c.hedges}
		call := fsm.NewCall(get, &p)
		sent := 0
		for range 10 {
			d := call.Hedge(true)
			if d != hedgeOn {
				if d != hedgeRefused {
					t.Errorf("attempts %d hedges %d: refused with %v", c.attempts, c.hedges, d)
				}
				break
			}
			sent++
			next := call.Next()
			if last := sent+1 == int(c.attempts); (next.Attempt == fsm.AttemptResend) != last {
				t.Errorf("attempts %d hedges %d: copy %d has attempt %v", c.attempts, c.hedges, sent+1, next.Attempt)
			}
		}
		if sent != c.want || call.Attempts() != c.want {
			t.Errorf("attempts %d hedges %d: %d hedges sent, %d attempts counted, want %d", c.attempts, c.hedges, sent, call.Attempts(), c.want)
		}
	}
}

// TestCoverageCallHedgeSteps: Step on the copies of a hedged call.
func TestCoverageCallHedgeSteps(t *testing.T) {
	get := fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyBuffered}
	type step struct {
		hedge    bool
		o        fsm.Outcome
		want     fsm.CallDecision
		attempts int
	}
	h := func(want fsm.CallDecision, attempts int) step {
		return step{hedge: true, want: want, attempts: attempts}
	}
	s := func(o fsm.Outcome, want fsm.CallDecision, attempts int) step {
		return step{o: o, want: want, attempts: attempts}
	}
	for _, c := range []struct {
		name  string
		p     fsm.Retry
		steps []step
	}{
		{"the hedge wins; the original is counted", hedgePolicy(1, false), []step{
			h(hedgeOn, 1), s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 2),
			h(ccDeliver(fsm.RuleDeliverFinalResponse), 2), s(ccFail(fsm.RuleCanceled), ccDeliver(fsm.RuleDeliverFinalResponse), 2)}},
		{"two hedges, the second wins: three copies", hedgePolicy(2, false), []step{
			h(hedgeOn, 1), h(hedgeOn, 2), h(hedgeRefused, 2), s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 3)}},
		{"a copy fails, the other delivers", hedgePolicy(1, false), []step{
			h(hedgeOn, 1), s(ccResend(fsm.RuleEvidenceRefusedStream), copyFailed, 1), s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 2)}},
		{"both fail: a configured retry, the third attempt", hedgePolicy(1, false), []step{
			h(hedgeOn, 1), s(ccFail(fsm.RuleTimeout), copyFailed, 1), s(ccFail(fsm.RuleTimeout), ccRetry(fsm.RuleRetryAmbiguous, 100_000_000), 2),
			s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 3)}},
		{"both fail under two attempts: exhausted", fsm.Retry{Attempts: 2, Hedges: 1, Base: 1, Cap: 1}, []step{
			h(hedgeOn, 1), s(ccFail(fsm.RuleTimeout), copyFailed, 1), s(ccFail(fsm.RuleNoSecondResend), ccFailed(fsm.RuleRetryExhausted), 2)}},
		{"the last copy's resend is a configured retry", hedgePolicy(1, false), []step{
			h(hedgeOn, 1), s(ccFail(fsm.RuleTimeout), copyFailed, 1), s(ccResend(fsm.RuleEvidenceRefusedStream), ccRetry(fsm.RuleEvidenceRefusedStream, 100_000_000), 2)}},
		{"a winner's listed status is retried once the copies are counted", hedgePolicy(1, false), []step{
			h(hedgeOn, 1), s(ccStatus(503), ccFailedOrRetry(), 2)}},
		{"a hedge after a copy failed: the third copy, then none", hedgePolicy(2, false), []step{
			h(hedgeOn, 1), s(ccFail(fsm.RuleTimeout), copyFailed, 1), h(hedgeOn, 2), h(hedgeRefused, 2),
			s(ccFail(fsm.RuleTimeout), copyFailed, 2), s(ccFail(fsm.RuleNoSecondResend), ccFailed(fsm.RuleRetryExhausted), 3)}},
		{"a copy fails, a second hedge delivers: the failed copy, the canceled one and the winner", hedgePolicy(2, false), []step{
			h(hedgeOn, 1), s(ccFail(fsm.RuleTimeout), copyFailed, 1), h(hedgeOn, 2), s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 3)}},
		{"a hedge after delivery changes nothing", hedgePolicy(1, false), []step{
			s(ccStatus(200), ccDeliver(fsm.RuleDeliverFinalResponse), 1), h(ccDeliver(fsm.RuleDeliverFinalResponse), 1)}},
		{"a refused hedge leaves the copy's own decision", hedgePolicy(0, false), []step{
			h(hedgeRefused, 0), s(ccResend(fsm.RuleEvidenceRefusedStream), ccAtOnce(fsm.RuleEvidenceRefusedStream), 1)}},
	} {
		call := fsm.NewCall(get, &c.p)
		for i, st := range c.steps {
			var got fsm.CallDecision
			if st.hedge {
				got = call.Hedge(true)
			} else {
				got = call.Step(st.o)
			}
			if got != st.want || call.Attempts() != st.attempts {
				t.Errorf("%s: step %d decided %v after %d attempts, want %v after %d", c.name, i+1, got, call.Attempts(), st.want, st.attempts)
			}
		}
	}
}

// ccFailedOrRetry is the decision on a 503 after two copies under
// ccPolicy: a configured retry whose backoff is that of attempt 3.
func ccFailedOrRetry() fsm.CallDecision { return ccRetry(fsm.RuleRetryStatus, 100_000_000) }

// TestCoverageCallHedgeBodyRead: a copy that failed after reading a
// buffered body leaves the body reproducible, and the call marks it read.
func TestCoverageCallHedgeBodyRead(t *testing.T) {
	p := hedgePolicy(1, false)
	call := fsm.NewCall(fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyBuffered}, &p)
	call.Hedge(true)
	if d := call.Step(ccFail(fsm.RuleTimeout, ccBodyRead)); d != copyFailed {
		t.Fatalf("the failed copy: %v", d)
	}
	if next := call.Next(); next.Body != fsm.BodyBuffered {
		t.Errorf("a buffered body is %v after a copy read it", next.Body)
	}
}

// TestCoverageCallHedgeString: a policy with hedges prints them; one
// without prints as before.
func TestCoverageCallHedgeString(t *testing.T) {
	p := fsm.Retry{Attempts: 3}
	if s := p.String(); s != "retry attempts=3 statuses=none base=0s cap=0s max-retry-after=0s" {
		t.Errorf("no hedges: %q", s)
	}
	p.Hedges, p.HedgeKeyed = 2, true
	if s := p.String(); s != "retry attempts=3 statuses=none base=0s cap=0s max-retry-after=0s hedges=2 hedge-keyed=on" {
		t.Errorf("hedges: %q", s)
	}
	if s := hedgeOn.String(); s != "resend hedge" {
		t.Errorf("a hedge prints %q", s)
	}
}

var callSink fsm.CallDecision

// BenchmarkCallHedge measures a hedged call's decisions: a hedge, the
// losing copy's failure beside the other, and the winner's delivery
// (three decisions, ns/decision).
func BenchmarkCallHedge(b *testing.B) {
	req := fsm.Request{Method: fsm.MethodGET}
	p := hedgePolicy(1, false)
	failed, ok := ccFail(fsm.RuleTimeout), ccStatus(200)
	b.ReportAllocs()
	for b.Loop() {
		c := fsm.NewCall(req, &p)
		callSink = c.Hedge(true)
		callSink = c.Step(failed)
		callSink = c.Step(ok)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3), "ns/decision")
}
