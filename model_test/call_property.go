package modeltest

import (
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"pgregory.net/rapid"
)

// CallProperty is the rapid state-machine property that no policy can
// produce a copy the rules forbid. It draws request facts and a retry
// policy (any attempt count from none to eight, any set of common
// statuses, base, cap and MaxRetryAfter from zero to an hour), then feeds
// the call outcomes the attempt rules can decide for the facts Next gives
// (AttemptMayEnd). Its named actions: "deliver" a response (a status,
// perhaps a Retry-After), "fail" by an attempt rule that fails, "resend"
// by one that resends, each with the body read or not, the budget on or
// off and a jitter in [0, 1); "afterEnd" feeds any outcome to a decided
// call; "newCall" starts over once the call is decided. After every action
// the check compares fsm.Call with the call model (CheckCall, known
// divergences named) and asserts CallInvariants.
//
// The tests run it with rapid.Check; rapid.MakeFuzz makes it a fuzz
// target.
func CallProperty(t *rapid.T) { callProperty(t, nil) }

// callStats counts what runs of the call property reached.
type callStats struct {
	calls, outcomes int
	rules           [fsm.RuleCount]int // call decisions by rule
	retries         int                // decisions with Retry set
	diverged        map[string]int
}

var (
	propertyStatuses = []int{200, 204, 404, 408, 425, 429, 500, 502, 503, 504}
	drawnStatuses    = append([]int{425, 425, 503}, propertyStatuses...) // a second 425 (RS22) comes up
	propertyWaits    = []time.Duration{0, time.Millisecond, 100 * time.Millisecond, time.Second, 30 * time.Second, time.Hour}
)

func drawCallSetup(t *rapid.T) (fsm.Request, fsm.Retry) {
	req := fsm.Request{
		Method:         fsm.Method(rapid.IntRange(0, int(fsm.MethodOther)).Draw(t, "method")),
		IdempotencyKey: rapid.Bool().Draw(t, "key"),
		Body:           fsm.BodyKind(rapid.IntRange(0, int(fsm.BodyOneShotConsumed)).Draw(t, "body")),
		RetryPolicy:    rapid.IntRange(0, 7).Draw(t, "retryPolicy") == 0,
		ResendOff:      rapid.IntRange(0, 7).Draw(t, "resendOff") == 0,
		Attempt:        fsm.Attempt(rapid.IntRange(0, 1).Draw(t, "attemptIgnored")),
	}
	var codes []int
	for _, c := range propertyStatuses {
		if rapid.IntRange(0, 2).Draw(t, "listed") == 0 {
			codes = append(codes, c)
		}
	}
	wait := rapid.SampledFrom(propertyWaits)
	p := fsm.Retry{
		Attempts:      uint8(rapid.SampledFrom([]int{0, 0, 1, 2, 3, 4, 5, 8}).Draw(t, "attempts")),
		Statuses:      fsm.Statuses(codes...),
		Base:          wait.Draw(t, "base"),
		Cap:           wait.Draw(t, "cap"),
		MaxRetryAfter: wait.Draw(t, "maxRetryAfter"),
	}
	return req, p
}

// callHarness is the property's state: the call machine, what was fed to
// it, fsm's steps, and the reading that explains fsm so far.
type callHarness struct {
	req     fsm.Request
	p       fsm.Retry
	c       fsm.Call
	tr      CallTrace
	steps   []CallStep
	reading CallReading
	ids     []string
	err     error
	stats   *callStats
}

func (h *callHarness) begin(req fsm.Request, p fsm.Retry) {
	*h = callHarness{req: req, p: p, c: fsm.NewCall(req, &p), tr: CallTrace{Request: req, Policy: p}, stats: h.stats}
	if h.stats != nil {
		h.stats.calls++
	}
	h.ids, h.reading, h.err = CheckCall(h.tr, ObserveCall(&h.c), CallReading{})
}

func (h *callHarness) decided() bool {
	return h.c.Attempts() > 0 && h.c.Decision().Action != fsm.ActionResend
}

// drawOutcome draws the parts of an outcome every sort has.
func drawOutcome(t *rapid.T, d fsm.Decision) fsm.Outcome {
	o := fsm.Outcome{Decision: d, Budget: rapid.IntRange(0, 3).Draw(t, "budget") > 0}
	if rapid.IntRange(0, 3).Draw(t, "bodyRead") == 0 {
		o.Facts |= fsm.FactBodyRead
	}
	if rapid.Bool().Draw(t, "jittered") {
		o.Jitter = float64(rapid.IntRange(0, 999).Draw(t, "jitterPermille")) / 1000
	}
	return o
}

