package modeltest

import (
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// Trace is one attempt as the model sees it: the request facts, the phase
// limits, the instant the attempt started and the events in order.
type Trace struct {
	Request fsm.Request
	Limits  fsm.Limits
	Start   fsm.Instant
	Events  []fsm.Event
}

// Outcome is what the rules require after a trace: the decision, and the
// instant the attempt next runs out of time (HasDeadline false when no
// limit applies or the attempt is over).
type Outcome struct {
	Decision    fsm.Decision
	Deadline    fsm.Instant
	HasDeadline bool
}

// Reading chooses how the model reads a point where the rule text and fsm
// are known to disagree. The zero Reading is the model's own reading of the
// text; each field switches one point to the reading fsm implements, so
// that a comparison can name a known disagreement instead of failing on it.
// Divergences (compare.go) documents each one.
//
// There is no known disagreement today: D1 (the zero EventKind accepted
// before a connection) and D2 (the write limit dropped by an early
// response) were fixed in fsm, so Reading has no fields. A new divergence
// adds a field here and an entry to Divergences.
type Reading struct{}

// Decide returns what the rules require after every event of tr.
func Decide(tr Trace, rd Reading) Outcome {
	var d fsm.Decision // before any event: continue, no rule, connection in use
	for i := range tr.Events {
		d = decide(tr.Request, tr.Limits, tr.Start, tr.Events[:i+1], d, rd)
	}
	return outcome(tr, d, rd)
}

// Next returns what the rules require after the last event of tr, when
// prev is what they require after all the events before it. It is the
// body of Decide's loop, exported so that the exhaustive test can extend a
// trace by one event without replaying it.
func Next(tr Trace, prev fsm.Decision, rd Reading) Outcome {
	if len(tr.Events) == 0 {
		return outcome(tr, prev, rd)
	}
	return outcome(tr, decide(tr.Request, tr.Limits, tr.Start, tr.Events, prev, rd), rd)
}

func outcome(tr Trace, d fsm.Decision, rd Reading) Outcome {
	out := Outcome{Decision: d}
	if d.Conn == fsm.ConnInUse {
		out.Deadline, out.HasDeadline = deadline(tr.Limits, tr.Start, tr.Events, rd)
	}
	return out
}

// decide is one step: the decision after the last of events, e, given
// the decision that the events before it led to.
func decide(req fsm.Request, lim fsm.Limits, start fsm.Instant, events []fsm.Event, prev fsm.Decision, rd Reading) fsm.Decision {
	before, e := events[:len(events)-1], events[len(events)-1]

	// fsm.Machine's contract: a final action never changes, and the
	// connection verdict moves once, away from in-use. Once it has moved
	// the attempt is over and nothing that arrives matters.
	if prev.Conn != fsm.ConnInUse {
		return prev
	}

	// RS06: "a tick at or past the deadline the machine reported" is a
	// timeout.
	timedOut := e.Kind == fsm.EventTimeout
	if e.Kind == fsm.EventTick {
		if at, ok := deadline(lim, start, before, rd); ok && e.At >= at {
			timedOut = true
		}
	}

	if !timedOut && !allowed(before, e, rd) {
		if prev.Action == fsm.ActionDeliver {
			// RS02: "any failure, timeout or out-of-order event after
			// delivery discards" the connection; the delivery stands.
			prev.Conn = fsm.ConnDiscard
			return prev
		}
		// RS03: an impossible event fails the attempt.
		return fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleInvalidOrder, Conn: fsm.ConnDiscard}
	}

	if prev.Action == fsm.ActionDeliver {
		// RS02: the connection goes back to the pool only after a clean,
		// complete exchange: the response completed and the request was
		// fully written.
		switch {
		case timedOut || isFailure(e.Kind):
			prev.Conn = fsm.ConnDiscard
		case has(events, fsm.EventResponseComplete) && has(events, fsm.EventRequestWritten):
			prev.Conn = fsm.ConnReuse
		}
		return prev
	}

	switch {
	case e.Kind == fsm.EventConnAcquired && e.Early && !earlySafe(req):
		// RS32: a connection still in its handshake for a request that may
		// not go as early data fails the attempt before a byte.
		return fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleEarlyDataUnsafe, Conn: fsm.ConnDiscard}
	case e.Kind == fsm.EventFinalHeaders:
		// RS02: the final header section delivers.
		return fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnInUse}
	case timedOut || e.Kind == fsm.EventHandedBack || isFailure(e.Kind):
		action, rule := failureRule(req, before, e, timedOut)
		return fsm.Decision{Action: action, Rule: rule, Conn: fsm.ConnDiscard}
	}
	// RS01: an allowed event that decides nothing.
	return fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress, Conn: fsm.ConnInUse}
}

