package fsm

import "strconv"

// Facts is the set of things an attempt has established. Facts only ever
// get added.
type Facts uint16

// Facts an attempt can establish.
const (
	FactAcquired      Facts = 1 << iota // a connection was acquired
	FactWroteAny                        // a request byte reached the socket
	FactWroteAll                        // the whole request was written
	FactBodyRead                        // the request body was read from
	FactResponseByte                    // a response byte arrived (any kind)
	FactHeaders                         // the final header section arrived
	FactComplete                        // the response completed cleanly
	FactEarly                           // the request went as early data (0-RTT)
	FactEarlyAccepted                   // the server accepted that early data
)

const (
	acquired     = FactAcquired
	wroteAny     = FactWroteAny
	wroteAll     = FactWroteAll
	bodyRead     = FactBodyRead
	responseByte = FactResponseByte
	headers      = FactHeaders
	complete     = FactComplete
	early        = FactEarly
	earlyDone    = FactEarlyAccepted
)

var factNames = []string{"acquired", "wrote-any", "wrote-all", "body-read", "response-byte", "headers", "complete", "early", "early-accepted"}

// String prints the facts joined by "|", or "none".
func (f Facts) String() string {
	if f == 0 {
		return "none"
	}
	s := ""
	for i, n := range factNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := f &^ (1<<len(factNames) - 1); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "Facts(" + strconv.Itoa(int(rest)) + ")"
	}
	return s
}

// Requires returns what the transition table says about an event kind: the
// facts that must hold, the facts that must not hold, the facts it adds,
// and the protocol it needs (ProtoUnknown for any).
func Requires(k EventKind) (need, forbid, set Facts, proto Proto) {
	if k >= eventKindCount {
		return 0, ^Facts(0), 0, ProtoUnknown
	}
	t := transitions[k]
	return t.need, t.forbid, t.set, t.proto
}

// transition says when an event kind is allowed and what it establishes.
// An event is allowed when every fact in need holds, no fact in forbid
// holds, and (when proto is set) the connection speaks proto.
type transition struct {
	need, forbid, set Facts
	proto             Proto
}

// transitions is the whole transition table. Decisions on top of it live in
// Step (delivery, the connection verdict, early data for a request that may
// not go in it) and in decideFailure (the rules in precedence order). The
// one fact the table does not set is FactEarly: EventConnAcquired adds it
// when its Early field says so.
var transitions = [eventKindCount]transition{
	EventInvalid:           {forbid: ^Facts(0)}, // never allowed
	EventConnAcquired:      {forbid: acquired, set: acquired},
	EventHandedBack:        {need: acquired, forbid: wroteAny | responseByte},
	EventFirstByteWritten:  {need: acquired, forbid: wroteAny, set: wroteAny},
	EventBodyRead:          {need: acquired, set: bodyRead},
	EventRequestWritten:    {need: wroteAny, forbid: wroteAll, set: wroteAll},
	EventFirstResponseByte: {need: acquired, forbid: responseByte, set: responseByte},
	EventInformational:     {need: acquired, forbid: headers, set: responseByte},
	EventFinalHeaders:      {need: acquired, forbid: headers, set: responseByte | headers},
	EventResponseComplete:  {need: headers, forbid: complete, set: complete},
	EventTick:              {},
	EventClosed:            {need: acquired},
	EventReset:             {need: acquired},
	EventTLSFailure:        {need: acquired},
	EventMalformed:         {need: acquired, set: responseByte},
	EventTimeout:           {},
	EventCanceled:          {},
	EventRefusedStream:     {need: acquired, proto: ProtoH2},
	EventH2GoAway:          {need: acquired, proto: ProtoH2},
	EventRequestRejected:   {need: acquired, proto: ProtoH3},
	EventH3GoAway:          {need: acquired, proto: ProtoH3},
	EventAcquireFailed:     {forbid: acquired},
	EventLocalFailure:      {},
	// The handshake completes before the client can read a response byte,
	// so a rejection comes before any; an acceptance an adapter observes
	// beside the response (quic-go reports it on another goroutine) may be
	// fed after one.
	EventEarlyAccepted: {need: acquired | early, forbid: earlyDone, set: earlyDone},
	EventEarlyRejected: {need: acquired | early, forbid: earlyDone | responseByte},
}

