package modeltest

import (
	"fmt"

	"github.com/replaysafe/replaysafe/fsm"
)

// Invariants checks the safety properties that hold whatever the details
// of the rules, for one attempt: decisions[i] is fsm's decision after
// events[i]. It returns the first property broken.
//
//   - A resend is never resent: an attempt whose facts say it is the
//     automatic resend never decides ActionResend (at most one per call).
//   - Never a resend after any response byte.
//   - Never a resend of a request that is not idempotent (by method or key)
//     without evidence that the server did not process it.
//   - Never a resend of a consumed one-shot body.
//   - Never a resend after a timeout or a cancellation.
//   - Never a resend when resending is off or a user retry policy is set.
//   - A final action, and its rule, never change; the connection verdict
//     moves once, away from in-use.
//   - A connection acquired in its handshake (early data) for a request
//     that may not go as early data ends the attempt at once.
func Invariants(req fsm.Request, events []fsm.Event, decisions []fsm.Decision) error {
	if len(events) != len(decisions) {
		return fmt.Errorf("%d events but %d decisions", len(events), len(decisions))
	}
	final := -1
	for i, d := range decisions {
		if final < 0 {
			if d.Action.Final() {
				final = i
			}
		} else if d.Action != decisions[final].Action || d.Rule != decisions[final].Rule {
			return fmt.Errorf("event %d (%v): the final decision %v changed to %v", i+1, events[i], decisions[final], d)
		}
		if i > 0 && decisions[i-1].Conn != fsm.ConnInUse && d.Conn != decisions[i-1].Conn {
			return fmt.Errorf("event %d (%v): the connection verdict moved from %v to %v", i+1, events[i], decisions[i-1].Conn, d.Conn)
		}
		if !d.Action.Final() && d.Conn != fsm.ConnInUse {
			return fmt.Errorf("event %d (%v): %v gives a connection verdict before the decision is final", i+1, events[i], d)
		}
		if e := events[i]; e.Kind == fsm.EventConnAcquired && e.Early && !earlySafe(req) && !d.Action.Final() {
			return fmt.Errorf("event %d (%v): a request that may not go as early data went on: %v", i+1, e, d)
		}
	}
	if final < 0 || decisions[final].Action != fsm.ActionResend {
		return nil
	}

	at := events[final]
	upTo := events[:final+1] // everything up to the event that decided the resend
	before := events[:final]
	resend := func(why string) error {
		return fmt.Errorf("event %d (%v) decided %v: %s", final+1, at, decisions[final], why)
	}
	switch {
	case req.Attempt == fsm.AttemptResend:
		return resend("the attempt was already the automatic resend")
	case req.ResendOff:
		return resend("resending is switched off")
	case req.RetryPolicy:
		return resend("a user retry policy is set")
	case has(upTo, fsm.EventFirstResponseByte) || has(upTo, fsm.EventInformational) ||
		has(upTo, fsm.EventFinalHeaders) || has(upTo, fsm.EventMalformed):
		return resend("a response byte had arrived")
	case has(upTo, fsm.EventTimeout) || has(upTo, fsm.EventCanceled) || at.Kind == fsm.EventTick:
		return resend("the attempt timed out or was canceled")
	case has(upTo, fsm.EventLocalFailure):
		return resend("the caller's body or GetBody failed")
	case req.Body == fsm.BodyOneShotConsumed || req.Body == fsm.BodyOneShotUntouched && has(before, fsm.EventBodyRead):
		return resend("the one-shot body was consumed")
	case !idempotentMethod(req.Method) && !req.IdempotencyKey && !notProcessed(before, at):
		return resend("a request that is not idempotent, without evidence of non-processing")
	}
	return nil
}

// notProcessed reports whether the failure at, after the events before
// it, proves that the server did not process the request.
func notProcessed(before []fsm.Event, at fsm.Event) bool {
	switch at.Kind {
	case fsm.EventHandedBack, fsm.EventRefusedStream, fsm.EventRequestRejected, fsm.EventEarlyRejected:
		return true
	case fsm.EventH2GoAway:
		if at.Stream > at.Boundary {
			return true
		}
	case fsm.EventH3GoAway:
		if at.BoundaryKnown && at.Stream >= at.Boundary {
			return true
		}
	}
	return !has(before, fsm.EventFirstByteWritten)
}

// Run feeds tr's events to a new fsm.Machine, checking fsm against the
// model (Check) after every event and the invariants over the whole
// attempt. It returns fsm's decisions, the known divergences that
// explained a difference on the way, and the first error.
func Run(tr Trace) (decisions []fsm.Decision, diverged []string, err error) {
	m := fsm.New(tr.Request, tr.Limits, tr.Start)
	c := NewChecker(tr.Request, tr.Limits, tr.Start)
	if diverged, err = c.Start(Observed(&m)); err != nil {
		return nil, diverged, err
	}
	for _, e := range tr.Events {
		decisions = append(decisions, m.Step(e))
		ids, err := c.Step(e, Observed(&m))
		diverged = union(diverged, ids)
		if err != nil {
			return decisions, diverged, err
		}
	}
	if err := Invariants(tr.Request, tr.Events, decisions); err != nil {
		return decisions, diverged, fmt.Errorf("%w\ntrace:\n%s", err, indent(FormatTrace(tr, nil)))
	}
	return decisions, diverged, nil
}

func union(a, b []string) []string {
	for _, s := range b {
		found := false
		for _, t := range a {
			found = found || s == t
		}
		if !found {
			a = append(a, s)
		}
	}
	return a
}
