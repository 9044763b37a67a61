package fsm_test

// Table tests that cover every statement of package fsm on their own
// (go test -run TestCoverage -cover ./fsm/ shows 100%), written to kill
// the mutants gremlins makes (docs/mutation.md): every boundary is tested
// on both sides, every rule decides at least once, every enum prints and
// parses.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

const covMs = fsm.Instant(time.Millisecond)

func covEv(k fsm.EventKind, at fsm.Instant) fsm.Event { return fsm.Event{Kind: k, At: at} }

func covConn(reused bool, p fsm.Proto, at fsm.Instant) fsm.Event {
	return fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: p, At: at}
}

// covRun feeds events to a new machine started at 0 and returns it.
func covRun(req fsm.Request, lim fsm.Limits, events ...fsm.Event) fsm.Machine {
	m := fsm.New(req, lim, 0)
	for _, e := range events {
		m.Step(e)
	}
	return m
}

var (
	covGET     = fsm.Request{Method: fsm.MethodGET}
	covPOST    = fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}
	covWritten = []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventRequestWritten, 2)}
)

var (
	covEarlyConn = fsm.Event{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3, Early: true}
	covEarly     = []fsm.Event{covEarlyConn, covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventRequestWritten, 2)}
)

// TestCoverageEarlySafe: which requests may go as early data (RS32), each
// condition on both sides.
func TestCoverageEarlySafe(t *testing.T) {
	keyed := fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered, IdempotencyKey: true, EarlyKeyed: true}
	with := func(r fsm.Request, f func(*fsm.Request)) fsm.Request { f(&r); return r }
	cases := []struct {
		name string
		req  fsm.Request
		want bool
	}{
		{"GET", covGET, true},
		{"HEAD", fsm.Request{Method: fsm.MethodHEAD}, true},
		{"OPTIONS", fsm.Request{Method: fsm.MethodOPTIONS}, true},
		{"TRACE", fsm.Request{Method: fsm.MethodTRACE}, true},
		{"PUT", fsm.Request{Method: fsm.MethodPUT}, false},
		{"DELETE", fsm.Request{Method: fsm.MethodDELETE}, false},
		{"unknown", fsm.Request{}, false},
		{"GET with a buffered body", with(covGET, func(r *fsm.Request) { r.Body = fsm.BodyBuffered }), false},
		{"GET as the resend", covGET.Resend(), false},
		{"GET, resend off", with(covGET, func(r *fsm.Request) { r.ResendOff = true }), false},
		{"GET, retry policy", with(covGET, func(r *fsm.Request) { r.RetryPolicy = true }), false},
		{"keyed POST with the option", keyed, true},
		{"keyed POST, no body", with(keyed, func(r *fsm.Request) { r.Body = fsm.BodyNone }), true},
		{"keyed POST without the option", with(keyed, func(r *fsm.Request) { r.EarlyKeyed = false }), false},
		{"POST with the option, no key", with(keyed, func(r *fsm.Request) { r.IdempotencyKey = false }), false},
		{"keyed POST, one-shot body", with(keyed, func(r *fsm.Request) { r.Body = fsm.BodyOneShotUntouched }), false},
		{"keyed POST as the resend", keyed.Resend(), false},
	}
	for _, c := range cases {
		if got := c.req.EarlySafe(); got != c.want {
			t.Errorf("%s: EarlySafe() = %v, want %v", c.name, got, c.want)
		}
	}
	for m := fsm.MethodUnknown; m <= fsm.MethodOther+1; m++ {
		want := m == fsm.MethodGET || m == fsm.MethodHEAD || m == fsm.MethodOPTIONS || m == fsm.MethodTRACE
		if m.Safe() != want {
			t.Errorf("%v.Safe() = %v", m, m.Safe())
		}
	}
}

func covAfter(prefix []fsm.Event, more ...fsm.Event) []fsm.Event {
	return append(append([]fsm.Event(nil), prefix...), more...)
}

