package fsm_test

import (
	"fmt"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// A call under a policy of three attempts that retries 503: the first
// attempt's 503 is retried after a jittered wait, the second attempt's
// 200 is delivered. Each attempt's own machine (not shown) decides its
// Outcome; the call machine decides how the call goes on.
func ExampleNewCall() {
	policy := fsm.Retry{Attempts: 3, Statuses: fsm.Statuses(503), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 30 * time.Second}
	call := fsm.NewCall(fsm.Request{Method: fsm.MethodGET}, &policy) // the call keeps policy: many calls may share it

	delivered := fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}
	for _, status := range []int{503, 200} {
		facts := call.Next() // the facts to start this attempt's machine with
		d := call.Step(fsm.Outcome{Decision: delivered, Status: status, Budget: true, Jitter: 0.5})
		fmt.Printf("attempt %d (%v): %d -> %v\n", call.Attempts(), facts.Attempt, status, d)
	}
	// Output:
	// attempt 1 (original): 503 -> resend retry-status retry after=50ms
	// attempt 2 (original): 200 -> deliver deliver-final-response
}
