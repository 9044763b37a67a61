package modeltest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// CallDivergence is a known disagreement between fsm.Call and the call
// rule text. Example is a call on which fsm.Call decides as Reading says
// and not as the text says; TestCallDivergencesStillDiverge fails once
// fsm (or the text) is fixed, so that the entry gets deleted.
type CallDivergence struct {
	ID      string
	Summary string
	Reading CallReading
	Example CallTrace
}

var (
	getNone      = fsm.Request{Method: fsm.MethodGET}
	deliver503   = fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}, Status: 503, Budget: true, Jitter: 0.5}
	deliver425   = fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}, Status: 425, Budget: true, Jitter: 0.5}
	resendUnsent = fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceNothingWritten, Conn: fsm.ConnDiscard}, Budget: true}
)

// CallDivergences lists the known disagreements between fsm.Call and the
// text: none now. fsm.Call agreed with the text on the four found when the model was
// written (a one-attempt policy's rule, a second 425, a resend the attempt
// rules cannot decide, the backoff wrapping past int64) once fsm/call.go
// was fixed (formerCallDivergences keeps their examples as regression
// cases); the readings of CallReading stay to name such a point again.
var CallDivergences = []CallDivergence{}

// formerCallDivergences are the calls on which fsm.Call once decided
// otherwise than the text: now both must agree on each.
var formerCallDivergences = map[string]CallTrace{
	"a policy of one attempt names RS26": {Request: getNone, Policy: fsm.Retry{Attempts: 1, Statuses: fsm.Statuses(503), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second},
		Outcomes: []fsm.Outcome{deliver503}},
	"a second 425 is delivered": {Request: getNone, Policy: fsm.Retry{Attempts: 3, Statuses: fsm.Statuses(425), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second},
		Outcomes: []fsm.Outcome{deliver425, deliver425}},
	"a resend under one attempt fails by RS09": {Request: getNone, Policy: fsm.Retry{Attempts: 1}, Outcomes: []fsm.Outcome{resendUnsent}},
	"the backoff saturates at the cap": {Request: getNone, Policy: fsm.Retry{Attempts: 40, Statuses: fsm.Statuses(503), Base: time.Second, Cap: math.MaxInt64, MaxRetryAfter: 10 * time.Second},
		Outcomes: repeatOutcome(deliver503, 35)},
}

func repeatOutcome(o fsm.Outcome, n int) []fsm.Outcome {
	out := make([]fsm.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// callReading is one combination of call divergences, with their IDs.
type callReading struct {
	ids []string
	rd  CallReading
}

// callReadings is every combination of known call divergences, the
// text's own reading first and fewer divergences before more.
var callReadings = func() []callReading {
	n := len(CallDivergences)
	var out []callReading
	for size := 0; size <= n; size++ {
		for mask := 0; mask < 1<<n; mask++ {
			if bitCount(mask) != size {
				continue
			}
			var r callReading
			for i, d := range CallDivergences {
				if mask&(1<<i) != 0 {
					r.ids = append(r.ids, d.ID)
					r.rd = mergeCall(r.rd, d.Reading)
				}
			}
			out = append(out, r)
		}
	}
	return out
}()

func mergeCall(a, b CallReading) CallReading { return CallReading{} }

// coversCall reports whether reading a includes every divergence of b.
func coversCall(a, b CallReading) bool { return mergeCall(a, b) == a }

// CallObserved is what a comparison reads off a call machine after a
// step: its decision, its attempt count and its next attempt's facts.
type CallObserved struct {
	Decision fsm.CallDecision
	Attempts int
	Next     fsm.Request
}

// ObserveCall reads c.
func ObserveCall(c *fsm.Call) CallObserved {
	return CallObserved{Decision: c.Decision(), Attempts: c.Attempts(), Next: c.Next()}
}

// ModelCall is what the model says CallObserved should be after tr.
func ModelCall(tr CallTrace, rd CallReading) CallObserved {
	d, n := decideCall(tr, rd)
	return CallObserved{Decision: d, Attempts: n, Next: attemptFacts(tr.Request, tr.Policy, tr.Outcomes[:n])}
}

// CheckCall compares got, fsm.Call's state after tr, with the model: nil
// when fsm does what the text says, the IDs of the known divergences that
// explain a difference, or a *CallMismatch. Readings that do not include
// from are not tried.
func CheckCall(tr CallTrace, got CallObserved, from CallReading) ([]string, CallReading, error) {
	for _, r := range callReadings {
		if coversCall(r.rd, from) && ModelCall(tr, r.rd) == got {
			return r.ids, r.rd, nil
		}
	}
	return nil, from, &CallMismatch{Trace: cloneCall(tr), Got: got, Want: ModelCall(tr, CallReading{})}
}

// CallMismatch reports a call on which fsm.Call disagrees with the model
// and no known divergence explains it.
type CallMismatch struct {
	Trace     CallTrace
	Got, Want CallObserved
}

func (m *CallMismatch) Error() string {
	return fmt.Sprintf("fsm.Call and the call model disagree after %d outcomes:\n  fsm:   %s\n  model: %s\ntrace (the expect line is the model's):\n%s",
		len(m.Trace.Outcomes), describeCall(m.Got), describeCall(m.Want), indent(FormatCallTrace(m.Trace, &m.Want.Decision)))
}

func describeCall(o CallObserved) string {
	return fmt.Sprintf("%v, %d attempts, next %v", o.Decision, o.Attempts, o.Next)
}

func cloneCall(tr CallTrace) CallTrace {
	tr.Outcomes = append([]fsm.Outcome(nil), tr.Outcomes...)
	return tr
}

// FormatCallTrace prints tr as a call trace of package spec, ending with
// an expect line for want when want is not nil, so that a failing call
// can be pasted into spec/examples.
func FormatCallTrace(tr CallTrace, want *fsm.CallDecision) string {
	var b strings.Builder
	req := tr.Request.String()
	if tr.Request.Method == fsm.MethodUnknown {
		req = strings.Replace(req, " method=unknown", "", 1)
	}
	b.WriteString(req + "\n")
	if tr.Policy != (fsm.Retry{}) {
		b.WriteString(tr.Policy.String() + "\n")
	}
	for _, o := range tr.Outcomes {
		b.WriteString(formatOutcome(o) + "\n")
	}
	if want != nil {
		b.WriteString("expect " + want.String() + "\n")
	}
	return b.String()
}

func formatOutcome(o fsm.Outcome) string {
	s := "outcome " + o.Decision.Action.String() + " " + o.Decision.Rule.String()
	if o.Status != 0 {
		s += " status=" + strconv.Itoa(o.Status)
	}
	if o.HasRetryAfter {
		s += " retry-after=" + o.RetryAfter.String()
	}
	if o.Facts&fsm.FactBodyRead != 0 {
		s += " body-read"
	}
	if !o.Budget {
		s += " budget=off"
	}
	if o.Jitter != 0 {
		s += " jitter=" + strconv.FormatFloat(o.Jitter, 'g', -1, 64)
	}
	return s
}