// TestCoverageRules: one trace per rule, and the boundaries around it.
func TestCoverageRules(t *testing.T) {
	h2 := []fsm.Event{covConn(true, fsm.ProtoH2, 0), covEv(fsm.EventFirstByteWritten, 1)}
	h3 := []fsm.Event{covConn(true, fsm.ProtoH3, 0), covEv(fsm.EventFirstByteWritten, 1)}
	oneshot := fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotUntouched}
	cases := []struct {
		name   string
		req    fsm.Request
		events []fsm.Event
		want   fsm.Decision
	}{
		{"no event", covGET, nil, fsm.Decision{}},
		{"progress", covGET, covWritten, fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}},
		{"deliver", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}},
		{"deliver then complete", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventResponseComplete, 4)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}},
		{"complete before the upload ends", covGET, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventResponseComplete, 4)},
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}},
		{"upload ends after complete", covGET, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventResponseComplete, 4), covEv(fsm.EventRequestWritten, 5)},
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}},
		{"delivered then failure", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventReset, 4)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}},
		{"delivered then out of order", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventFinalHeaders, 4)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}},
		{"delivered then body read", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventBodyRead, 4)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}},
		{"closed stays closed", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventResponseComplete, 4), covEv(fsm.EventReset, 5)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}},
		{"invalid order", covGET, []fsm.Event{covEv(fsm.EventFirstByteWritten, 0)}, covFail(fsm.RuleInvalidOrder)},
		{"kind past the vocabulary", covGET, []fsm.Event{covEv(fsm.EventKind(fsm.EventKinds), 0)}, covFail(fsm.RuleInvalidOrder)},
		{"kind 255", covGET, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(255, 1)}, covFail(fsm.RuleInvalidOrder)},
		{"acquired twice", covGET, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covConn(true, fsm.ProtoH1, 1)}, covFail(fsm.RuleInvalidOrder)},
		{"written twice", covGET, covAfter(covWritten, covEv(fsm.EventRequestWritten, 3)), covFail(fsm.RuleInvalidOrder)},
		{"written before a byte", covGET, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventRequestWritten, 1)}, covFail(fsm.RuleInvalidOrder)},
		{"complete before headers", covGET, covAfter(covWritten, covEv(fsm.EventResponseComplete, 3)), covFail(fsm.RuleInvalidOrder)},
		{"h2 event on h1", covGET, covAfter(covWritten, covEv(fsm.EventRefusedStream, 3)), covFail(fsm.RuleInvalidOrder)},
		{"h3 event on h2", covGET, covAfter(h2, covEv(fsm.EventRequestRejected, 3)), covFail(fsm.RuleInvalidOrder)},
		{"acquire failed", covGET, []fsm.Event{covEv(fsm.EventAcquireFailed, 5)}, covFail(fsm.RuleAcquireFailed)},
		{"canceled", covGET, covAfter(covWritten, covEv(fsm.EventCanceled, 3)), covFail(fsm.RuleCanceled)},
		{"timeout", covGET, covAfter(covWritten, fsm.Event{Kind: fsm.EventTimeout, Phase: fsm.PhaseHeader, At: 3}), covFail(fsm.RuleTimeout)},
		{"local failure", covGET, covAfter(covWritten, covEv(fsm.EventLocalFailure, 3)), covFail(fsm.RuleLocalFailure)},
		{"local failure before a connection", covGET.Resend(), []fsm.Event{covEv(fsm.EventLocalFailure, 0)}, covFail(fsm.RuleLocalFailure)},
		{"delivered then local failure", covGET, covAfter(covWritten, covEv(fsm.EventFinalHeaders, 3), covEv(fsm.EventLocalFailure, 4)),
			fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}},
		{"response started", covGET, covAfter(covWritten, covEv(fsm.EventFirstResponseByte, 3), covEv(fsm.EventClosed, 4)), covFail(fsm.RuleResponseStarted)},
		{"informational", covGET, covAfter(covWritten, covEv(fsm.EventInformational, 3), covEv(fsm.EventClosed, 4)), covFail(fsm.RuleResponseStarted)},
		{"malformed", covGET, covAfter(covWritten, covEv(fsm.EventMalformed, 3)), covFail(fsm.RuleResponseStarted)},
		{"second resend", covGET.Resend(), covAfter(covWritten, covEv(fsm.EventClosed, 3)), covFail(fsm.RuleNoSecondResend)},
		{"resend off", fsm.Request{Method: fsm.MethodGET, ResendOff: true}, covAfter(covWritten, covEv(fsm.EventClosed, 3)), covFail(fsm.RuleResendOff)},
		{"retry policy", fsm.Request{Method: fsm.MethodGET, RetryPolicy: true}, covAfter(covWritten, covEv(fsm.EventClosed, 3)), covFail(fsm.RuleRetryPolicy)},
		{"evidence, body consumed", fsm.Request{Method: fsm.MethodGET, Body: fsm.BodyOneShotConsumed}, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventClosed, 1)}, covFail(fsm.RuleEvidenceBodyConsumed)},
		{"evidence, one-shot body read", oneshot, covAfter(h2, covEv(fsm.EventBodyRead, 2), covEv(fsm.EventRefusedStream, 3)), covFail(fsm.RuleEvidenceBodyConsumed)},
		{"evidence, one-shot body untouched", oneshot, covAfter(h2, covEv(fsm.EventRefusedStream, 3)), covResend(fsm.RuleEvidenceRefusedStream)},
		{"evidence, buffered body read", covPOST, covAfter(h2, covEv(fsm.EventBodyRead, 2), covEv(fsm.EventRefusedStream, 3)), covResend(fsm.RuleEvidenceRefusedStream)},
		{"handed back", oneshot, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventHandedBack, 1)}, covResend(fsm.RuleEvidenceHandedBack)},
		{"handed back after a byte", oneshot, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventHandedBack, 2)}, covFail(fsm.RuleInvalidOrder)},
		{"handed back after a response byte", oneshot, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstResponseByte, 1), covEv(fsm.EventHandedBack, 2)}, covFail(fsm.RuleInvalidOrder)},
		{"h2 GOAWAY above our stream", covPOST, covAfter(h2, fsm.Event{Kind: fsm.EventH2GoAway, Stream: 5, Boundary: 4}), covResend(fsm.RuleEvidenceGoAwayBoundary)},
		{"h2 GOAWAY at our stream", covPOST, covAfter(h2, fsm.Event{Kind: fsm.EventH2GoAway, Stream: 5, Boundary: 5}), covFail(fsm.RuleAmbiguousNotIdempotent)},
		{"h3 GOAWAY at our stream", covPOST, covAfter(h3, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 8, Boundary: 8, BoundaryKnown: true}), covResend(fsm.RuleEvidenceGoAwayBoundary)},
		{"h3 GOAWAY above our stream", covPOST, covAfter(h3, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 8, Boundary: 9, BoundaryKnown: true}), covFail(fsm.RuleAmbiguousNotIdempotent)},
		{"h3 GOAWAY boundary unseen", covPOST, covAfter(h3, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 8}), covFail(fsm.RuleAmbiguousNotIdempotent)},
		{"request rejected", covPOST, covAfter(h3, covEv(fsm.EventRequestRejected, 2)), covResend(fsm.RuleEvidenceRequestRejected)},
		{"nothing written", covPOST, []fsm.Event{covConn(false, fsm.ProtoH1, 0), covEv(fsm.EventTLSFailure, 1)}, covResend(fsm.RuleEvidenceNothingWritten)},
		{"fresh connection", covGET, []fsm.Event{covConn(false, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventClosed, 2)}, covFail(fsm.RuleAmbiguousFreshConn)},
		{"not idempotent", covPOST, covAfter(covWritten, covEv(fsm.EventClosed, 3)), covFail(fsm.RuleAmbiguousNotIdempotent)},
		{"idempotency key", fsm.Request{Method: fsm.MethodPOST, IdempotencyKey: true}, covAfter(covWritten, covEv(fsm.EventClosed, 3)), covResend(fsm.RuleAmbiguousIdempotentResend)},
		{"one-shot body", fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyOneShotUntouched}, covAfter(covWritten, covEv(fsm.EventReset, 3)), covFail(fsm.RuleAmbiguousBodyNotReproducible)},
		{"idempotent resend", fsm.Request{Method: fsm.MethodDELETE, Body: fsm.BodyBuffered}, covAfter(covWritten, covEv(fsm.EventReset, 3)), covResend(fsm.RuleAmbiguousIdempotentResend)},
		{"early data accepted", covGET, covAfter(covEarly, covEv(fsm.EventEarlyAccepted, 3)), fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}},
		{"early data accepted twice", covGET, covAfter(covEarly, covEv(fsm.EventEarlyAccepted, 3), covEv(fsm.EventEarlyAccepted, 4)), covFail(fsm.RuleInvalidOrder)},
		{"early data accepted after a response byte", covGET, covAfter(covEarly, covEv(fsm.EventFirstResponseByte, 3), covEv(fsm.EventEarlyAccepted, 4)), fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}},
		{"early data rejected after a response byte", covGET, covAfter(covEarly, covEv(fsm.EventFirstResponseByte, 3), covEv(fsm.EventEarlyRejected, 4)), covFail(fsm.RuleInvalidOrder)},
		{"early data accepted without early data", covGET, covAfter(covWritten, covEv(fsm.EventEarlyAccepted, 3)), covFail(fsm.RuleInvalidOrder)},
		{"early data rejected", covGET, covAfter(covEarly, covEv(fsm.EventEarlyRejected, 3)), covResend(fsm.RuleEarlyDataRejected)},
		{"early data rejected after acceptance", covGET, covAfter(covEarly, covEv(fsm.EventEarlyAccepted, 3), covEv(fsm.EventEarlyRejected, 4)), covFail(fsm.RuleInvalidOrder)},
		{"early data rejected without early data", covGET, covAfter(covWritten, covEv(fsm.EventEarlyRejected, 3)), covFail(fsm.RuleInvalidOrder)},
		{"early data rejected before a byte", covGET, []fsm.Event{covEarlyConn, covEv(fsm.EventEarlyRejected, 1)}, covResend(fsm.RuleEvidenceNothingWritten)},
		{"early data unsafe", covPOST, []fsm.Event{covEarlyConn}, covFail(fsm.RuleEarlyDataUnsafe)},
		{"early data unsafe, then more", covPOST, []fsm.Event{covEarlyConn, covEv(fsm.EventFirstByteWritten, 1)}, covFail(fsm.RuleEarlyDataUnsafe)},
		{"early data keyed with the option", fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered, IdempotencyKey: true, EarlyKeyed: true}, []fsm.Event{covEarlyConn}, fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}},
		{"a final decision holds", covGET, covAfter(covWritten, covEv(fsm.EventReset, 3), covEv(fsm.EventFinalHeaders, 4)), covResend(fsm.RuleAmbiguousIdempotentResend)},
	}
	for _, c := range cases {
		m := covRun(c.req, fsm.Limits{}, c.events...)
		if got := m.Decision(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if m.Request() != c.req {
			t.Errorf("%s: Request() = %v", c.name, m.Request())
		}
	}
}

