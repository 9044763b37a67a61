package modeltest

import (
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"pgregory.net/rapid"
)

// Property is the rapid state-machine property that compares fsm with the
// model. Its named actions feed events to the current attempt: "progress"
// the next events of a valid exchange, "fail" a failure that can happen
// now, "outOfOrder" an event that cannot happen now (on purpose),
// or garbage (a kind outside the vocabulary, or fields its kind does not
// read), "wait" and "tick" move the clock (ticks land around the deadline).
// When the original attempt decides ActionResend, "resend" starts the
// call's second attempt with Request.Resend; "newCall" starts over with new
// request facts once the current attempt is over. After every action the
// check asserts that fsm's decision and deadline match the model (Check)
// and that the invariants hold for the attempt.
//
// The tests run it with rapid.Check; fuzz/ runs it with rapid.MakeFuzz.
func Property(t *rapid.T) { property(t, nil) }

// propertyStats counts what runs of the property reached, so that a test
// can show that the generator gets everywhere.
type propertyStats struct {
	events         int
	rules          [fsm.RuleCount]int // decisions, counted once an attempt's action is final or while it continues
	secondAttempts int
	diverged       map[string]int
}

var limitChoices = []time.Duration{0, 0, 5 * ms, 10 * ms, 20 * ms}

func drawCall(t *rapid.T) (fsm.Request, fsm.Limits) {
	req := fsm.Request{
		Method:         fsm.Method(rapid.IntRange(0, int(fsm.MethodOther)).Draw(t, "method")),
		IdempotencyKey: rapid.Bool().Draw(t, "key"),
		Body:           fsm.BodyKind(rapid.IntRange(0, int(fsm.BodyOneShotConsumed)).Draw(t, "body")),
		RetryPolicy:    rapid.IntRange(0, 5).Draw(t, "retryPolicy") == 0,
		ResendOff:      rapid.IntRange(0, 5).Draw(t, "resendOff") == 0,
		EarlyKeyed:     rapid.Bool().Draw(t, "earlyKeyed"),
	}
	if rapid.IntRange(0, 5).Draw(t, "startAsResend") == 0 {
		req = req.Resend()
	} else if rapid.IntRange(0, 3).Draw(t, "earlyCall") == 0 {
		// A request that may go as early data (RS32), so that its
		// rejection (RS33) is reached as often as the other evidence.
		req = fsm.Request{Method: fsm.MethodGET, EarlyKeyed: req.EarlyKeyed}
	}
	limit := rapid.SampledFrom(limitChoices)
	lim := fsm.Limits{
		Acquire: limit.Draw(t, "acquireLimit"),
		Write:   limit.Draw(t, "writeLimit"),
		Header:  limit.Draw(t, "headerLimit"),
		Body:    limit.Draw(t, "bodyLimit"),
	}
	return req, lim
}

var (
	progressKinds = []fsm.EventKind{
		fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventBodyRead, fsm.EventRequestWritten,
		fsm.EventFirstResponseByte, fsm.EventInformational, fsm.EventFinalHeaders, fsm.EventResponseComplete,
		fsm.EventEarlyAccepted,
	}
	connFailureKinds = []fsm.EventKind{
		fsm.EventHandedBack, fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventRefusedStream,
		fsm.EventH2GoAway, fsm.EventRequestRejected, fsm.EventH3GoAway, fsm.EventEarlyRejected,
	}
	plainFailureKinds = []fsm.EventKind{fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure}
	failureKinds      = []fsm.EventKind{
		fsm.EventHandedBack, fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventMalformed,
		fsm.EventTimeout, fsm.EventCanceled, fsm.EventRefusedStream, fsm.EventH2GoAway,
		fsm.EventRequestRejected, fsm.EventH3GoAway, fsm.EventAcquireFailed, fsm.EventLocalFailure,
		fsm.EventEarlyRejected,
	}
)

