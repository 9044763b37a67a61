package spec

import (
	"fmt"
	"strings"

	"github.com/replaysafe/replaysafe/fsm"
)

// Result is what the machine did at one step of a trace.
type Result struct {
	Step     Step
	Decision fsm.Decision
	// Mismatch is set when the step's expectation does not hold.
	Mismatch bool
}

// Run feeds the trace to a new machine and returns the decision after
// every step.
func (t Trace) Run() []Result {
	m := fsm.New(t.Request, t.Limits, t.Start)
	out := make([]Result, len(t.Steps))
	for i, s := range t.Steps {
		d := m.Step(s.Event)
		out[i] = Result{Step: s, Decision: d, Mismatch: s.Expect != nil && !s.Expect.Holds(d)}
	}
	return out
}

// Final returns the decision after the trace's last step.
func (t Trace) Final() fsm.Decision {
	m := fsm.New(t.Request, t.Limits, t.Start)
	var d fsm.Decision
	for _, s := range t.Steps {
		d = m.Step(s.Event)
	}
	return d
}

// Holds reports whether d is the expected decision.
func (e *Expect) Holds(d fsm.Decision) bool {
	return d.Action == e.Action && d.Rule == e.Rule && (!e.HasConn || d.Conn == e.Conn)
}

// String prints the expectation as its trace line.
func (e *Expect) String() string {
	s := "expect " + e.Action.String() + " " + e.Rule.String()
	if e.HasConn {
		s += " conn=" + e.Conn.String()
	}
	return s
}

// FinalRule returns the action and rule of the trace's last decision: the
// attempt machine's, or for a call trace the call machine's.
func (t Trace) FinalRule() (fsm.Action, fsm.Rule) {
	if t.IsCall() {
		ds := t.RunCall()
		d := ds[len(ds)-1]
		return d.Action, d.Rule
	}
	d := t.Final()
	return d.Action, d.Rule
}

// Check runs the trace and reports the first expectation that fails, and,
// for a spec example, whether its claimed rule decided as claimed.
func (t Trace) Check() error {
	var final string
	if t.IsCall() {
		for i, d := range t.RunCall() {
			s := t.Calls[i]
			if s.Expect != nil && !s.Expect.Holds(d) {
				return fmt.Errorf("line %d: after %s: got %v, %v", s.Line, s, d, s.Expect)
			}
			final = d.String()
		}
	} else {
		for _, r := range t.Run() {
			if r.Mismatch {
				return fmt.Errorf("line %d: after %v: got %v, %v", r.Step.Line, r.Step.Event, r.Decision, r.Step.Expect)
			}
			final = r.Decision.String()
		}
	}
	if t.Claim == fsm.RuleNone {
		return nil
	}
	if _, rule := t.FinalRule(); (rule == t.Claim) != t.Decides {
		return fmt.Errorf("example %q (line %d): final decision %s", t.Name, t.Line, final)
	}
	return nil
}

// Explain prints each step of the trace with the decision after it and the
// rule that fired, marking expectations that fail.
func (t Trace) Explain() string {
	var b strings.Builder
	if t.Name != "" {
		fmt.Fprintf(&b, "example %s\n", t.Name)
	}
	fmt.Fprintf(&b, "%v\n", t.Request)
	if t.IsCall() {
		fmt.Fprintf(&b, "%v\n", t.Retry)
		for i, d := range t.RunCall() {
			s := t.Calls[i]
			retry := ""
			if d.Retry {
				retry = " retry after=" + d.Delay.String()
			}
			fmt.Fprintf(&b, "%3d  %-56s -> %-8s %s %s%s\n", i+1, s.String(), d.Action, d.Rule.ID(), d.Rule, retry)
			if s.Expect != nil && !s.Expect.Holds(d) {
				fmt.Fprintf(&b, "     MISMATCH: trace line %d says %v\n", s.Expect.Line, s.Expect)
			}
		}
		return b.String()
	}
	for i, r := range t.Run() {
		fmt.Fprintf(&b, "%3d  %-40s -> %-8s %-32s conn=%v\n", i+1, r.Step.Event, r.Decision.Action, r.Decision.Rule.ID()+" "+r.Decision.Rule.String(), r.Decision.Conn)
		if r.Mismatch {
			fmt.Fprintf(&b, "     MISMATCH: trace line %d says %v\n", r.Step.Expect.Line, r.Step.Expect)
		}
	}
	return b.String()
}