// Machine decides one wire attempt of one call. It is a small comparable
// value: copying it takes a snapshot, and == compares two states.
//
// The calling contract, in order:
//
//  1. Create the machine with New when the attempt starts, passing the
//     request facts, the phase limits and the current instant.
//  2. Feed every observation to Step, in the order it happened, with its
//     instant. Step never panics; an event that cannot happen in the
//     current state fails the attempt with RuleInvalidOrder.
//  3. After each Step, ask Deadline for the instant the machine next cares
//     about, and feed an EventTick when the clock reaches it.
//  4. Act on the decision: ActionContinue, keep going; ActionDeliver, hand
//     the response to the caller and keep feeding body progress;
//     ActionFail, return the error; ActionResend, discard this connection
//     and start a new machine with Request.Resend on a new connection.
//  5. Return the connection to the pool only when Decision.Conn is
//     ConnReuse; close it when it is ConnDiscard.
//
// Once an action is final it never changes; only the connection verdict
// may still move from ConnInUse to ConnReuse or ConnDiscard.
type Machine struct {
	req      Request
	lim      Limits
	facts    Facts
	reused   bool
	proto    Proto
	started  Instant // New: opens the acquire phase
	acquired Instant // EventConnAcquired: opens the write phase
	written  Instant // EventRequestWritten: opens the header phase
	answered Instant // EventFinalHeaders: opens the body phase
	decision Decision
}

// New returns the machine for one attempt that starts at now.
func New(req Request, lim Limits, now Instant) Machine {
	return Machine{req: req, lim: lim, started: now}
}

// Request returns the request facts the machine decides for.
func (m *Machine) Request() Request { return m.req }

// Limits returns the phase limits the machine was made with.
func (m *Machine) Limits() Limits { return m.lim }

// Facts returns what the attempt has established so far.
func (m *Machine) Facts() Facts { return m.facts }

// Decision returns the latest decision.
func (m *Machine) Decision() Decision { return m.decision }

// open reports whether phase p (PhaseAcquire to PhaseBody) is running.
// Phases run side by side: an early final response opens the body phase
// while the write phase is still open, and both limits apply.
func (m *Machine) open(p Phase) bool {
	f := m.facts
	switch p {
	case PhaseAcquire:
		return f&acquired == 0
	case PhaseWrite:
		return f&acquired != 0 && f&wroteAll == 0
	case PhaseHeader:
		return f&wroteAll != 0 && f&headers == 0
	default: // PhaseBody
		return f&headers != 0 && f&complete == 0
	}
}

// Phase returns the most advanced phase still open; PhaseNone once the
// attempt failed, resent or finished both directions. While the connection
// is in use some phase is always open: the acquire phase until a
// connection, the write phase until the request is written, and the
// header and body phases until the response completes.
func (m *Machine) Phase() Phase {
	if m.decision.Conn != ConnInUse {
		return PhaseNone
	}
	p := PhaseBody
	for p > PhaseAcquire && !m.open(p) {
		p--
	}
	return p
}

// Deadline returns the earliest instant at which an open phase runs out of
// time, and false when no limit applies.
func (m *Machine) Deadline() (Instant, bool) {
	_, at, ok := m.nextDeadline()
	return at, ok
}

func (m *Machine) nextDeadline() (Phase, Instant, bool) {
	var (
		first Phase
		at    Instant
	)
	if m.decision.Conn != ConnInUse {
		return PhaseNone, 0, false
	}
	for p := PhaseAcquire; p <= PhaseBody; p++ {
		d := m.lim.For(p)
		if d <= 0 || !m.open(p) {
			continue
		}
		if end := m.opened(p) + Instant(d); first == PhaseNone || end < at {
			first, at = p, end
		}
	}
	return first, at, first != PhaseNone
}

func (m *Machine) opened(p Phase) Instant {
	switch p {
	case PhaseWrite:
		return m.acquired
	case PhaseHeader:
		return m.written
	case PhaseBody:
		return m.answered
	}
	return m.started
}

// Step feeds one event and returns the decision after it.
func (m *Machine) Step(e Event) Decision {
	return m.step(&e) // one call, so that Step is inlined into the caller's loop
}

