package spec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// CallStep is one wire attempt's outcome in a call trace, or the passing
// of the hedge delay ("hedge" line), and what the trace expects the call
// machine to decide on it.
type CallStep struct {
	// Hedge marks the hedge delay passing with no response header on any
	// copy: fed to fsm.Call.Hedge with Outcome.Budget, the rest of Outcome
	// unused.
	Hedge   bool
	Outcome fsm.Outcome
	// Expect is the call decision expected after Outcome; nil when the
	// trace states none.
	Expect *CallExpect
	Line   int
}

// CallExpect is an expected call decision. Delay is checked only when
// Retry is set.
type CallExpect struct {
	Action fsm.Action
	Rule   fsm.Rule
	Retry  bool
	Delay  time.Duration
	Line   int
}

// Holds reports whether d is the expected call decision.
func (e *CallExpect) Holds(d fsm.CallDecision) bool {
	return d.Action == e.Action && d.Rule == e.Rule && d.Retry == e.Retry && (!e.Retry || d.Delay == e.Delay)
}

// String prints the expectation as its trace line.
func (e *CallExpect) String() string {
	return "expect " + fsm.CallDecision{Action: e.Action, Rule: e.Rule, Retry: e.Retry, Delay: e.Delay}.String()
}

// IsCall reports whether the trace is a call trace: attempt outcomes fed
// to fsm.Call rather than events fed to fsm.Machine.
func (t Trace) IsCall() bool { return len(t.Calls) > 0 }

// RunCall feeds a call trace's outcomes to a new call machine and returns
// the decision after each.
func (t Trace) RunCall() []fsm.CallDecision {
	c := fsm.NewCall(t.Request, &t.Retry)
	out := make([]fsm.CallDecision, len(t.Calls))
	for i, s := range t.Calls {
		if s.Hedge {
			out[i] = c.Hedge(s.Outcome.Budget)
			continue
		}
		out[i] = c.Step(s.Outcome)
	}
	return out
}

// parseRetry reads a "retry" line: the policy of a call trace.
func (t *Trace) parseRetry(f []string) error {
	return eachSetting(f, func(k, v string) (err error) {
		switch k {
		case "attempts":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 8)
			t.Retry.Attempts = uint8(n)
		case "statuses":
			t.Retry.Statuses, err = parseStatuses(v)
		case "base":
			t.Retry.Base, err = parseLimit(v)
		case "cap":
			t.Retry.Cap, err = parseLimit(v)
		case "max-retry-after":
			t.Retry.MaxRetryAfter, err = parseLimit(v)
		case "hedges":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 8)
			t.Retry.Hedges = uint8(n)
		case "hedge-keyed":
			t.Retry.HedgeKeyed, err = parseOnOff(v)
		default:
			err = fmt.Errorf("unknown retry setting %q", k)
		}
		return err
	})
}

func parseStatuses(v string) (fsm.StatusSet, error) {
	if v == "none" {
		return fsm.StatusSet{}, nil
	}
	var codes []int
	for s := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return fsm.StatusSet{}, fmt.Errorf("status %q: want a code from 100 to 599", s)
		}
		codes = append(codes, n)
	}
	return fsm.Statuses(codes...), nil
}

func parseLimit(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative duration %v", d)
	}
	return d, err
}

