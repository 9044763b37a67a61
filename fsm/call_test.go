package fsm_test

import (
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

var policy = fsm.Retry{Attempts: 4, Statuses: fsm.Statuses(429, 502, 503, 504), Base: 100 * time.Millisecond, Cap: 300 * time.Millisecond, MaxRetryAfter: 10 * time.Second}

func deliverStatus(code int) fsm.Outcome {
	return fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: code, Budget: true, Jitter: 0.5}
}

func failWith(r fsm.Rule) fsm.Outcome {
	return fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: r, Conn: fsm.ConnDiscard}, Budget: true, Jitter: 0.5}
}

// TestBackoffDoublesUpToTheCap: the waits before attempts 2, 3 and 4 are
// half of 100ms, 200ms, and the 300ms cap.
func TestBackoffDoublesUpToTheCap(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &policy)
	var got []time.Duration
	for range 3 {
		d := c.Step(deliverStatus(503))
		if d.Action != fsm.ActionResend || !d.Retry || d.Rule != fsm.RuleRetryStatus {
			t.Fatalf("attempt %d: %v", c.Attempts(), d)
		}
		got = append(got, d.Delay)
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("wait before attempt %d = %v, want %v", i+2, got[i], want[i])
		}
	}
	if d := c.Step(deliverStatus(503)); d.Action != fsm.ActionDeliver || d.Rule != fsm.RuleRetryExhausted {
		t.Errorf("fourth 503: %v, want deliver by RS26", d)
	}
	if c.Attempts() != 4 {
		t.Errorf("attempts %d, want 4", c.Attempts())
	}
	// A decided call does not move.
	if d := c.Step(failWith(fsm.RuleTimeout)); d.Rule != fsm.RuleRetryExhausted || c.Attempts() != 4 {
		t.Errorf("after the end: %v, %d attempts", d, c.Attempts())
	}
}

func TestNextMarksTheLastAttempt(t *testing.T) {
	cases := []struct {
		name      string
		r         fsm.Retry
		attempts  []fsm.Attempt
		resendOff bool
	}{
		{"no policy: the second is the resend", fsm.Retry{}, []fsm.Attempt{fsm.AttemptOriginal, fsm.AttemptResend}, false},
		{"four attempts", policy, []fsm.Attempt{fsm.AttemptOriginal, fsm.AttemptOriginal, fsm.AttemptOriginal, fsm.AttemptResend}, false},
		{"one attempt switches resending off", fsm.Retry{Attempts: 1}, []fsm.Attempt{fsm.AttemptOriginal}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewCall(fsm.Request{Method: fsm.MethodGET, Attempt: fsm.AttemptResend}, &tc.r)
			for i, want := range tc.attempts {
				next := c.Next()
				if next.Attempt != want || next.ResendOff != tc.resendOff {
					t.Fatalf("attempt %d: %v, want attempt=%v resend off %v", i+1, next, want, tc.resendOff)
				}
				c.Step(fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream}, Budget: true})
			}
		})
	}
}

func TestOneShotBodyReadIsConsumed(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}, &policy)
	o := failWith(fsm.RuleAcquireFailed)
	if d := c.Step(o); d.Rule != fsm.RuleRetryAcquire {
		t.Fatalf("failed dial: %v", d)
	}
	if c.Next().Body != fsm.BodyOneShotUntouched {
		t.Fatalf("an unread body stays untouched: %v", c.Next())
	}
	// A resend of a body the attempt read is one no attempt machine
	// decides (RS11): it is refused, and the body is consumed.
	o = fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceNothingWritten}, Facts: fsm.FactBodyRead, Budget: true}
	if d := c.Step(o); d.Action != fsm.ActionFail || d.Rule != fsm.RuleEvidenceBodyConsumed {
		t.Fatalf("a resend of a read one-shot body: %v, want fail by RS11", d)
	}
	if c.Next().Body != fsm.BodyOneShotConsumed {
		t.Fatalf("a read one-shot body is consumed: %v", c.Next())
	}
}

