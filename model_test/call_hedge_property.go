package modeltest

import (
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"pgregory.net/rapid"
)

// HedgeProperty is the rapid property of the hedging rules: it draws
// request facts and a hedging policy (up to six attempts and four hedges,
// keyed hedges on or off), then up to twelve steps, each the hedge delay
// passing (budget on or off) or a copy's outcome (a delivered status, a
// failure or a resend by a rule of that action, the body read or not),
// and checks the hedged call against the hedging model and its
// invariants after them (CheckHedged). The tests run it with
// rapid.Check.
func HedgeProperty(t *rapid.T) { hedgeProperty(t, nil) }

// hedgeStats counts the decisions runs of the hedge property reached.
type hedgeStats struct {
	calls int
	rules [fsm.RuleCount]int
}

var (
	hedgeFailRules   = []fsm.Rule{fsm.RuleAcquireFailed, fsm.RuleCanceled, fsm.RuleTimeout, fsm.RuleResponseStarted, fsm.RuleNoSecondResend, fsm.RuleAmbiguousFreshConn, fsm.RuleLocalFailure}
	hedgeResendRules = []fsm.Rule{fsm.RuleEvidenceRefusedStream, fsm.RuleEvidenceNothingWritten, fsm.RuleAmbiguousIdempotentResend}
)

func hedgeProperty(t *rapid.T, stats *hedgeStats) {
	tr := HedgeTrace{
		Request: fsm.Request{
			Method:         rapid.SampledFrom([]fsm.Method{fsm.MethodGET, fsm.MethodPUT, fsm.MethodPOST, fsm.MethodPATCH}).Draw(t, "method"),
			IdempotencyKey: rapid.Bool().Draw(t, "key"),
			Body:           fsm.BodyKind(rapid.IntRange(0, int(fsm.BodyOneShotConsumed)).Draw(t, "body")),
			RetryPolicy:    rapid.IntRange(0, 7).Draw(t, "retryPolicy") == 0,
			ResendOff:      rapid.IntRange(0, 7).Draw(t, "resendOff") == 0,
		},
		Policy: fsm.Retry{
			Attempts:   uint8(rapid.IntRange(0, 6).Draw(t, "attempts")),
			Hedges:     uint8(rapid.IntRange(0, 4).Draw(t, "hedges")),
			HedgeKeyed: rapid.Bool().Draw(t, "keyed"),
			Base:       100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second,
		},
	}
	if rapid.Bool().Draw(t, "listed") {
		tr.Policy.Statuses = fsm.Statuses(503)
	}
	for range rapid.IntRange(1, 12).Draw(t, "steps") {
		var st HedgeStep
		o := fsm.Outcome{Budget: rapid.IntRange(0, 3).Draw(t, "budget") > 0, Jitter: rapid.Float64Range(0, 0.99).Draw(t, "jitter")}
		if rapid.Bool().Draw(t, "bodyRead") {
			o.Facts = fsm.FactBodyRead
		}
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0:
			st = HedgeStep{Hedge: true, Budget: o.Budget}
		case 1:
			o.Decision = fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}
			o.Status = rapid.SampledFrom([]int{200, 425, 503}).Draw(t, "status")
			st = HedgeStep{Outcome: o}
		case 2:
			o.Decision = fsm.Decision{Action: fsm.ActionFail, Rule: rapid.SampledFrom(hedgeFailRules).Draw(t, "failRule"), Conn: fsm.ConnDiscard}
			st = HedgeStep{Outcome: o}
		default:
			o.Decision = fsm.Decision{Action: fsm.ActionResend, Rule: rapid.SampledFrom(hedgeResendRules).Draw(t, "resendRule"), Conn: fsm.ConnDiscard}
			st = HedgeStep{Outcome: o}
		}
		tr.Steps = append(tr.Steps, st)
	}
	if err := CheckHedged(tr); err != nil {
		t.Fatal(err)
	}
	if stats != nil {
		stats.calls++
		ds, _ := DecideHedged(tr)
		for _, d := range ds {
			stats.rules[d.Rule]++
		}
	}
}