// parseOutcome reads an "outcome ACTION RULE [args]" line: how one wire
// attempt of a call trace ended.
func (t *Trace) parseOutcome(f []string) error {
	if len(f) < 2 {
		return errors.New("want outcome ACTION RULE [status=N] [retry-after=DURATION] [body-read] [budget=off] [jitter=F]")
	}
	a, ok := fsm.ParseAction(f[0])
	if !ok || !a.Final() {
		return fmt.Errorf("want deliver, fail or resend, have %q", f[0])
	}
	r, ok := fsm.ParseRule(f[1])
	if !ok {
		return fmt.Errorf("unknown rule %q", f[1])
	}
	o := fsm.Outcome{Decision: fsm.Decision{Action: a, Rule: r, Conn: fsm.ConnDiscard}, Budget: true}
	for _, arg := range f[2:] {
		if arg == "body-read" {
			o.Facts |= fsm.FactBodyRead
			continue
		}
		k, v, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("unknown outcome argument %q", arg)
		}
		var err error
		switch k {
		case "status":
			o.Status, err = strconv.Atoi(v)
			if err == nil && (o.Status < 100 || o.Status > 599) {
				err = fmt.Errorf("status %d outside 100..599", o.Status)
			}
		case "retry-after":
			o.RetryAfter, err = parseLimit(v)
			o.HasRetryAfter = true
		case "budget":
			o.Budget, err = parseOnOff(v)
		case "jitter":
			o.Jitter, err = strconv.ParseFloat(v, 64)
			if err == nil && (o.Jitter < 0 || o.Jitter >= 1) {
				err = fmt.Errorf("jitter %v outside [0, 1)", o.Jitter)
			}
		default:
			err = fmt.Errorf("unknown outcome argument %q", arg)
		}
		if err != nil {
			return err
		}
	}
	if (a == fsm.ActionDeliver) != (o.Status != 0) {
		return errors.New("a delivered outcome, and only one, has status=N")
	}
	t.Calls = append(t.Calls, CallStep{Outcome: o})
	return nil
}

// parseHedge reads a "hedge [budget=off]" line: the hedge delay passed
// with no response header on any copy of the call.
func (t *Trace) parseHedge(f []string) error {
	s := CallStep{Hedge: true, Outcome: fsm.Outcome{Budget: true}}
	for _, arg := range f {
		v, ok := strings.CutPrefix(arg, "budget=")
		if !ok {
			return fmt.Errorf("unknown hedge argument %q; want hedge [budget=off]", arg)
		}
		var err error
		if s.Outcome.Budget, err = parseOnOff(v); err != nil {
			return err
		}
	}
	t.Calls = append(t.Calls, s)
	return nil
}

// parseCallExpect reads "expect ACTION RULE [retry after=DURATION]" after
// an outcome line.
func parseCallExpect(f []string) (*CallExpect, error) {
	if len(f) != 2 && len(f) != 4 {
		return nil, errors.New("want expect ACTION RULE [retry after=DURATION]")
	}
	a, r, err := parseActionRule(f)
	if err != nil {
		return nil, err
	}
	e := &CallExpect{Action: a, Rule: r}
	if len(f) == 4 {
		v, ok := strings.CutPrefix(f[3], "after=")
		if f[2] != "retry" || !ok {
			return nil, errors.New("want retry after=DURATION")
		}
		d, err := parseLimit(v)
		if err != nil {
			return nil, err
		}
		e.Retry, e.Delay = true, d
	}
	return e, nil
}

// String prints the step as its trace line: its outcome, or the hedge
// delay passing.
func (s CallStep) String() string {
	if s.Hedge {
		if !s.Outcome.Budget {
			return "hedge budget=off"
		}
		return "hedge"
	}
	return outcomeString(s.Outcome)
}

// outcomeString prints an outcome as its trace line.
func outcomeString(o fsm.Outcome) string {
	var b strings.Builder
	b.WriteString("outcome " + o.Decision.Action.String() + " " + o.Decision.Rule.String())
	if o.Status != 0 {
		b.WriteString(" status=" + strconv.Itoa(o.Status))
	}
	if o.HasRetryAfter {
		b.WriteString(" retry-after=" + o.RetryAfter.String())
	}
	if o.Facts&fsm.FactBodyRead != 0 {
		b.WriteString(" body-read")
	}
	if !o.Budget {
		b.WriteString(" budget=off")
	}
	if o.Jitter != 0 {
		b.WriteString(" jitter=" + strconv.FormatFloat(o.Jitter, 'g', -1, 64))
	}
	return b.String()
}
