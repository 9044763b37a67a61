// Package tracecheck replays what a Transport actually fed its machines
// through package fsm and through the independent model of package
// modeltest, and checks that the transport acted on the decision the
// rules require.
//
// Every wire attempt reaches an Observer as a replaysafe.AttemptReport
// carrying its trace in the spec format. A Checker parses that text (so
// the trace `replaysafe explain` would replay is the one checked), feeds
// its events to a new fsm.Machine and to the model after every event, and
// reports:
//
//   - a disagreement between fsm and the model (a *modeltest.Mismatch);
//   - an event the transition table forbids (RS03 invalid-order: a correct
//     adapter never feeds one);
//   - a replayed decision that differs from the one the transport reported;
//   - a trace whose text does not hold the events the report lists;
//   - a call that went on the wire more often than its decisions allow:
//     attempt n+1 exists only when attempt n decided to resend.
//
// Use Observe as (or inside) Options.Observer.OnAttempt; it is safe for
// concurrent use.
package tracecheck

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	modeltest "github.com/replaysafe/replaysafe/model_test"
	"github.com/replaysafe/replaysafe/spec"
)

// MaxFailures bounds the failures a Checker keeps; later ones are
// counted only.
const MaxFailures = 20

// Checker checks attempt reports as they arrive. The zero Checker is
// ready to use.
type Checker struct {
	mu       sync.Mutex
	checked  int
	failed   int
	failures []string
	// calls maps a call's request to the number of its last attempt
	// and whether the call went on after it (a resend or a retry).
	calls map[*http.Request]lastAttempt
}

type lastAttempt struct {
	number int
	resend bool
}

// maxCalls bounds the calls a Checker remembers for the attempt-order
// check; past it the map starts over (an order check lost, never a false
// failure: attempt 2 of a forgotten call is not judged).
const maxCalls = 1 << 16

// Observe checks one attempt report; its signature fits
// Observer.OnAttempt.
func (c *Checker) Observe(r replaysafe.AttemptReport) {
	err := Check(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	if err == nil {
		err = c.orderLocked(r)
	}
	if err != nil {
		c.failed++
		if len(c.failures) < MaxFailures {
			c.failures = append(c.failures, err.Error())
		}
	}
}

// orderLocked checks that attempt r follows a resend decision of the
// same call, and records it.
func (c *Checker) orderLocked(r replaysafe.AttemptReport) error {
	if c.calls == nil || len(c.calls) >= maxCalls {
		c.calls = map[*http.Request]lastAttempt{}
	}
	prev, seen := c.calls[r.Request]
	c.calls[r.Request] = lastAttempt{number: r.Number, resend: r.Call.Action == fsm.ActionResend}
	switch {
	case r.Number < 1:
		return fmt.Errorf("attempt number %d", r.Number)
	case r.Number == 1 && seen:
		// A new call may reuse a request value (a retry loop above the
		// Transport): it starts over.
		return nil
	case r.Number > 1 && seen && (prev.number != r.Number-1 || !prev.resend):
		return fmt.Errorf("attempt %d of %s %s followed attempt %d, which decided %v, not a resend",
			r.Number, r.Request.Method, r.Request.URL, prev.number, map[bool]string{true: "resend", false: "no resend"}[prev.resend])
	}
	return nil
}

// Checked returns the number of attempt reports checked.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

// Err returns nil when every report checked out, else an error listing
// the first MaxFailures failures and the count of all.
func (c *Checker) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == 0 {
		return nil
	}
	return fmt.Errorf("tracecheck: %d of %d attempt traces failed:\n%s", c.failed, c.checked, strings.Join(c.failures, "\n"))
}