// TestCoveragePrecedence: when several rules apply, the first in the
// precedence order of spec/ruledata decides. Each case makes every later
// rule apply too.
func TestCoveragePrecedence(t *testing.T) {
	everything := fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotConsumed, Attempt: fsm.AttemptResend, ResendOff: true, RetryPolicy: true}
	noAttempt := everything
	noAttempt.Attempt = fsm.AttemptOriginal
	noResendOff := noAttempt
	noResendOff.ResendOff = false
	bare := fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotUntouched}
	started := []fsm.Event{covConn(false, fsm.ProtoH2, 0), covEv(fsm.EventFirstResponseByte, 1)}
	h2 := []fsm.Event{covConn(false, fsm.ProtoH2, 0)}
	h3 := []fsm.Event{covConn(false, fsm.ProtoH3, 0)}
	cases := []struct {
		name   string
		req    fsm.Request
		events []fsm.Event
		want   fsm.Rule
	}{
		{"canceled over a started response", everything, covAfter(started, covEv(fsm.EventCanceled, 2)), fsm.RuleCanceled},
		{"timeout over a started response", everything, covAfter(started, fsm.Event{Kind: fsm.EventTimeout, At: 2}), fsm.RuleTimeout},
		{"local failure over a started response", everything, covAfter(started, covEv(fsm.EventLocalFailure, 2)), fsm.RuleLocalFailure},
		{"started over a second attempt", everything, covAfter(started, covEv(fsm.EventRefusedStream, 2)), fsm.RuleResponseStarted},
		{"second attempt over resend off", everything, covAfter(h2, covEv(fsm.EventRefusedStream, 2)), fsm.RuleNoSecondResend},
		{"resend off over a retry policy", noAttempt, covAfter(h2, covEv(fsm.EventRefusedStream, 2)), fsm.RuleResendOff},
		{"retry policy over evidence", noResendOff, covAfter(h2, covEv(fsm.EventRefusedStream, 2)), fsm.RuleRetryPolicy},
		{"refused over nothing written", bare, covAfter(h2, covEv(fsm.EventRefusedStream, 2)), fsm.RuleEvidenceRefusedStream},
		{"GOAWAY over nothing written", bare, covAfter(h2, fsm.Event{Kind: fsm.EventH2GoAway, Stream: 3, Boundary: 1}), fsm.RuleEvidenceGoAwayBoundary},
		{"h3 GOAWAY over nothing written", bare, covAfter(h3, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 4, Boundary: 4, BoundaryKnown: true}), fsm.RuleEvidenceGoAwayBoundary},
		{"rejected over nothing written", bare, covAfter(h3, covEv(fsm.EventRequestRejected, 2)), fsm.RuleEvidenceRequestRejected},
		{"fresh over not idempotent", bare, covAfter(h2, covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventClosed, 2)), fsm.RuleAmbiguousFreshConn},
		{"not idempotent over the body", bare, []fsm.Event{covConn(true, fsm.ProtoH1, 0), covEv(fsm.EventFirstByteWritten, 1), covEv(fsm.EventClosed, 2)}, fsm.RuleAmbiguousNotIdempotent},
	}
	for _, c := range cases {
		m := covRun(c.req, fsm.Limits{}, c.events...)
		if got := m.Decision().Rule; got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func covFail(r fsm.Rule) fsm.Decision {
	return fsm.Decision{Action: fsm.ActionFail, Rule: r, Conn: fsm.ConnDiscard}
}

func covResend(r fsm.Rule) fsm.Decision {
	return fsm.Decision{Action: fsm.ActionResend, Rule: r, Conn: fsm.ConnDiscard}
}

// TestCoveragePhasesAndDeadlines: each limit runs from the event that
// opens its phase; a tick at the deadline times out and one just before
// does not.
func TestCoveragePhasesAndDeadlines(t *testing.T) {
	lim := fsm.Limits{Acquire: 10 * time.Millisecond, Write: 20 * time.Millisecond, Header: 30 * time.Millisecond, Body: 40 * time.Millisecond}
	conn := covConn(true, fsm.ProtoH1, 3*covMs)
	cases := []struct {
		name     string
		events   []fsm.Event
		phase    fsm.Phase
		deadline fsm.Instant // 0: none
	}{
		{"acquire", nil, fsm.PhaseAcquire, 10 * covMs},
		{"write", []fsm.Event{conn}, fsm.PhaseWrite, 23 * covMs},
		{"write, first byte", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs)}, fsm.PhaseWrite, 23 * covMs},
		{"header", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventRequestWritten, 5*covMs)}, fsm.PhaseHeader, 35 * covMs},
		{"body", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventRequestWritten, 5*covMs), covEv(fsm.EventFinalHeaders, 7*covMs)}, fsm.PhaseBody, 47 * covMs},
		{"early response", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventFinalHeaders, 6*covMs)}, fsm.PhaseBody, 23 * covMs}, // the write limit still runs
		// The body phase runs from the final headers, not from a later
		// fact such as the request body's first read.
		{"body, request body read after the headers", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventRequestWritten, 5*covMs), covEv(fsm.EventFinalHeaders, 7*covMs), covEv(fsm.EventBodyRead, 9*covMs)}, fsm.PhaseBody, 47 * covMs},
		{"complete", []fsm.Event{conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventRequestWritten, 5*covMs), covEv(fsm.EventFinalHeaders, 7*covMs), covEv(fsm.EventResponseComplete, 8*covMs)}, fsm.PhaseNone, 0},
		{"failed", []fsm.Event{conn, covEv(fsm.EventClosed, 4*covMs)}, fsm.PhaseNone, 0},
		{"resent", []fsm.Event{conn, covEv(fsm.EventHandedBack, 4*covMs)}, fsm.PhaseNone, 0},
		{"tick before the deadline", []fsm.Event{conn, covEv(fsm.EventTick, 23*covMs-1)}, fsm.PhaseWrite, 23 * covMs},
	}
	for _, c := range cases {
		m := covRun(covGET, lim, c.events...)
		if got := m.Limits(); got != lim {
			t.Errorf("%s: Limits() = %+v, want %+v", c.name, got, lim)
		}
		if p := m.Phase(); p != c.phase {
			t.Errorf("%s: phase %v, want %v", c.name, p, c.phase)
		}
		at, ok := m.Deadline()
		if ok != (c.deadline != 0) || at != c.deadline {
			t.Errorf("%s: deadline %v %v, want %v", c.name, at, ok, c.deadline)
		}
		if c.deadline == 0 {
			continue
		}
		before, atDeadline := m, m
		if d := before.Step(covEv(fsm.EventTick, c.deadline-1)); d.Action.Final() && c.phase != fsm.PhaseBody || d.Conn != fsm.ConnInUse {
			t.Errorf("%s: a tick just before the deadline: %v", c.name, d)
		}
		d := atDeadline.Step(covEv(fsm.EventTick, c.deadline))
		if c.phase == fsm.PhaseBody {
			if d != (fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}) {
				t.Errorf("%s: a tick at the deadline after delivery: %v", c.name, d)
			}
		} else if d != covFail(fsm.RuleTimeout) {
			t.Errorf("%s: a tick at the deadline: %v", c.name, d)
		}
		if _, ok := atDeadline.Deadline(); ok {
			t.Errorf("%s: a deadline after the attempt ended", c.name)
		}
	}
	// An early response that completed while the upload goes on: the write
	// phase is still open, and only its limit (none here) could apply.
	m := covRun(covGET, fsm.Limits{Body: 40 * time.Millisecond}, conn, covEv(fsm.EventFirstByteWritten, 4*covMs), covEv(fsm.EventFinalHeaders, 5*covMs), covEv(fsm.EventResponseComplete, 6*covMs))
	if at, ok := m.Deadline(); ok || m.Phase() != fsm.PhaseWrite || m.Decision().Conn != fsm.ConnInUse {
		t.Errorf("early response, complete: deadline %v %v, phase %v, %v", at, ok, m.Phase(), m.Decision())
	}
	// Without limits there is never a deadline, and a tick is progress.
	m = covRun(covGET, fsm.Limits{}, conn)
	if _, ok := m.Deadline(); ok {
		t.Error("a deadline without limits")
	}
	if d := m.Step(covEv(fsm.EventTick, 1<<40)); d != (fsm.Decision{Action: fsm.ActionContinue, Rule: fsm.RuleProgress}) {
		t.Errorf("tick without limits: %v", d)
	}
}

