package fuzz

import (
	"fmt"
	"strings"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec"
)

// RoundTripIssue is a known way in which printing a parsed trace with
// Request.String and Event.String does not parse back to the same trace.
// KnownRoundTripIssues lists them; CheckTraceText tolerates exactly these,
// and TestRoundTripIssuesStillReproduce fails once one is fixed.
type RoundTripIssue struct {
	ID      string
	Summary string
	// Affects reports whether a parsed trace holds the value at issue.
	Affects func(spec.Trace) bool
	// Example is trace text that shows the issue.
	Example string
}

// KnownRoundTripIssues are the round-trip failures found so far.
// R1 (method=unknown), R2 (conn-acquired unknown) and R3 (phase=none) were
// fixed in fsm's String methods; the list is empty until the fuzzer finds
// another.
var KnownRoundTripIssues = []RoundTripIssue{}

// CheckTraceText parses text with spec.ParseTraces (which must never
// panic; an error is a fine answer), prints every trace back with
// Request.String, Event.String and Expect.String, parses the print, and
// checks that it is the same traces. It returns the known round-trip
// issues the input ran into (the print is then checked again with the
// values at issue spelled the way the parser reads them) or an error.
func CheckTraceText(text string) ([]string, error) {
	traces, err := spec.ParseTraces(strings.NewReader(text))
	if err != nil {
		return nil, nil
	}
	if err := roundTrip(traces, false); err == nil {
		return nil, nil
	}
	var known []string
	for _, issue := range KnownRoundTripIssues {
		for _, t := range traces {
			if issue.Affects(t) {
				known = append(known, issue.ID)
				break
			}
		}
	}
	if len(known) == 0 {
		return nil, roundTrip(traces, false)
	}
	return known, roundTrip(traces, true)
}

func roundTrip(traces []spec.Trace, spellZeros bool) error {
	printed := PrintTraces(traces, spellZeros)
	again, err := spec.ParseTraces(strings.NewReader(printed))
	if err != nil {
		return fmt.Errorf("the printed traces do not parse: %w\nprinted:\n%s", err, printed)
	}
	if len(again) != len(traces) {
		return fmt.Errorf("%d traces printed, %d parsed back\nprinted:\n%s", len(traces), len(again), printed)
	}
	for i := range traces {
		if diff := traceDiff(traces[i], again[i]); diff != "" {
			return fmt.Errorf("trace %d does not round-trip: %s\nprinted:\n%s", i+1, diff, printed)
		}
	}
	return nil
}

// PrintTraces prints traces in the trace format: an example line when the
// trace has one, the request with Request.String, limits and start when
// set, each event with Event.String and each expectation with
// Expect.String. With spellZeros, the zero method, protocol and phase are
// left out rather than printed as "unknown" and "none" (the known issues
// R1 to R3).
func PrintTraces(traces []spec.Trace, spellZeros bool) string {
	var b strings.Builder
	for _, t := range traces {
		if t.Name != "" {
			verdict := "not"
			if t.Decides {
				verdict = "decides"
			}
			fmt.Fprintf(&b, "example %s %s\n", t.Claim, verdict)
		}
		req := t.Request.String()
		if spellZeros && t.Request.Method == fsm.MethodUnknown {
			req = strings.Replace(req, " method=unknown", "", 1)
		}
		b.WriteString(req + "\n")
		if l := t.Limits; l != (fsm.Limits{}) {
			fmt.Fprintf(&b, "limits acquire=%v write=%v header=%v body=%v\n", l.Acquire, l.Write, l.Header, l.Body)
		}
		if t.Start != 0 {
			b.WriteString("start @" + t.Start.String() + "\n")
		}
		if t.Retry != (fsm.Retry{}) {
			b.WriteString(t.Retry.String() + "\n")
		}
		for _, s := range t.Calls {
			b.WriteString(s.String() + "\n")
			if s.Expect != nil {
				b.WriteString(s.Expect.String() + "\n")
			}
		}
		for _, s := range t.Steps {
			line := s.Event.String()
			if spellZeros {
				switch {
				case s.Event.Kind == fsm.EventConnAcquired && s.Event.Proto == fsm.ProtoUnknown:
					line = strings.TrimSuffix(line, " unknown")
				case s.Event.Kind == fsm.EventTimeout && s.Event.Phase == fsm.PhaseNone:
					line = strings.TrimSuffix(line, " phase=none")
				}
			}
			b.WriteString(line + "\n")
			if s.Expect != nil {
				b.WriteString(s.Expect.String() + "\n")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// traceDiff describes the first difference between two parsed traces,
// line numbers aside, or returns "".
func traceDiff(a, b spec.Trace) string {
	switch {
	case a.Name != b.Name || a.Claim != b.Claim || a.Decides != b.Decides:
		return fmt.Sprintf("example %q %v %v became %q %v %v", a.Name, a.Claim, a.Decides, b.Name, b.Claim, b.Decides)
	case a.Request != b.Request:
		return fmt.Sprintf("request %+v became %+v", a.Request, b.Request)
	case a.Limits != b.Limits:
		return fmt.Sprintf("limits %+v became %+v", a.Limits, b.Limits)
	case a.Start != b.Start:
		return fmt.Sprintf("start %v became %v", a.Start, b.Start)
	case len(a.Steps) != len(b.Steps):
		return fmt.Sprintf("%d events became %d", len(a.Steps), len(b.Steps))
	case a.Retry != b.Retry:
		return fmt.Sprintf("policy %v became %v", a.Retry, b.Retry)
	case len(a.Calls) != len(b.Calls):
		return fmt.Sprintf("%d outcomes became %d", len(a.Calls), len(b.Calls))
	}
	for i := range a.Calls {
		x, y := a.Calls[i], b.Calls[i]
		if x.Outcome != y.Outcome {
			return fmt.Sprintf("outcome %d %+v became %+v", i+1, x.Outcome, y.Outcome)
		}
		if (x.Expect == nil) != (y.Expect == nil) || x.Expect != nil && !sameCallExpect(*x.Expect, *y.Expect) {
			return fmt.Sprintf("outcome %d: expectation %v became %v", i+1, x.Expect, y.Expect)
		}
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Event != y.Event {
			return fmt.Sprintf("event %d %+v became %+v", i+1, x.Event, y.Event)
		}
		if (x.Expect == nil) != (y.Expect == nil) {
			return fmt.Sprintf("event %d: expectation %v became %v", i+1, x.Expect, y.Expect)
		}
		if x.Expect != nil && (x.Expect.Action != y.Expect.Action || x.Expect.Rule != y.Expect.Rule ||
			x.Expect.HasConn != y.Expect.HasConn || x.Expect.Conn != y.Expect.Conn) {
			return fmt.Sprintf("event %d: %v became %v", i+1, x.Expect, y.Expect)
		}
	}
	return ""
}

// sameCallExpect compares two call expectations, line numbers aside.
func sameCallExpect(x, y spec.CallExpect) bool {
	x.Line, y.Line = 0, 0
	return x == y
}