// TestImpossibleResendsAreRefused: a resend the attempt rules cannot
// decide for the facts Next gave fails by the rule that refuses it.
func TestImpossibleResendsAreRefused(t *testing.T) {
	resend := func(r fsm.Rule) fsm.Outcome {
		return fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: r}, Budget: true}
	}
	cases := []struct {
		name string
		req  fsm.Request
		r    fsm.Retry
		o    []fsm.Outcome
		want fsm.Rule
	}{
		{"one attempt", fsm.Request{Method: fsm.MethodGET}, fsm.Retry{Attempts: 1}, []fsm.Outcome{resend(fsm.RuleEvidenceNothingWritten)}, fsm.RuleResendOff},
		{"the last attempt", fsm.Request{Method: fsm.MethodGET}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleEvidenceNothingWritten), resend(fsm.RuleEvidenceNothingWritten)}, fsm.RuleNoSecondResend},
		{"a caller's policy", fsm.Request{Method: fsm.MethodGET, RetryPolicy: true}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleEvidenceRefusedStream)}, fsm.RuleRetryPolicy},
		{"RS20 for a POST", fsm.Request{Method: fsm.MethodPOST}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleAmbiguousIdempotentResend)}, fsm.RuleAmbiguousNotIdempotent},
		{"RS20 for a one-shot PUT", fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleAmbiguousIdempotentResend)}, fsm.RuleAmbiguousBodyNotReproducible},
		{"not a resend rule", fsm.Request{Method: fsm.MethodGET}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleTimeout)}, fsm.RuleInvalidOrder},
		{"RS17 is no resend", fsm.Request{Method: fsm.MethodGET}, fsm.Retry{}, []fsm.Outcome{resend(fsm.RuleAmbiguousFreshConn)}, fsm.RuleInvalidOrder},
	}
	for _, tc := range cases {
		c := fsm.NewCall(tc.req, &tc.r)
		var d fsm.CallDecision
		for _, o := range tc.o {
			d = c.Step(o)
		}
		if d.Action != fsm.ActionFail || d.Rule != tc.want {
			t.Errorf("%s: %v, want fail by %v", tc.name, d, tc.want)
		}
	}
}

func TestBackoffSaturatesAtTheCap(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &fsm.Retry{Attempts: 40, Statuses: fsm.Statuses(503), Base: time.Second, Cap: 1<<63 - 1})
	var d fsm.CallDecision
	for range 35 {
		d = c.Step(deliverStatus(503))
	}
	if want := time.Duration(0.5 * float64(time.Duration(1<<63-1))); d.Delay != want {
		t.Fatalf("wait before attempt 36: %v, want half the cap %v", d.Delay, want)
	}
}

func TestCallRefusals(t *testing.T) {
	get := fsm.Request{Method: fsm.MethodGET}
	cases := []struct {
		name string
		req  fsm.Request
		r    fsm.Retry
		o    fsm.Outcome
		want fsm.CallDecision
	}{
		{"no policy: a 503 is delivered", get, fsm.Retry{}, deliverStatus(503), fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}},
		{"no policy: a timeout fails", get, fsm.Retry{}, failWith(fsm.RuleTimeout), fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout}},
		{"resend off: no 425 retry", fsm.Request{Method: fsm.MethodGET, ResendOff: true}, policy, deliverStatus(425), fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}},
		{"a caller's own policy: no retry", fsm.Request{Method: fsm.MethodGET, RetryPolicy: true}, policy, failWith(fsm.RuleAcquireFailed), fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleAcquireFailed}},
		{"RS18 stays final", fsm.Request{Method: fsm.MethodPOST}, policy, failWith(fsm.RuleAmbiguousNotIdempotent), fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent}},
		{"a one-shot GET after a cut response", fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyOneShotUntouched}, policy, failWith(fsm.RuleResponseStarted), fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleResponseStarted}},
		{"a keyed POST's 503 is retried", fsm.Request{Method: fsm.MethodPOST, IdempotencyKey: true, Body: fsm.BodyBuffered}, policy, deliverStatus(503), fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true, Delay: 50 * time.Millisecond}},
		{"Retry-After on 504 is ignored", get, policy, func() fsm.Outcome {
			o := deliverStatus(504)
			o.RetryAfter, o.HasRetryAfter = time.Hour, true
			return o
		}(), fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true, Delay: 50 * time.Millisecond}},
		{"Retry-After shorter than the backoff", get, policy, func() fsm.Outcome {
			o := deliverStatus(429)
			o.RetryAfter, o.HasRetryAfter = time.Millisecond, true
			return o
		}(), fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true, Delay: 50 * time.Millisecond}},
		{"no budget for a failure", get, policy, func() fsm.Outcome {
			o := failWith(fsm.RuleTimeout)
			o.Budget = false
			return o
		}(), fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleRetryBudget}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewCall(tc.req, &tc.r)
			if got := c.Step(tc.o); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if got := c.Decision(); got != tc.want {
				t.Errorf("Decision() = %v", got)
			}
		})
	}
}