func property(t *rapid.T, stats *propertyStats) {
	c := &call{stats: stats}
	req, lim := drawCall(t)
	c.begin(req, lim, fsm.Instant(rapid.IntRange(0, 3).Draw(t, "start"))*ms)

	t.Repeat(map[string]func(*rapid.T){
		"progress": func(t *rapid.T) {
			c.skipIfOver(t)
			kinds := c.kinds(progressKinds, true)
			if rapid.Bool().Draw(t, "inOrder") {
				kinds = kinds[:1] // the next step of a plain exchange
			}
			c.feed(t, c.drawEvent(t, "progress", kinds))
		},
		"fail": func(t *rapid.T) {
			c.skipIfOver(t)
			from := connFailureKinds // the failures the replay rules are about
			switch rapid.IntRange(0, 3).Draw(t, "failureSort") {
			case 0:
				from = failureKinds
			case 1:
				from = plainFailureKinds // no evidence: the ambiguous rules
			}
			c.feed(t, c.drawEvent(t, "failure", c.kinds(from, true)))
		},
		"outOfOrder": func(t *rapid.T) {
			c.skipIfOver(t)
			if len(c.current().trace.Events) < 3 {
				t.Skip("let the attempt get somewhere first")
			}
			if rapid.Bool().Draw(t, "garbage") {
				c.feed(t, drawGarbage(t))
				return
			}
			c.feed(t, c.drawEvent(t, "outOfOrder", c.kinds(append(progressKinds[:len(progressKinds):len(progressKinds)], failureKinds...), false)))
		},
		"wait": func(t *rapid.T) {
			c.now += fsm.Instant(rapid.IntRange(0, 25).Draw(t, "waitMillis")) * ms
		},
		"tick": func(t *rapid.T) {
			c.skipIfOver(t)
			c.tick(t)
		},
		"resend": func(t *rapid.T) {
			a := c.current()
			if len(c.attempts) > 1 || a.trace.Request.Attempt == fsm.AttemptResend || a.m.Decision().Action != fsm.ActionResend {
				t.Skip("only an original attempt that decided to resend starts a second one")
			}
			c.begin(a.trace.Request.Resend(), c.lim, c.now)
			if c.stats != nil {
				c.stats.secondAttempts++
			}
		},
		"newCall": func(t *rapid.T) {
			if !c.over() {
				t.Skip("the current attempt is still running")
			}
			c.attempts = nil
			req, lim := drawCall(t)
			c.begin(req, lim, c.now)
		},
		"": c.check,
	})
}

// call is the harness state: the call's attempts (the original and at
// most one resend) and the caller's clock.
type call struct {
	lim      fsm.Limits
	now      fsm.Instant
	attempts []*attempt
	stats    *propertyStats // nil unless a test counts
}

// attempt is one wire attempt: its machine, the trace fed to it, fsm's
// decision after each event, and how many events arrived after it closed.
type attempt struct {
	m          fsm.Machine
	checker    *Checker
	trace      Trace
	decisions  []fsm.Decision
	afterClose int
	ids        []string // what the checker said after the latest event
	err        error
}

func (c *call) begin(req fsm.Request, lim fsm.Limits, now fsm.Instant) {
	c.lim, c.now = lim, now
	c.attempts = append(c.attempts, &attempt{
		m:       fsm.New(req, lim, now),
		checker: NewChecker(req, lim, now),
		trace:   Trace{Request: req, Limits: lim, Start: now},
	})
}

func (c *call) current() *attempt { return c.attempts[len(c.attempts)-1] }

// over reports whether the current attempt is closed and a few events
// have already been fed to it to show that nothing changes any more.
func (c *call) over() bool { return c.current().afterClose >= 2 }

func (c *call) skipIfOver(t *rapid.T) {
	if c.over() {
		t.Skip("the attempt is over")
	}
}