// TestCoverageFacts: what each event establishes.
func TestCoverageFacts(t *testing.T) {
	m := covRun(covGET, fsm.Limits{}, covAfter(covWritten, covEv(fsm.EventBodyRead, 3), covEv(fsm.EventFinalHeaders, 4), covEv(fsm.EventResponseComplete, 5))...)
	want := fsm.FactAcquired | fsm.FactWroteAny | fsm.FactWroteAll | fsm.FactBodyRead | fsm.FactResponseByte | fsm.FactHeaders | fsm.FactComplete
	if m.Facts() != want {
		t.Errorf("facts %v, want %v", m.Facts(), want)
	}
	for _, c := range []struct {
		f    fsm.Facts
		want string
	}{
		{0, "none"},
		{fsm.FactAcquired, "acquired"},
		{want, "acquired|wrote-any|wrote-all|body-read|response-byte|headers|complete"},
		{fsm.FactEarly | fsm.FactEarlyAccepted, "early|early-accepted"},
		{fsm.FactWroteAll | 1<<9, "wrote-all|Facts(512)"},
		{1 << 9, "Facts(512)"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("Facts(%d).String() = %q, want %q", c.f, got, c.want)
		}
	}
	need, forbid, set, proto := fsm.Requires(fsm.EventRefusedStream)
	if need != fsm.FactAcquired || forbid != 0 || set != 0 || proto != fsm.ProtoH2 {
		t.Errorf("Requires(refused-stream) = %v %v %v %v", need, forbid, set, proto)
	}
	need, forbid, set, _ = fsm.Requires(fsm.EventConnAcquired)
	if need != 0 || forbid != fsm.FactAcquired || set != fsm.FactAcquired {
		t.Errorf("Requires(conn-acquired) = %v %v %v", need, forbid, set)
	}
	if _, forbid, _, _ := fsm.Requires(fsm.EventKind(fsm.EventKinds)); forbid != ^fsm.Facts(0) {
		t.Errorf("Requires(past the vocabulary) forbids %v", forbid)
	}
}

