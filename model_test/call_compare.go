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
// text.
var CallDivergences = []CallDivergence{
	{
		ID: "CD1",
		Summary: "Under a policy of one attempt fsm.Call reads the ResendOff that its own Next sets for the attempt machine " +
			"as the caller's: a listed 503 of a GET is delivered by RS02 (and an acquire failure or a timeout fails by its own rule, " +
			"a long Retry-After is delivered by RS02), where RS26 (or RS28) says a configured retry would be allowed but the call " +
			"has made the policy's attempts. The action is the same; the rule is not.",
		Reading: CallReading{OneAttemptIsOff: true},
		Example: CallTrace{Request: getNone, Policy: fsm.Retry{Attempts: 1, Statuses: fsm.Statuses(503), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second},
			Outcomes: []fsm.Outcome{deliver503}},
	},
	{
		ID: "CD2",
		Summary: "RS22 says a second 425 is delivered; fsm.Call retries it by RS23 when the policy lists 425 " +
			"(the request idempotent or keyed, the body reproducible).",
		Reading: CallReading{TooEarlyByStatus: true},
		Example: CallTrace{Request: getNone, Policy: fsm.Retry{Attempts: 3, Statuses: fsm.Statuses(425), Base: 100 * time.Millisecond, Cap: time.Second, MaxRetryAfter: 10 * time.Second},
			Outcomes: []fsm.Outcome{deliver425, deliver425}},
	},
	{
		ID: "CD3",
		Summary: "fsm.Call follows an attempt's resend that the attempt rules cannot decide for the facts Next gave it: " +
			"under a policy of one attempt (Next: resend=off, RS09) a resend outcome becomes a second wire attempt; likewise " +
			"a resend on the last attempt, of a read one-shot body (RS11), or RS20 for a POST without a key (RS18). " +
			"The real attempt machine never decides these, so only a broken driver or adapter reaches them; the text " +
			"(RS08, RS09, RS11, RS18, RS03's \"a broken adapter never earns a resend\") forbids the copy.",
		Reading: CallReading{TrustsResend: true},
		Example: CallTrace{Request: getNone, Policy: fsm.Retry{Attempts: 1},
			Outcomes: []fsm.Outcome{resendUnsent}},
	},
	{
		ID: "CD4",
		Summary: "The backoff ceiling Base·2^(k−2) is doubled in time.Duration and wraps past int64 when Cap is larger than " +
			"half of the longest Duration (a \"no cap\" of math.MaxInt64): the wait before attempt 36 of a 1s-base policy is 0 " +
			"instead of the jittered cap.",
		Reading: CallReading{WrappingBackoff: true},
		Example: CallTrace{Request: getNone, Policy: fsm.Retry{Attempts: 40, Statuses: fsm.Statuses(503), Base: time.Second, Cap: math.MaxInt64, MaxRetryAfter: 10 * time.Second},
			Outcomes: repeatOutcome(deliver503, 35)},
	},
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

func mergeCall(a, b CallReading) CallReading {
	return CallReading{
		OneAttemptIsOff:  a.OneAttemptIsOff || b.OneAttemptIsOff,
		TooEarlyByStatus: a.TooEarlyByStatus || b.TooEarlyByStatus,
		TrustsResend:     a.TrustsResend || b.TrustsResend,
		WrappingBackoff:  a.WrappingBackoff || b.WrappingBackoff,
	}
}

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