// kinds returns the kinds of from that the model allows now (allowed
// true) or forbids now (allowed false); never empty.
func (c *call) kinds(from []fsm.EventKind, allowedNow bool) []fsm.EventKind {
	before := c.current().trace.Events
	var out []fsm.EventKind
	for _, k := range from {
		if allowed(before, fsm.Event{Kind: k, Phase: fsm.PhaseWrite}, Reading{}) == allowedNow {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return from
	}
	return out
}

// drawEvent draws an event of one of kinds with the fields its kind reads.
func (c *call) drawEvent(t *rapid.T, label string, kinds []fsm.EventKind) fsm.Event {
	e := fsm.Event{Kind: rapid.SampledFrom(kinds).Draw(t, label)}
	switch e.Kind {
	case fsm.EventConnAcquired:
		e.Reused = rapid.IntRange(0, 3).Draw(t, "reused") > 0
		e.Proto = fsm.Proto(rapid.IntRange(0, int(fsm.ProtoH3)).Draw(t, "proto"))
		if e.Proto == fsm.ProtoH3 { // early data where replaysafe uses it
			// Always for a request that may go as early data, as a driver
			// does; now and then for one that may not (RS32).
			odds := 8
			if earlySafe(c.current().trace.Request) {
				odds = 1
			}
			e.Early = rapid.IntRange(1, odds).Draw(t, "early") == 1
		}
	case fsm.EventTimeout:
		e.Phase = fsm.Phase(rapid.IntRange(0, int(fsm.PhaseBody)).Draw(t, "phase"))
	case fsm.EventH2GoAway:
		e.Stream = 2*rapid.Uint64Range(0, 4).Draw(t, "stream") + 1
		e.Boundary = rapid.Uint64Range(0, 9).Draw(t, "lastStream")
	case fsm.EventH3GoAway:
		e.Stream = 4 * rapid.Uint64Range(0, 3).Draw(t, "stream")
		e.Boundary = 4 * rapid.Uint64Range(0, 3).Draw(t, "boundary")
		e.BoundaryKnown = rapid.Bool().Draw(t, "boundaryKnown")
	}
	return e
}

func drawGarbage(t *rapid.T) fsm.Event {
	e := fsm.Event{
		Kind:          fsm.EventKind(rapid.IntRange(0, 255).Draw(t, "kind")),
		Reused:        rapid.Bool().Draw(t, "garbageReused"),
		Proto:         fsm.Proto(rapid.IntRange(0, 5).Draw(t, "garbageProto")),
		Phase:         fsm.Phase(rapid.IntRange(0, 6).Draw(t, "garbagePhase")),
		Stream:        rapid.Uint64Range(0, 9).Draw(t, "garbageStream"),
		Boundary:      rapid.Uint64Range(0, 9).Draw(t, "garbageBoundary"),
		BoundaryKnown: rapid.Bool().Draw(t, "garbageKnown"),
		Early:         rapid.Bool().Draw(t, "garbageEarly"),
	}
	if rapid.Bool().Draw(t, "garbageInVocabulary") {
		e.Kind %= fsm.EventKind(fsm.EventKinds) // a real kind with stray fields
	}
	return e
}

// tick moves the clock around the deadline fsm reports or the model
// computes (they differ only where a known divergence says so), or leaves
// it, and feeds a tick.
func (c *call) tick(t *rapid.T) {
	a := c.current()
	at := c.now
	model := Decide(a.trace, Reading{})
	fsmAt, fsmOK := a.m.Deadline()
	switch rapid.IntRange(0, 5).Draw(t, "tickAt") {
	case 1:
		if fsmOK {
			at = fsmAt - 1
		}
	case 2:
		if fsmOK {
			at = fsmAt
		}
	case 3:
		if fsmOK {
			at = fsmAt + fsm.Instant(rapid.IntRange(1, 10).Draw(t, "lateMillis"))*ms
		}
	case 4:
		if model.HasDeadline {
			at = model.Deadline
		}
	case 5:
		if model.HasDeadline {
			at = model.Deadline - 1
		}
	}
	if at > c.now {
		c.now = at
	}
	c.feed(t, fsm.Event{Kind: fsm.EventTick})
}

func (c *call) feed(t *rapid.T, e fsm.Event) {
	e.At = c.now
	a := c.current()
	if a.m.Decision().Conn != fsm.ConnInUse {
		a.afterClose++
	}
	wasFinal := a.m.Decision().Action.Final()
	d := a.m.Step(e)
	a.decisions = append(a.decisions, d)
	a.trace.Events = append(a.trace.Events, e)
	a.ids, a.err = a.checker.Step(e, Observed(&a.m))
	t.Logf("attempt %d: %v -> %v", len(c.attempts), e, d)
	if c.stats != nil {
		c.stats.events++
		if !wasFinal {
			c.stats.rules[d.Rule]++
		}
	}
}

func (c *call) check(t *rapid.T) {
	a := c.current()
	ids, err := a.ids, a.err
	if len(a.trace.Events) == 0 {
		ids, err = a.checker.Start(Observed(&a.m))
	}
	if err != nil {
		t.Fatalf("attempt %d: %v", len(c.attempts), err)
	}
	if c.stats != nil {
		for _, id := range ids {
			c.stats.diverged[id]++
		}
	}
	if err := Invariants(a.trace.Request, a.trace.Events, a.decisions); err != nil {
		t.Fatalf("attempt %d: %v\ntrace:\n%s", len(c.attempts), err, indent(FormatTrace(a.trace, nil)))
	}
}
