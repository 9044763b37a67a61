package modeltest

import (
	"fmt"
	"strings"

	"github.com/replaysafe/replaysafe/fsm"
)

// Divergence is a known disagreement between fsm and the rule text. Each
// comes with a trace on which fsm behaves as Reading says and not as the
// text says; TestDivergencesStillDiverge fails once fsm (or the text) is
// fixed, so that the entry gets deleted rather than forgotten.
type Divergence struct {
	ID      string
	Summary string
	// Reading is the model reading that reproduces fsm's behaviour.
	Reading Reading
	// Example is a trace on which the text and fsm disagree.
	Example Trace
}

// Divergences lists the known disagreements between fsm and the text.
var Divergences = []Divergence{}

const ms = 1_000_000 // one millisecond, in the nanoseconds of fsm.Instant and time.Duration

// reading is one combination of divergences, with their IDs.
type reading struct {
	ids []string
	rd  Reading
}

// readings is every combination of known divergences, the text's own
// reading (no divergence) first and fewer divergences before more.
var readings = func() []reading {
	n := len(Divergences)
	var out []reading
	for size := 0; size <= n; size++ {
		for mask := 0; mask < 1<<n; mask++ {
			if bitCount(mask) != size {
				continue
			}
			var r reading
			for i, d := range Divergences {
				if mask&(1<<i) != 0 {
					r.ids = append(r.ids, d.ID)
					r.rd = merge(r.rd, d.Reading)
				}
			}
			out = append(out, r)
		}
	}
	return out
}()

func bitCount(v int) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

func merge(a, b Reading) Reading { return Reading{} }

// Readings returns how many model readings Check tries (every combination
// of known divergences) and the i-th of them.
func Readings() int { return len(readings) }

// ReadingAt returns the i-th reading Check tries and the divergences it
// stands for; reading 0 is the text's own.
func ReadingAt(i int) (Reading, []string) { return readings[i].rd, readings[i].ids }

// Observed returns a machine's outcome: its latest decision and deadline.
func Observed(m *fsm.Machine) Outcome {
	at, ok := m.Deadline()
	return Outcome{Decision: m.Decision(), Deadline: at, HasDeadline: ok}
}

// Check compares got, fsm's outcome after tr, with the model. It returns
// nil when fsm does what the text says, the IDs of the known divergences
// that explain a difference, or a *Mismatch.
func Check(tr Trace, got Outcome) ([]string, error) {
	for _, r := range readings {
		if Decide(tr, r.rd) == got {
			return r.ids, nil
		}
	}
	return nil, &Mismatch{Trace: tr, Got: got, Want: Decide(tr, Reading{})}
}

// Checker compares fsm with the model one event at a time, as Check does
// on the whole trace, but in time linear in the trace: it keeps the model's
// decision under every reading.
type Checker struct {
	tr   Trace
	prev []fsm.Decision // per reading
}

// NewChecker returns a checker for an attempt with these facts, limits and
// start, before any event.
func NewChecker(req fsm.Request, lim fsm.Limits, start fsm.Instant) *Checker {
	return &Checker{tr: Trace{Request: req, Limits: lim, Start: start}, prev: make([]fsm.Decision, len(readings))}
}

// Trace returns the events checked so far.
func (c *Checker) Trace() Trace { return c.tr }

// Start checks fsm's outcome before any event.
func (c *Checker) Start(got Outcome) ([]string, error) { return c.compare(got, c.prev) }

// Step appends e to the trace and compares got, fsm's outcome after it,
// with the model; the result is Check's.
func (c *Checker) Step(e fsm.Event, got Outcome) ([]string, error) {
	c.tr.Events = append(c.tr.Events, e)
	for i, r := range readings {
		c.prev[i] = Next(c.tr, c.prev[i], r.rd).Decision
	}
	return c.compare(got, c.prev)
}

func (c *Checker) compare(got Outcome, decisions []fsm.Decision) ([]string, error) {
	for i, r := range readings {
		if outcome(c.tr, decisions[i], r.rd) == got {
			return r.ids, nil
		}
	}
	return nil, &Mismatch{Trace: Trace{Request: c.tr.Request, Limits: c.tr.Limits, Start: c.tr.Start, Events: append([]fsm.Event(nil), c.tr.Events...)},
		Got: got, Want: outcome(c.tr, decisions[0], Reading{})}
}

// Mismatch reports a trace on which fsm disagrees with the model and no
// known divergence explains it.
type Mismatch struct {
	Trace Trace
	Got   Outcome // fsm
	Want  Outcome // the model, reading the text
}

// Error prints both decisions and the trace that separates them.
func (m *Mismatch) Error() string {
	return fmt.Sprintf("fsm and the model disagree after %d events:\n  fsm:   %s\n  model: %s\ntrace (the expect line is the model's):\n%s",
		len(m.Trace.Events), describe(m.Got), describe(m.Want), indent(FormatTrace(m.Trace, &m.Want.Decision)))
}

func describe(o Outcome) string {
	s := o.Decision.String()
	if o.HasDeadline {
		return s + " deadline=@" + o.Deadline.String()
	}
	return s + " no deadline"
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// FormatTrace prints tr in the trace format of package spec, ending with
// an expect line for want when want is not nil, so that a failing trace
// can be pasted into spec/examples or fed to replaysafe explain. Values
// the format cannot spell (the zero method, protocol and phase) are left
// out, which parses back to the same zero value; an event kind outside
// the vocabulary is printed as it is, with a comment.
func FormatTrace(tr Trace, want *fsm.Decision) string {
	var b strings.Builder
	req := tr.Request.String()
	if tr.Request.Method == fsm.MethodUnknown {
		req = strings.Replace(req, " method=unknown", "", 1)
	}
	b.WriteString(req + "\n")
	if l := tr.Limits; l != (fsm.Limits{}) {
		b.WriteString("limits")
		for _, p := range []struct {
			name string
			d    int64
		}{{"acquire", int64(l.Acquire)}, {"write", int64(l.Write)}, {"header", int64(l.Header)}, {"body", int64(l.Body)}} {
			if p.d != 0 {
				b.WriteString(" " + p.name + "=" + fsm.Instant(p.d).String())
			}
		}
		b.WriteString("\n")
	}
	if tr.Start != 0 {
		b.WriteString("start @" + tr.Start.String() + "\n")
	}
	for _, e := range tr.Events {
		line := e.String()
		switch {
		case e.Kind == fsm.EventConnAcquired && e.Proto == fsm.ProtoUnknown:
			line = strings.TrimSuffix(line, " unknown")
		case e.Kind == fsm.EventTimeout && e.Phase == fsm.PhaseNone:
			line = strings.TrimSuffix(line, " phase=none")
		case e.Kind == fsm.EventInvalid || int(e.Kind) >= fsm.EventKinds:
			line += " # not expressible in the trace format"
		}
		b.WriteString(line + "\n")
	}
	if want != nil {
		b.WriteString("expect " + want.Action.String() + " " + want.Rule.String() + " conn=" + want.Conn.String() + "\n")
	}
	return b.String()
}
