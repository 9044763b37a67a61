package driver

import (
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// TestHistoryKeepsEveryDecision: a call's History lists its decisions in
// order, those kept inline and those after them, up to maxHistory; a
// call that decided nothing has none.
func TestHistoryKeepsEveryDecision(t *testing.T) {
	pol := &Policy{Retry: fsm.Retry{Attempts: MaxAttempts, Statuses: fsm.Statuses(503)},
		Budget: Budget{Ratio: 1, MinPerSecond: 100, Window: time.Second}}
	c := &Call{t: &Transport{}, cm: fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &pol.Retry), pol: pol}
	tr := &try{call: c}
	if h := c.History(); h != nil {
		t.Fatalf("history before any attempt: %v", h)
	}
	o := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}, Status: 503}
	var want []fsm.CallDecision
	for n := 1; n <= maxHistory+2; n++ {
		d := tr.step(o)
		if n <= maxHistory {
			want = append(want, d)
		}
		if got := c.History(); !slices.Equal(got, want) {
			t.Fatalf("after %d decisions: history %v, want %v", n, got, want)
		}
	}
	if want[0].Rule != fsm.RuleRetryStatus || want[MaxAttempts-1].Rule != fsm.RuleRetryExhausted {
		t.Errorf("history %v: want retries of the 503 until the policy's attempts are spent", want)
	}
}