// failureRule applies the failure rules of spec/ruledata in their
// precedence order: the first statement that holds decides.
func failureRule(req fsm.Request, before []fsm.Event, e fsm.Event, timedOut bool) (fsm.Action, fsm.Rule) {
	evidence := evidenceRule(before, e)
	switch {
	case e.Kind == fsm.EventAcquireFailed: // RS04
		return fsm.ActionFail, fsm.RuleAcquireFailed
	case e.Kind == fsm.EventCanceled: // RS05
		return fsm.ActionFail, fsm.RuleCanceled
	case timedOut: // RS06
		return fsm.ActionFail, fsm.RuleTimeout
	case e.Kind == fsm.EventLocalFailure: // RS21: the caller's body or GetBody failed
		return fsm.ActionFail, fsm.RuleLocalFailure
	case responseStarted(before) || e.Kind == fsm.EventMalformed: // RS07
		return fsm.ActionFail, fsm.RuleResponseStarted
	case req.Attempt == fsm.AttemptResend: // RS08
		return fsm.ActionFail, fsm.RuleNoSecondResend
	case req.ResendOff: // RS09
		return fsm.ActionFail, fsm.RuleResendOff
	case req.RetryPolicy: // RS10
		return fsm.ActionFail, fsm.RuleRetryPolicy
	case evidence != fsm.RuleNone && bodyGone(req.Body, before): // RS11
		return fsm.ActionFail, fsm.RuleEvidenceBodyConsumed
	case evidence != fsm.RuleNone: // RS12 to RS16
		return fsm.ActionResend, evidence
	case !reusedConn(before): // RS17
		return fsm.ActionFail, fsm.RuleAmbiguousFreshConn
	case !idempotentMethod(req.Method) && !req.IdempotencyKey: // RS18
		return fsm.ActionFail, fsm.RuleAmbiguousNotIdempotent
	case !reproducibleBody(req.Body): // RS19
		return fsm.ActionFail, fsm.RuleAmbiguousBodyNotReproducible
	}
	return fsm.ActionResend, fsm.RuleAmbiguousIdempotentResend // RS20
}

// evidenceRule names the proof that the server did not process the
// request (RS12 to RS16, in that order), or RuleNone.
func evidenceRule(before []fsm.Event, e fsm.Event) fsm.Rule {
	switch {
	case e.Kind == fsm.EventHandedBack: // RS12
		return fsm.RuleEvidenceHandedBack
	case e.Kind == fsm.EventRefusedStream: // RS13
		return fsm.RuleEvidenceRefusedStream
	case e.Kind == fsm.EventH2GoAway && e.Stream > e.Boundary: // RS14, HTTP/2: above the last stream ID
		return fsm.RuleEvidenceGoAwayBoundary
	case e.Kind == fsm.EventH3GoAway && e.BoundaryKnown && e.Stream >= e.Boundary: // RS14, HTTP/3: at or above the GOAWAY ID
		return fsm.RuleEvidenceGoAwayBoundary
	case e.Kind == fsm.EventRequestRejected: // RS15
		return fsm.RuleEvidenceRequestRejected
	case !has(before, fsm.EventFirstByteWritten): // RS16
		return fsm.RuleEvidenceNothingWritten
	case e.Kind == fsm.EventEarlyRejected: // RS33: "none of it was processed"
		return fsm.RuleEarlyDataRejected
	}
	return fsm.RuleNone
}

// allowed says whether e can happen after the events before it. These are
// the ordering facts of the fsm event documentation and of RS03: one
// connection per attempt, nothing on the wire before it, a request handed
// back only before any of it was written, "first" events only once, the
// response completing only after its header section, and protocol events
// only on their protocol. A timeout and a cancellation can come at any
// time, and so can a local failure (the caller's body or GetBody may fail
// before a connection, while writing, or after delivery); a tick is always
// allowed.
func allowed(before []fsm.Event, e fsm.Event, rd Reading) bool {
	conn, acquired := first(before, fsm.EventConnAcquired)
	wrote := has(before, fsm.EventFirstByteWritten)
	started := responseStarted(before)
	headers := has(before, fsm.EventFinalHeaders)
	switch e.Kind {
	case fsm.EventInvalid:
		return false
	case fsm.EventConnAcquired, fsm.EventAcquireFailed:
		return !acquired
	case fsm.EventHandedBack:
		return acquired && !wrote && !started
	case fsm.EventFirstByteWritten:
		return acquired && !wrote
	case fsm.EventBodyRead:
		return acquired
	case fsm.EventRequestWritten:
		return wrote && !has(before, fsm.EventRequestWritten)
	case fsm.EventFirstResponseByte:
		return acquired && !started
	case fsm.EventInformational, fsm.EventFinalHeaders:
		return acquired && !headers
	case fsm.EventResponseComplete:
		return headers && !has(before, fsm.EventResponseComplete)
	case fsm.EventTick, fsm.EventTimeout, fsm.EventCanceled, fsm.EventLocalFailure:
		return true
	case fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventMalformed:
		return acquired
	case fsm.EventRefusedStream, fsm.EventH2GoAway:
		return acquired && conn.Proto == fsm.ProtoH2
	case fsm.EventRequestRejected, fsm.EventH3GoAway:
		return acquired && conn.Proto == fsm.ProtoH3
	case fsm.EventEarlyAccepted, fsm.EventEarlyRejected:
		// The early-data events: only on a connection acquired in its
		// handshake, once; a rejection before any response byte (the
		// client reads none before the handshake completes), an acceptance
		// whenever the adapter sees it.
		return acquired && conn.Early && !has(before, fsm.EventEarlyAccepted) && (e.Kind == fsm.EventEarlyAccepted || !started)
	}
	return false // not an event kind at all
}