// TestCoverageEnums: every enum prints, parses back, and prints an
// invalid value with its type.
func TestCoverageEnums(t *testing.T) {
	type enum struct {
		name  string
		n     int
		str   func(int) string
		parse func(string) (int, bool)
		zero  bool // the zero value parses
	}
	enums := []enum{
		{"Method", int(fsm.MethodOther) + 1, func(i int) string { return fsm.Method(i).String() }, nil, false},
		{"BodyKind", int(fsm.BodyOneShotConsumed) + 1, func(i int) string { return fsm.BodyKind(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseBodyKind(s); return int(v), ok }, true},
		{"Attempt", int(fsm.AttemptResend) + 1, func(i int) string { return fsm.Attempt(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseAttempt(s); return int(v), ok }, true},
		{"Proto", int(fsm.ProtoH3) + 1, func(i int) string { return fsm.Proto(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseProto(s); return int(v), ok }, false},
		{"Phase", int(fsm.PhaseBody) + 1, func(i int) string { return fsm.Phase(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParsePhase(s); return int(v), ok }, false},
		{"Action", int(fsm.ActionResend) + 1, func(i int) string { return fsm.Action(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseAction(s); return int(v), ok }, true},
		{"ConnVerdict", int(fsm.ConnDiscard) + 1, func(i int) string { return fsm.ConnVerdict(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseConnVerdict(s); return int(v), ok }, true},
		{"EventKind", fsm.EventKinds, func(i int) string { return fsm.EventKind(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseEventKind(s); return int(v), ok }, false},
		{"Rule", fsm.RuleCount, func(i int) string { return fsm.Rule(i).String() },
			func(s string) (int, bool) { v, ok := fsm.ParseRule(s); return int(v), ok }, true},
	}
	for _, e := range enums {
		for i := range e.n {
			s := e.str(i)
			if s == "" || strings.Contains(s, "(") {
				t.Errorf("%s(%d) prints %q", e.name, i, s)
			}
			if e.parse == nil {
				continue
			}
			v, ok := e.parse(s)
			if want := i != 0 || e.zero; ok != want || ok && v != i {
				t.Errorf("parse %s %q = %d, %v", e.name, s, v, ok)
			}
		}
		if s := e.str(e.n); s != e.name+"("+strconv.Itoa(e.n)+")" {
			t.Errorf("%s(%d) prints %q", e.name, e.n, s)
		}
		if e.parse != nil {
			if _, ok := e.parse("no-such-value"); ok {
				t.Errorf("%s parses no-such-value", e.name)
			}
			// The first value past the enum prints, but does not parse.
			if v, ok := e.parse(e.str(e.n)); ok {
				t.Errorf("%s parses %q as %d", e.name, e.str(e.n), v)
			}
		}
	}
	for r := range fsm.RuleCount {
		id := fsm.Rule(r).ID()
		if v, ok := fsm.ParseRule(id); !ok || int(v) != r || len(id) != 4 {
			t.Errorf("rule %d: ID %q parses as %d %v", r, id, v, ok)
		}
	}
	if id := fsm.Rule(fsm.RuleCount).ID(); id != "" {
		t.Errorf("an invalid rule has ID %q", id)
	}
	methods := map[string]fsm.Method{"": fsm.MethodGET, "GET": fsm.MethodGET, "DELETE": fsm.MethodDELETE, "CONNECT": fsm.MethodCONNECT,
		"get": fsm.MethodOther, "unknown": fsm.MethodOther, "other": fsm.MethodOther, "PROPFIND": fsm.MethodOther}
	for s, want := range methods {
		if got := fsm.ParseMethod(s); got != want {
			t.Errorf("ParseMethod(%q) = %v, want %v", s, got, want)
		}
	}
	idempotent := map[fsm.Method]bool{fsm.MethodGET: true, fsm.MethodHEAD: true, fsm.MethodOPTIONS: true, fsm.MethodTRACE: true, fsm.MethodPUT: true, fsm.MethodDELETE: true}
	for m := fsm.Method(0); m <= fsm.MethodOther+1; m++ {
		if m.Idempotent() != idempotent[m] {
			t.Errorf("%v.Idempotent() = %v", m, m.Idempotent())
		}
	}
	for b := fsm.BodyKind(0); b <= fsm.BodyOneShotConsumed+1; b++ {
		if want := b == fsm.BodyNone || b == fsm.BodyBuffered; b.Reproducible() != want {
			t.Errorf("%v.Reproducible() = %v", b, b.Reproducible())
		}
	}
	for a := fsm.Action(0); a <= fsm.ActionResend; a++ {
		if a.Final() != (a != fsm.ActionContinue) {
			t.Errorf("%v.Final() = %v", a, a.Final())
		}
	}
	lim := fsm.Limits{Acquire: 1, Write: 2, Header: 3, Body: 4}
	for p, want := range []time.Duration{0, 1, 2, 3, 4, 0} { // PhaseNone, the four phases, one past
		if got := lim.For(fsm.Phase(p)); got != want {
			t.Errorf("Limits.For(%v) = %v, want %v", fsm.Phase(p), got, want)
		}
	}
	for k := fsm.EventKind(0); int(k) <= fsm.EventKinds; k++ {
		if want := k >= fsm.EventClosed && int(k) < fsm.EventKinds && k != fsm.EventEarlyAccepted; k.Failure() != want {
			t.Errorf("%v.Failure() = %v", k, k.Failure())
		}
	}
}

// TestCoverageStrings: the trace-format printers.
func TestCoverageStrings(t *testing.T) {
	if got := fsm.Instant(0).Add(1500 * time.Microsecond); got != 1500*fsm.Instant(time.Microsecond) || got.String() != "1.5ms" {
		t.Errorf("Instant.Add: %v", got)
	}
	req := fsm.Request{Method: fsm.MethodPUT, IdempotencyKey: true, Body: fsm.BodyOneShotUntouched, RetryPolicy: true, ResendOff: true}
	if got, want := req.String(), "request method=PUT body=oneshot key=on retry-policy=on resend=off attempt=original"; got != want {
		t.Errorf("Request.String() = %q, want %q", got, want)
	}
	if got, want := (fsm.Request{}).Resend().String(), "request body=none key=off retry-policy=off resend=on attempt=resend"; got != want {
		t.Errorf("Request.String() = %q, want %q", got, want)
	}
	if got, want := (fsm.Request{EarlyKeyed: true}).String(), "request body=none key=off retry-policy=off resend=on attempt=original early-keyed=on"; got != want {
		t.Errorf("Request.String() = %q, want %q", got, want)
	}
	if r := req.Resend(); r.Attempt != fsm.AttemptResend || r.Body != req.Body || r.Method != req.Method || !r.IdempotencyKey || !r.RetryPolicy || !r.ResendOff {
		t.Errorf("Resend() = %+v", r)
	}
	events := map[string]fsm.Event{
		"@1ms conn-acquired reused h2":      covConn(true, fsm.ProtoH2, covMs),
		"@0s conn-acquired fresh h3":        covConn(false, fsm.ProtoH3, 0),
		"@0s conn-acquired fresh h3 early":  {Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3, Early: true},
		"@0s timeout phase=write":           {Kind: fsm.EventTimeout, Phase: fsm.PhaseWrite},
		"@0s h2-goaway last=3 stream=5":     {Kind: fsm.EventH2GoAway, Boundary: 3, Stream: 5},
		"@0s h3-goaway boundary=8 stream=4": {Kind: fsm.EventH3GoAway, Boundary: 8, BoundaryKnown: true, Stream: 4},
		"@0s h3-goaway stream=4":            {Kind: fsm.EventH3GoAway, Boundary: 8, Stream: 4},
		"@2ns closed":                       {Kind: fsm.EventClosed, At: 2},
	}
	for want, e := range events {
		if got := e.String(); got != want {
			t.Errorf("Event.String() = %q, want %q", got, want)
		}
	}
	d := fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream, Conn: fsm.ConnDiscard}
	if got := d.String(); got != "resend evidence-refused-stream conn=discard" {
		t.Errorf("Decision.String() = %q", got)
	}
}
