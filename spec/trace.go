package spec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// MaxTraceLine bounds one line of a trace file, in bytes.
const MaxTraceLine = 4096

// Trace is one recorded or written attempt: the request facts, the limits,
// and the events in order, each optionally followed by the decision the
// trace expects after it. docs/explain.md describes the text format.
type Trace struct {
	// Name is the trace's label from its "example" line, or "".
	Name string
	// Claim is the rule the trace is an example for (RuleNone when absent).
	Claim fsm.Rule
	// Decides says whether Claim must decide the trace (true) or must not
	// (false).
	Decides bool
	Request fsm.Request
	Limits  fsm.Limits
	Start   fsm.Instant
	Steps   []Step
	// Retry is a call trace's configured policy ("retry" line).
	Retry fsm.Retry
	// Calls are a call trace's attempt outcomes, fed to fsm.Call; a
	// trace has Steps or Calls, never both.
	Calls []CallStep
	// Line is the line number the trace starts on.
	Line int
}

// Step is one event of a trace and what the trace expects after it.
type Step struct {
	Event fsm.Event
	// Expect is the decision expected after Event; nil when the trace
	// states none for this step.
	Expect *Expect
	Line   int
}

// Expect is an expected decision. Conn is checked only when HasConn is set.
type Expect struct {
	Action  fsm.Action
	Rule    fsm.Rule
	Conn    fsm.ConnVerdict
	HasConn bool
	Line    int
}

// SyntaxError reports a line of a trace file that cannot be read.
type SyntaxError struct {
	Line int
	Text string // the offending line
	Err  error
}

// Error describes the failure and where it happened.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("trace line %d: %v: %q", e.Line, e.Err, e.Text)
}

// Unwrap returns the underlying cause.
func (e *SyntaxError) Unwrap() error { return e.Err }

// ParseTraces reads every trace in a trace file. A file holds one trace, or
// several each starting with an "example" line.
func ParseTraces(r io.Reader) ([]Trace, error) {
	var (
		traces []Trace
		cur    *Trace
		n      int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), MaxTraceLine)
	for sc.Scan() {
		n++
		text := sc.Text()
		line := strings.TrimSpace(text)
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] == "example" || cur == nil {
			traces = append(traces, Trace{Line: n})
			cur = &traces[len(traces)-1]
			if fields[0] != "example" && len(traces) > 1 {
				return nil, &SyntaxError{n, text, errors.New("a file with several traces starts each with an example line")}
			}
		}
		if err := cur.parseLine(fields); err != nil {
			return nil, &SyntaxError{n, text, err}
		}
		if s := len(cur.Steps); s > 0 && cur.Steps[s-1].Line == 0 {
			cur.Steps[s-1].Line = n
		}
		if s := len(cur.Steps); s > 0 && cur.Steps[s-1].Expect != nil && cur.Steps[s-1].Expect.Line == 0 {
			cur.Steps[s-1].Expect.Line = n
		}
		if s := len(cur.Calls); s > 0 && cur.Calls[s-1].Line == 0 {
			cur.Calls[s-1].Line = n
		}
		if s := len(cur.Calls); s > 0 && cur.Calls[s-1].Expect != nil && cur.Calls[s-1].Expect.Line == 0 {
			cur.Calls[s-1].Expect.Line = n
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &SyntaxError{n + 1, "", err}
	}
	if len(traces) == 0 {
		return nil, errors.New("trace: no trace in input")
	}
	return traces, nil
}

// ParseTrace reads a file that holds exactly one trace.
func ParseTrace(r io.Reader) (Trace, error) {
	ts, err := ParseTraces(r)
	if err != nil {
		return Trace{}, err
	}
	if len(ts) != 1 {
		return Trace{}, fmt.Errorf("trace: want one trace, found %d", len(ts))
	}
	return ts[0], nil
}