// step is Step. It takes e by reference: Step is on every caller's hot
// path, and an Event is six words.
func (m *Machine) step(e *Event) Decision {
	if m.decision.Conn != ConnInUse {
		return m.decision // closed: the attempt is over
	}
	if e.Kind == EventTick {
		if p, at, ok := m.nextDeadline(); ok && e.At >= at {
			e = &Event{Kind: EventTimeout, At: e.At, Phase: p}
		}
	}
	if e.Kind == EventInvalid || e.Kind >= eventKindCount {
		return m.refuse()
	}
	// need and forbid are disjoint for every valid kind, so one masked
	// compare checks both.
	t := &transitions[e.Kind]
	if m.facts&(t.need|t.forbid) != t.need || t.proto != ProtoUnknown && t.proto != m.proto {
		return m.refuse()
	}
	added := t.set &^ m.facts
	m.facts |= added
	switch {
	case added&acquired != 0:
		m.acquired, m.reused, m.proto = e.At, e.Reused, e.Proto
		if e.Early {
			m.facts |= early
			if !m.req.EarlySafe() {
				return m.finish(ActionFail, RuleEarlyDataUnsafe)
			}
		}
	case added&wroteAll != 0:
		m.written = e.At
	case added&headers != 0:
		m.answered = e.At
	}

	failure := e.Kind.Failure()
	if m.decision.Action == ActionDeliver {
		switch {
		case failure:
			m.decision.Conn = ConnDiscard
		case m.facts&(complete|wroteAll) == complete|wroteAll:
			m.decision.Conn = ConnReuse
		}
		return m.decision
	}
	switch {
	case e.Kind == EventFinalHeaders:
		m.decision = Decision{Action: ActionDeliver, Rule: RuleDeliverFinalResponse}
		return m.decision
	case failure || e.Kind == EventHandedBack:
		action, rule := m.decideFailure(e)
		return m.finish(action, rule)
	}
	m.decision.Rule = RuleProgress
	return m.decision
}

// refuse answers an event the transition table does not allow: after
// delivery it only discards the connection; before, it fails the attempt
// with RuleInvalidOrder.
func (m *Machine) refuse() Decision {
	if m.decision.Action == ActionDeliver {
		m.decision.Conn = ConnDiscard
		return m.decision
	}
	return m.finish(ActionFail, RuleInvalidOrder)
}

func (m *Machine) finish(a Action, r Rule) Decision {
	m.decision = Decision{Action: a, Rule: r, Conn: ConnDiscard}
	return m.decision
}

// decideFailure applies the failure rules in precedence order (the order
// of spec/ruledata); the first that applies decides.
func (m *Machine) decideFailure(e *Event) (Action, Rule) {
	switch e.Kind {
	case EventAcquireFailed:
		return ActionFail, RuleAcquireFailed
	case EventCanceled:
		return ActionFail, RuleCanceled
	case EventTimeout:
		return ActionFail, RuleTimeout
	case EventLocalFailure:
		return ActionFail, RuleLocalFailure
	}
	switch {
	case m.facts&responseByte != 0:
		return ActionFail, RuleResponseStarted
	case m.req.Attempt == AttemptResend:
		return ActionFail, RuleNoSecondResend
	case m.req.ResendOff:
		return ActionFail, RuleResendOff
	case m.req.RetryPolicy:
		return ActionFail, RuleRetryPolicy
	}
	if rule := m.evidence(e); rule != RuleNone {
		if m.bodyConsumed() {
			return ActionFail, RuleEvidenceBodyConsumed
		}
		return ActionResend, rule
	}
	switch {
	case !m.reused:
		return ActionFail, RuleAmbiguousFreshConn
	case !m.req.Method.Idempotent() && !m.req.IdempotencyKey:
		return ActionFail, RuleAmbiguousNotIdempotent
	case !m.req.Body.Reproducible():
		return ActionFail, RuleAmbiguousBodyNotReproducible
	}
	return ActionResend, RuleAmbiguousIdempotentResend
}

// evidence returns the rule naming the proof that the server did not
// process the request, or RuleNone when the failure is ambiguous.
func (m *Machine) evidence(e *Event) Rule {
	switch {
	case e.Kind == EventHandedBack:
		return RuleEvidenceHandedBack
	case e.Kind == EventRefusedStream:
		return RuleEvidenceRefusedStream
	case e.Kind == EventH2GoAway && e.Stream > e.Boundary:
		// RFC 9113 §6.8: streams above the last stream ID were not processed.
		return RuleEvidenceGoAwayBoundary
	case e.Kind == EventH3GoAway && e.BoundaryKnown && e.Stream >= e.Boundary:
		// RFC 9114 §5.2: requests at or above the GOAWAY ID were not processed.
		return RuleEvidenceGoAwayBoundary
	case e.Kind == EventRequestRejected:
		return RuleEvidenceRequestRejected
	case m.facts&wroteAny == 0:
		return RuleEvidenceNothingWritten
	case e.Kind == EventEarlyRejected:
		// RFC 8470 §2: a request in rejected early data is sent again.
		return RuleEarlyDataRejected
	}
	return RuleNone
}

// bodyConsumed reports whether a one-shot body can no longer be sent as it
// was.
func (m *Machine) bodyConsumed() bool {
	switch m.req.Body {
	case BodyOneShotConsumed:
		return true
	case BodyOneShotUntouched:
		return m.facts&bodyRead != 0
	}
	return false
}
