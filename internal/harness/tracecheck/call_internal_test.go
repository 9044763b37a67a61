package tracecheck

import (
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// TestCheckCall: every call decision the call rules forbid is caught, and
// the ones they allow pass.
func TestCheckCall(t *testing.T) {
	fail := fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout, Conn: fsm.ConnDiscard}
	deliver := fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}
	retry := func(r fsm.Rule) fsm.CallDecision {
		return fsm.CallDecision{Action: fsm.ActionResend, Rule: r, Retry: true}
	}
	get := fsm.Request{Method: fsm.MethodGET}
	cases := []struct {
		name  string
		facts fsm.Request
		d     fsm.Decision
		cd    fsm.CallDecision
		ok    bool
	}{
		{"a GET's timeout retried", get, fail, retry(fsm.RuleRetryAmbiguous), true},
		{"a POST's timeout retried", fsm.Request{Method: fsm.MethodPOST}, fail, retry(fsm.RuleRetryAmbiguous), false},
		{"a keyed POST's 503 retried", fsm.Request{Method: fsm.MethodPOST, IdempotencyKey: true}, deliver, retry(fsm.RuleRetryStatus), true},
		{"a one-shot PUT's 503 retried", fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}, deliver, retry(fsm.RuleRetryStatus), false},
		{"a consumed body sent again", fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotConsumed}, fail, retry(fsm.RuleRetryAcquire), false},
		{"a failure resent without a retry", get, fail, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleTimeout}, false},
		{"a delivered response failed", get, deliver, fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleRetryBudget}, false},
		{"a delivered response retried by its budget's refusal", get, deliver, fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleRetryBudget}, true},
	}
	for _, tc := range cases {
		err := checkCall(replaysafe.AttemptReport{Facts: tc.facts, Decision: tc.d, Call: tc.cd})
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