// drawByRule draws an outcome of the action with one of the rules the
// attempt rules can end the next attempt with; ok is false when there is
// none.
func (h *callHarness) drawByRule(t *rapid.T, a fsm.Action) (fsm.Outcome, bool) {
	o := drawOutcome(t, fsm.Decision{Action: a, Conn: fsm.ConnDiscard})
	facts := h.c.Next()
	var rules []fsm.Rule
	for _, r := range attemptEndRules {
		o.Decision.Rule = r
		if AttemptMayEnd(facts, o) {
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		return o, false
	}
	o.Decision.Rule = rapid.SampledFrom(rules).Draw(t, "rule")
	return o, true
}

func (h *callHarness) feed(t *rapid.T, o fsm.Outcome) {
	facts := h.c.Next()
	d := h.c.Step(o)
	h.tr.Outcomes = append(h.tr.Outcomes, o)
	got := ObserveCall(&h.c)
	h.steps = append(h.steps, CallStep{Facts: facts, Outcome: o, Decision: d, Attempts: got.Attempts})
	h.ids, h.reading, h.err = CheckCall(h.tr, got, h.reading)
	t.Logf("attempt %d (%v): %s -> %v", len(h.steps), facts, formatOutcome(o), d)
	if h.stats != nil {
		h.stats.outcomes++
		if len(h.steps) == got.Attempts {
			h.stats.rules[d.Rule]++
			if d.Retry {
				h.stats.retries++
			}
		}
	}
}

func callProperty(t *rapid.T, stats *callStats) {
	h := &callHarness{stats: stats}
	h.begin(drawCallSetup(t))
	t.Logf("%v\n%v", h.req, h.p)
	t.Repeat(map[string]func(*rapid.T){
		"deliver": func(t *rapid.T) {
			if h.decided() {
				t.Skip("the call is decided")
			}
			o := drawOutcome(t, fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse})
			o.Status = rapid.SampledFrom(drawnStatuses).Draw(t, "status")
			if rapid.Bool().Draw(t, "hasRetryAfter") {
				o.RetryAfter, o.HasRetryAfter = rapid.SampledFrom(propertyWaits).Draw(t, "retryAfter"), true
			}
			h.feed(t, o)
		},
		"fail": func(t *rapid.T) {
			if h.decided() {
				t.Skip("the call is decided")
			}
			o, ok := h.drawByRule(t, fsm.ActionFail)
			if !ok {
				t.Skip("no failure rule fits")
			}
			h.feed(t, o)
		},
		"resend": func(t *rapid.T) {
			if h.decided() {
				t.Skip("the call is decided")
			}
			o, ok := h.drawByRule(t, fsm.ActionResend)
			if !ok {
				t.Skip("the attempt rules cannot resend this attempt")
			}
			h.feed(t, o)
		},
		"afterEnd": func(t *rapid.T) {
			if !h.decided() {
				t.Skip("the call goes on")
			}
			a := rapid.SampledFrom([]fsm.Action{fsm.ActionDeliver, fsm.ActionFail, fsm.ActionResend}).Draw(t, "lateAction")
			o := drawOutcome(t, fsm.Decision{Action: a, Rule: fsm.Rule(rapid.IntRange(0, int(fsm.RuleCount)-1).Draw(t, "lateRule"))})
			if a == fsm.ActionDeliver {
				o.Status = rapid.SampledFrom(propertyStatuses).Draw(t, "lateStatus")
			}
			h.feed(t, o)
		},
		"newCall": func(t *rapid.T) {
			if !h.decided() {
				t.Skip("the call goes on")
			}
			h.begin(drawCallSetup(t))
			t.Logf("new call: %v\n%v", h.req, h.p)
		},
		"": func(t *rapid.T) {
			if h.err != nil {
				t.Fatal(h.err)
			}
			if stats != nil {
				for _, id := range h.ids {
					stats.diverged[id]++
				}
			}
			if err := CallInvariants(h.req, h.p, h.steps); err != nil {
				t.Fatalf("%v\ncall:\n%s", err, indent(FormatCallTrace(h.tr, nil)))
			}
		},
	})
}