func TestLaterEvidenceIsAConfiguredRetry(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodPOST}, &policy)
	refused := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream}, Jitter: 0.5}
	if d := c.Step(refused); d != (fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream}) {
		t.Fatalf("first refusal: %v, want the automatic resend", d)
	}
	if d := c.Step(refused); d != (fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleRetryBudget}) {
		t.Fatalf("second refusal without budget: %v", d)
	}
	c = fsm.NewCall(fsm.Request{Method: fsm.MethodPOST}, &policy)
	refused.Budget = true
	c.Step(refused)
	if d := c.Step(refused); d != (fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream, Retry: true, Delay: 100 * time.Millisecond}) {
		t.Fatalf("second refusal: %v, want a retry after the backoff", d)
	}
}

func TestZeroBackoff(t *testing.T) {
	c := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &fsm.Retry{Attempts: 3, Statuses: fsm.Statuses(503)})
	for range 2 {
		if d := c.Step(deliverStatus(503)); d.Delay != 0 || !d.Retry {
			t.Fatalf("no base, no cap: %v", d)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Thu, 03 Dec 2026 08:00:30 GMT", 30 * time.Second, true},
		{"Thursday, 03-Dec-26 08:01:00 GMT", time.Minute, true},
		{"Thu Dec  3 08:00:05 2026", 5 * time.Second, true},
		{"Wed, 02 Dec 2026 08:00:00 GMT", 0, true}, // in the past
		{"99999999999999999999", 1<<63 - 1, true},
		{"9300000000", 1<<63 - 1, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	}
	for _, tc := range cases {
		got, ok := fsm.ParseRetryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestStatusSet(t *testing.T) {
	s := fsm.Statuses(99, 100, 163, 164, 425, 599, 600)
	for _, c := range []int{100, 163, 164, 425, 599} {
		if !s.Has(c) {
			t.Errorf("missing %d", c)
		}
	}
	for _, c := range []int{99, 101, 600, -1} {
		if s.Has(c) {
			t.Errorf("has %d", c)
		}
	}
	if got := s.String(); got != "100,163,164,425,599" {
		t.Errorf("String() = %q", got)
	}
	if got := (fsm.StatusSet{}).String(); got != "none" {
		t.Errorf("empty String() = %q", got)
	}
}

func TestCallStrings(t *testing.T) {
	if got := policy.String(); got != "retry attempts=4 statuses=429,502,503,504 base=100ms cap=300ms max-retry-after=10s" {
		t.Errorf("Retry.String() = %q", got)
	}
	d := fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true, Delay: time.Second}
	if got := d.String(); got != "resend retry-status retry after=1s" {
		t.Errorf("CallDecision.String() = %q", got)
	}
	if !policy.On() || (fsm.Retry{}).On() {
		t.Error("On")
	}
}