func (t *Trace) parseLine(f []string) error {
	switch f[0] {
	case "example":
		return t.parseExample(f[1:])
	case "request":
		return t.parseRequest(f[1:])
	case "limits":
		return t.parseLimits(f[1:])
	case "start":
		if len(f) != 2 || !strings.HasPrefix(f[1], "@") {
			return errors.New("want start @DURATION")
		}
		at, err := parseAt(f[1])
		t.Start = at
		return err
	case "retry":
		return t.parseRetry(f[1:])
	case "outcome":
		if len(t.Steps) > 0 {
			return errors.New("a trace has events or outcomes, not both")
		}
		return t.parseOutcome(f[1:])
	case "hedge":
		if len(t.Steps) > 0 {
			return errors.New("a trace has events or outcomes, not both")
		}
		return t.parseHedge(f[1:])
	case "expect":
		if n := len(t.Calls); n > 0 {
			last := &t.Calls[n-1]
			if last.Expect != nil {
				return errors.New("two expect lines for one outcome")
			}
			e, err := parseCallExpect(f[1:])
			last.Expect = e
			return err
		}
		if len(t.Steps) == 0 {
			return errors.New("expect before any event")
		}
		last := &t.Steps[len(t.Steps)-1]
		if last.Expect != nil {
			return errors.New("two expect lines for one event")
		}
		e, err := parseExpect(f[1:])
		last.Expect = e
		return err
	}
	if len(t.Calls) > 0 {
		return errors.New("a trace has events or outcomes, not both")
	}
	ev, err := t.parseEvent(f)
	if err != nil {
		return err
	}
	t.Steps = append(t.Steps, Step{Event: ev})
	return nil
}

func (t *Trace) parseExample(f []string) error {
	if len(f) != 2 {
		return errors.New("want example RULE decides|not")
	}
	r, ok := fsm.ParseRule(f[0])
	if !ok {
		return fmt.Errorf("unknown rule %q", f[0])
	}
	switch f[1] {
	case "decides":
		t.Decides = true
	case "not":
	default:
		return fmt.Errorf("want decides or not, have %q", f[1])
	}
	t.Claim, t.Name = r, r.String()+" "+f[1]
	return nil
}

func (t *Trace) parseRequest(f []string) error {
	return eachSetting(f, func(k, v string) (err error) {
		switch k {
		case "method":
			t.Request.Method = fsm.ParseMethod(v)
		case "body":
			var ok bool
			if t.Request.Body, ok = fsm.ParseBodyKind(v); !ok {
				err = fmt.Errorf("unknown body kind %q", v)
			}
		case "key":
			t.Request.IdempotencyKey, err = parseOnOff(v)
		case "retry-policy":
			t.Request.RetryPolicy, err = parseOnOff(v)
		case "early-keyed":
			t.Request.EarlyKeyed, err = parseOnOff(v)
		case "resend":
			var on bool
			on, err = parseOnOff(v)
			t.Request.ResendOff = !on
		case "attempt":
			var ok bool
			if t.Request.Attempt, ok = fsm.ParseAttempt(v); !ok {
				err = fmt.Errorf("unknown attempt %q", v)
			}
		default:
			err = fmt.Errorf("unknown request fact %q", k)
		}
		return err
	})
}

// eachSetting calls set with the key and value of every key=value field
// of a line, and stops at the first error.
func eachSetting(f []string, set func(k, v string) error) error {
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want key=value, have %q", kv)
		}
		if err := set(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (t *Trace) parseLimits(f []string) error {
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want phase=DURATION, have %q", kv)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d < 0 {
			return fmt.Errorf("negative limit %v", d)
		}
		switch k {
		case "acquire":
			t.Limits.Acquire = d
		case "write":
			t.Limits.Write = d
		case "header":
			t.Limits.Header = d
		case "body":
			t.Limits.Body = d
		default:
			return fmt.Errorf("unknown limit %q", k)
		}
	}
	return nil
}