// deadline is the earliest instant at which a phase that is still open
// runs out of time. Each limit of fsm.Limits runs from the event that opens
// its phase to the event that closes it.
func deadline(lim fsm.Limits, start fsm.Instant, events []fsm.Event, rd Reading) (fsm.Instant, bool) {
	conn, acquired := first(events, fsm.EventConnAcquired)
	written, wroteAll := first(events, fsm.EventRequestWritten)
	headers, hasHeaders := first(events, fsm.EventFinalHeaders)
	complete := has(events, fsm.EventResponseComplete)

	var at fsm.Instant
	var ok bool
	phase := func(open bool, since fsm.Instant, limit time.Duration) {
		if !open || limit <= 0 {
			return
		}
		if end := since + fsm.Instant(limit); !ok || end < at {
			at, ok = end, true
		}
	}
	phase(!acquired, start, lim.Acquire)                   // New until ConnAcquired
	phase(acquired && !wroteAll, conn.At, lim.Write)       // ConnAcquired until RequestWritten
	phase(wroteAll && !hasHeaders, written.At, lim.Header) // RequestWritten until FinalHeaders
	phase(hasHeaders && !complete, headers.At, lim.Body)   // FinalHeaders until ResponseComplete
	return at, ok
}

// responseStarted: a response byte of any kind arrived (RS07 counts a
// status line, a partial line, a 1xx and the final header section).
func responseStarted(events []fsm.Event) bool {
	return has(events, fsm.EventFirstResponseByte) || has(events, fsm.EventInformational) ||
		has(events, fsm.EventFinalHeaders) || has(events, fsm.EventMalformed)
}

// bodyGone: RS11, a one-shot body that was read (now or before the
// attempt) cannot be produced again.
func bodyGone(body fsm.BodyKind, before []fsm.Event) bool {
	return body == fsm.BodyOneShotConsumed || body == fsm.BodyOneShotUntouched && has(before, fsm.EventBodyRead)
}

// reusedConn: the attempt's connection had served an earlier request.
func reusedConn(before []fsm.Event) bool {
	conn, ok := first(before, fsm.EventConnAcquired)
	return ok && conn.Reused
}

// idempotentMethod: RFC 9110 §9.2.2 defines GET, HEAD, OPTIONS, TRACE, PUT
// and DELETE as idempotent.
func idempotentMethod(m fsm.Method) bool {
	switch m {
	case fsm.MethodGET, fsm.MethodHEAD, fsm.MethodOPTIONS, fsm.MethodTRACE, fsm.MethodPUT, fsm.MethodDELETE:
		return true
	}
	return false
}

// earlySafe: RS32, the requests that may go as early data: the call's
// original attempt with resending on and no retry policy of the caller's
// own, and "a safe method (GET, HEAD, OPTIONS, TRACE) and no body", or,
// with the caller's option, "an Idempotency-Key and a reproducible body".
func earlySafe(req fsm.Request) bool {
	if req.Attempt != fsm.AttemptOriginal || req.ResendOff || req.RetryPolicy {
		return false
	}
	switch {
	case req.EarlyKeyed && req.IdempotencyKey && reproducibleBody(req.Body):
		return true
	case req.Body != fsm.BodyNone:
		return false
	}
	switch req.Method {
	case fsm.MethodGET, fsm.MethodHEAD, fsm.MethodOPTIONS, fsm.MethodTRACE:
		return true
	}
	return false
}

// reproducibleBody: RS19, "a body that can be produced again (none or
// buffered)".
func reproducibleBody(b fsm.BodyKind) bool { return b == fsm.BodyNone || b == fsm.BodyBuffered }

// isFailure: the failure kinds of the event vocabulary.
func isFailure(k fsm.EventKind) bool {
	switch k {
	case fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventMalformed, fsm.EventTimeout,
		fsm.EventCanceled, fsm.EventRefusedStream, fsm.EventH2GoAway, fsm.EventRequestRejected,
		fsm.EventH3GoAway, fsm.EventAcquireFailed, fsm.EventLocalFailure, fsm.EventEarlyRejected:
		return true
	}
	return false
}

func has(events []fsm.Event, k fsm.EventKind) bool {
	_, ok := first(events, k)
	return ok
}

func first(events []fsm.Event, k fsm.EventKind) (fsm.Event, bool) {
	for _, e := range events {
		if e.Kind == k {
			return e, true
		}
	}
	return fsm.Event{}, false
}