// Check checks one attempt report on its own: its trace parses to the
// events it lists, fsm and the model agree after every event, no event
// is out of order, the replayed decision is the reported one, and the
// call's decision after it is one the call rules allow.
func Check(r replaysafe.AttemptReport) error {
	tr, err := spec.ParseTrace(strings.NewReader(r.Trace))
	if err != nil {
		return fail(r, fmt.Errorf("the trace does not parse: %w", err))
	}
	if tr.Request != r.Facts {
		return fail(r, fmt.Errorf("the trace's request %v is not the report's %v", tr.Request, r.Facts))
	}
	if len(tr.Steps) != len(r.Events) {
		return fail(r, fmt.Errorf("the trace has %d events, the report %d", len(tr.Steps), len(r.Events)))
	}
	mt := modeltest.Trace{Request: tr.Request, Limits: tr.Limits, Start: tr.Start}
	for i, s := range tr.Steps {
		if s.Event.Kind != r.Events[i].Kind {
			return fail(r, fmt.Errorf("event %d is %v in the trace, %v in the report", i+1, s.Event.Kind, r.Events[i].Kind))
		}
		mt.Events = append(mt.Events, s.Event)
	}
	decisions, _, err := modeltest.Run(mt)
	if err != nil {
		var mm *modeltest.Mismatch
		if errors.As(err, &mm) {
			return fail(r, fmt.Errorf("fsm and the model disagree: %w", err))
		}
		return fail(r, err)
	}
	if len(decisions) == 0 {
		if r.Decision != (fsm.Decision{}) {
			return fail(r, fmt.Errorf("no event, but the report decided %v", r.Decision))
		}
		return nil
	}
	final := decisions[len(decisions)-1]
	for i, d := range decisions {
		if d.Rule == fsm.RuleInvalidOrder {
			return fail(r, fmt.Errorf("event %d (%v) is one the transition table forbids", i+1, mt.Events[i]))
		}
	}
	if final != r.Decision {
		return fail(r, fmt.Errorf("the replayed decision is %v, the transport reported %v", final, r.Decision))
	}
	if err := checkCall(r); err != nil {
		return fail(r, err)
	}
	return nil
}

func fail(r replaysafe.AttemptReport, err error) error {
	return fmt.Errorf("attempt %d of %s %s: %w\n%s", r.Number, r.Request.Method, r.Request.URL, err, indent(r.Trace))
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ")
}

// checkCall checks how the call went on after attempt r (r.Call) against
// the attempt's own decision: the automatic resend only where the attempt
// machine resent, a configured retry of a status or an ambiguous failure
// only for a request whose copies have no further effect, and never a
// retry of a body that cannot be produced again.
func checkCall(r replaysafe.AttemptReport) error {
	d, cd, f := r.Decision, r.Call, r.Facts
	eligible := f.Method.Idempotent() || f.IdempotencyKey
	switch {
	case !cd.Action.Final():
		return fmt.Errorf("no call decision after the attempt (%v)", cd)
	case cd.Action == fsm.ActionResend && !cd.Retry && (d.Action != fsm.ActionResend || cd.Rule != d.Rule):
		return fmt.Errorf("the call resent at once by %v after the attempt decided %v", cd.Rule, d)
	case cd.Action == fsm.ActionResend && d.Action == fsm.ActionFail && !cd.Retry:
		return fmt.Errorf("a failed attempt was resent without a retry decision (%v)", cd)
	case cd.Action == fsm.ActionResend && (cd.Rule == fsm.RuleRetryStatus || cd.Rule == fsm.RuleRetryAmbiguous) && (!eligible || !f.Body.Reproducible()):
		return fmt.Errorf("%v retried a request whose copies may have an effect (%v)", cd.Rule, f)
	case cd.Action == fsm.ActionResend && f.Body == fsm.BodyOneShotConsumed:
		return fmt.Errorf("%v sent a consumed one-shot body again", cd.Rule)
	case d.Action == fsm.ActionDeliver && cd.Action == fsm.ActionFail:
		return fmt.Errorf("a delivered attempt ended the call in failure (%v)", cd)
	}
	return nil
}