func (t *Trace) parseEvent(f []string) (fsm.Event, error) {
	at := t.Start
	if n := len(t.Steps); n > 0 {
		at = t.Steps[n-1].Event.At
	}
	if strings.HasPrefix(f[0], "@") {
		var err error
		if at, err = parseAt(f[0]); err != nil {
			return fsm.Event{}, err
		}
		f = f[1:]
		if len(f) == 0 {
			return fsm.Event{}, errors.New("time without an event")
		}
	}
	kind, ok := fsm.ParseEventKind(f[0])
	if !ok {
		return fsm.Event{}, fmt.Errorf("unknown event %q", f[0])
	}
	e := fsm.Event{Kind: kind, At: at}
	for _, arg := range f[1:] {
		if err := setEventArg(&e, arg); err != nil {
			return fsm.Event{}, err
		}
	}
	// A GOAWAY boundary decides a resend, so it is never left to a default.
	if kind == fsm.EventH2GoAway && (len(f) != 3 || !strings.Contains(f[1]+f[2], "last=")) {
		return fsm.Event{}, errors.New("h2-goaway needs last=N and stream=N")
	}
	if kind == fsm.EventH3GoAway && !strings.Contains(strings.Join(f[1:], " "), "stream=") {
		return fsm.Event{}, errors.New("h3-goaway needs stream=N")
	}
	return e, nil
}

// setEventArg reads one argument of an event line, in the form Event.String
// prints it.
func setEventArg(e *fsm.Event, arg string) error {
	switch arg {
	case "reused", "fresh":
		if e.Kind != fsm.EventConnAcquired {
			break
		}
		e.Reused = arg == "reused"
		return nil
	case "early":
		if e.Kind != fsm.EventConnAcquired {
			break
		}
		e.Early = true
		return nil
	}
	if p, ok := fsm.ParseProto(arg); ok && e.Kind == fsm.EventConnAcquired {
		e.Proto = p
		return nil
	}
	k, v, ok := strings.Cut(arg, "=")
	if !ok {
		return fmt.Errorf("unknown argument %q for %v", arg, e.Kind)
	}
	if k == "phase" && e.Kind == fsm.EventTimeout {
		p, ok := fsm.ParsePhase(v)
		if !ok {
			return fmt.Errorf("unknown phase %q", v)
		}
		e.Phase = p
		return nil
	}
	if e.Kind != fsm.EventH2GoAway && e.Kind != fsm.EventH3GoAway {
		return fmt.Errorf("unknown argument %q for %v", arg, e.Kind)
	}
	n, err := strconv.ParseUint(v, 10, 62)
	if err != nil {
		return fmt.Errorf("stream ID %q: %w", v, err)
	}
	switch {
	case k == "stream":
		e.Stream = n
	case k == "last" && e.Kind == fsm.EventH2GoAway:
		e.Boundary = n
	case k == "boundary" && e.Kind == fsm.EventH3GoAway:
		e.Boundary, e.BoundaryKnown = n, true
	default:
		return fmt.Errorf("unknown argument %q for %v", arg, e.Kind)
	}
	return nil
}

func parseAt(s string) (fsm.Instant, error) {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "@"))
	if err != nil {
		return 0, err
	}
	return fsm.Instant(d), nil
}

func parseOnOff(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("want on or off, have %q", v)
}

func parseExpect(f []string) (*Expect, error) {
	if len(f) < 2 || len(f) > 3 {
		return nil, errors.New("want expect ACTION RULE [conn=VERDICT]")
	}
	a, r, err := parseActionRule(f)
	if err != nil {
		return nil, err
	}
	e := &Expect{Action: a, Rule: r}
	if len(f) == 3 {
		v, ok := strings.CutPrefix(f[2], "conn=")
		if !ok {
			return nil, fmt.Errorf("want conn=VERDICT, have %q", f[2])
		}
		if e.Conn, ok = fsm.ParseConnVerdict(v); !ok {
			return nil, fmt.Errorf("unknown connection verdict %q", v)
		}
		e.HasConn = true
	}
	return e, nil
}

// parseActionRule reads the "ACTION RULE" that starts an expect line.
func parseActionRule(f []string) (fsm.Action, fsm.Rule, error) {
	a, ok := fsm.ParseAction(f[0])
	if !ok {
		return 0, 0, fmt.Errorf("unknown action %q", f[0])
	}
	r, ok := fsm.ParseRule(f[1])
	if !ok {
		return 0, 0, fmt.Errorf("unknown rule %q", f[1])
	}
	return a, r, nil
}
