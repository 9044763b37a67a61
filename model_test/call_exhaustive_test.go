package modeltest

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// TestCallExhaustive walks every call over a representative alphabet of
// attempt outcomes, for every combination of request facts and a few
// policies, and compares fsm.Call with the call model after every outcome:
// its decision, its attempt count and its next attempt's facts. On every
// call whose outcomes the attempt rules can decide (AttemptMayEnd) it
// checks CallInvariants on fsm's decisions; on every call, possible or
// not, it checks them on the model's.
//
// It explores distinct states: fsm.Call is comparable, and two calls that
// leave it, and the model's reading of the outcomes (attempts, whether
// the body was read, whether a 425 came, its decision), in the same state
// have the same futures, so only the first is extended. A decided call is
// fed one outcome of each sort, which must change nothing, and is not
// extended.
//
// An outcome the attempt rules cannot decide for the facts Next gave
// (AttemptMayEnd false) is compared with the model, which refuses any copy
// it would make, but the walk does not go on past it: there fsm.Call
// differs from the text only as CD3 says.
//
// Depth: a call ends by itself after at most five attempts (the largest
// policy); under -race and -short the walk stops after callShortDepth
// outcomes.
const callShortDepth = 3

// callPolicies: none, and one, two, three and five attempts with and
// without retryable statuses. The cap is reached before the fifth
// attempt (100ms, 200ms, 300ms, 300ms), and MaxRetryAfter lies between
// the alphabet's two Retry-After values.
var callPolicies = func() []fsm.Retry {
	out := []fsm.Retry{{}}
	for _, n := range []uint8{1, 2, 3, 5} {
		for _, s := range []fsm.StatusSet{fsm.Statuses(429, 503), {}} {
			out = append(out, fsm.Retry{Attempts: n, Statuses: s, Base: 100 * time.Millisecond, Cap: 300 * time.Millisecond, MaxRetryAfter: 10 * time.Second})
		}
	}
	return out
}()

// callRequests: GET, POST and PUT, with and without a key, each body that
// a caller can hand over, resending on and off, with and without a retry
// policy of the caller's own.
func callRequests() []fsm.Request {
	var out []fsm.Request
	for _, m := range []fsm.Method{fsm.MethodGET, fsm.MethodPOST, fsm.MethodPUT} {
		for _, b := range []fsm.BodyKind{fsm.BodyNone, fsm.BodyBuffered, fsm.BodyOneShotUntouched} {
			for flags := range 8 {
				out = append(out, fsm.Request{Method: m, Body: b, IdempotencyKey: flags&1 != 0, ResendOff: flags&2 != 0, RetryPolicy: flags&4 != 0})
			}
		}
	}
	return out
}

// callLetters is the outcome alphabet: a delivered 200, 425, 429, 503 and
// 504 without a Retry-After and with one of 1s and 1h; a failure by every
// attempt rule that fails (RS03–RS11, RS17–RS19, RS21); a resend by every
// one that resends (RS12–RS16, RS20); each with and without the body
// read, the budget on and off, and jitter 0 and 0.5.
var callLetters = func() []fsm.Outcome {
	var base []fsm.Outcome
	for _, status := range []int{200, 425, 429, 503, 504} {
		for _, ra := range []time.Duration{-1, time.Second, time.Hour} {
			o := fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}, Status: status}
			if ra >= 0 {
				o.RetryAfter, o.HasRetryAfter = ra, true
			}
			base = append(base, o)
		}
	}
	for _, r := range attemptEndRules {
		a := fsm.ActionFail
		if evidenceResendRule(r) || r == fsm.RuleAmbiguousIdempotentResend {
			a = fsm.ActionResend
		}
		base = append(base, fsm.Outcome{Decision: fsm.Decision{Action: a, Rule: r, Conn: fsm.ConnDiscard}})
	}
	var out []fsm.Outcome
	for _, o := range base {
		for variant := range 8 {
			o := o
			if variant&1 != 0 {
				o.Facts |= fsm.FactBodyRead
			}
			o.Budget = variant&2 == 0
			if variant&4 != 0 {
				o.Jitter = 0.5
			}
			out = append(out, o)
		}
	}
	return out
}()

// decidedLetters are fed to a decided call: one outcome of each sort
// (a 425, a retryable status with a Retry-After, a failed dial, an
// ambiguous failure after the body was read, an evidence resend, an
// ambiguous resend without budget).
var decidedLetters = []fsm.Outcome{
	{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: fsm.StatusTooEarly, Budget: true},
	{Decision: fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}, Status: 503, RetryAfter: time.Second, HasRetryAfter: true, Budget: true, Jitter: 0.5},
	{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleAcquireFailed}, Budget: true},
	{Decision: fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleTimeout}, Facts: fsm.FactBodyRead, Budget: true, Jitter: 0.5},
	{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceNothingWritten}, Budget: true},
	{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend}},
}

type callKey struct {
	c            fsm.Call
	reading      CallReading
	possible     bool
	depth        int8
	read, early  bool
	text         fsm.CallDecision
	textAttempts int8
}

type callNode struct {
	key      callKey
	outcomes []fsm.Outcome
	steps    []CallStep // fsm's
	text     []CallStep // the model's, reading the text
}

type callCounts struct {
	configs, states, closed, edges, possibleEdges, impossibleEdges, frontierLeft, maxDepth int64
	diverged                                                                               map[string]int64
}

func (c *callCounts) add(o *callCounts) {
	c.configs += o.configs
	c.states += o.states
	c.closed += o.closed
	c.edges += o.edges
	c.possibleEdges += o.possibleEdges
	c.impossibleEdges += o.impossibleEdges
	c.frontierLeft += o.frontierLeft
	c.maxDepth = max(c.maxDepth, o.maxDepth)
	for id, n := range o.diverged {
		c.diverged[id] += n
	}
}

func TestCallExhaustive(t *testing.T) {
	depth := 1 << 30
	if testing.Short() || raceEnabled {
		depth = callShortDepth
	}
	requireFullDepth(t, depth < 1<<30)
	type config struct {
		req fsm.Request
		p   fsm.Retry
	}
	var configs []config
	for _, p := range callPolicies {
		for _, req := range callRequests() {
			configs = append(configs, config{req, p})
		}
	}
	var (
		failures atomic.Int64
		mu       sync.Mutex
		wg       sync.WaitGroup
		total    = callCounts{diverged: map[string]int64{}}
	)
	report := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			mu.Lock()
			t.Errorf(format, args...)
			mu.Unlock()
		}
	}
	started := time.Now()
	work := make(chan config)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := callCounts{diverged: map[string]int64{}}
			for c := range work {
				exploreCall(c.req, c.p, depth, &mine, report)
			}
			mu.Lock()
			total.add(&mine)
			mu.Unlock()
		}()
	}
	for _, c := range configs {
		if failures.Load() > 5 {
			break
		}
		work <- c
	}
	close(work)
	wg.Wait()
	limit := "none"
	if depth < 1<<30 {
		limit = "after attempt " + strconv.Itoa(depth)
	}
	t.Logf("call exhaustive: %d of %d request/policy combinations in %v, %d letters, depth limit %s: "+
		"%d distinct states of calls going on, %d of decided calls (each fed %d late outcomes), %d outcome sequences (edges) compared with the model "+
		"(%d the attempt rules can produce, invariants checked on fsm's decisions and the model's; %d they cannot, invariants checked on the model's), "+
		"deepest call going on after %d outcomes, %d states left at the depth limit",
		total.configs, len(configs), time.Since(started).Round(time.Millisecond), len(callLetters), limit,
		total.states, total.closed, len(decidedLetters), total.edges, total.possibleEdges, total.impossibleEdges, total.maxDepth, total.frontierLeft)
	for _, d := range CallDivergences {
		if n := total.diverged[d.ID]; n > 0 {
			t.Logf("  %d sequences explained by known divergence %s", n, d.ID)
		}
	}
	if failures.Load() > 0 {
		return // the walk stops after a few failures; they say why
	}
	for _, p := range (walk{configs: len(configs), walked: int(total.configs), left: total.frontierLeft, full: depth == 1<<30}).problems() {
		t.Error(p)
	}
	// A call ends after at most five attempts (the largest policy): the
	// walk must have reached calls going on after four outcomes, where
	// RS26, the budget and the backoff of the fifth attempt decide.
	if depth == 1<<30 && total.maxDepth < 4 {
		t.Errorf("the deepest call going on was after %d outcomes, want 4", total.maxDepth)
	}
}

// exploreCall walks the calls of one request and policy breadth first.
func exploreCall(req fsm.Request, p fsm.Retry, depth int, counts *callCounts, report func(string, ...any)) {
	root := callNode{key: callKey{c: fsm.NewCall(req, &p), possible: true}}
	if got, want := ObserveCall(&root.key.c), ModelCall(CallTrace{Request: req, Policy: p}, CallReading{}); got != want {
		report("before any outcome: fsm %s, model %s\n%s", describeCall(got), describeCall(want), indent(FormatCallTrace(CallTrace{Request: req, Policy: p}, nil)))
		return
	}
	seen := map[callKey]bool{root.key: true}
	frontier := []callNode{root}
	for d := 0; d < depth && len(frontier) > 0; d++ {
		var next []callNode
		for _, node := range frontier {
			for _, o := range callLetters {
				child, ok := stepCall(req, p, node, o, counts, report)
				if !ok {
					continue
				}
				if child.key.c.Decision().Action != fsm.ActionResend {
					if !seen[child.key] {
						seen[child.key] = true
						counts.closed++
						checkDecidedCall(req, p, child, counts, report)
					}
					continue
				}
				if seen[child.key] || !child.key.possible {
					continue // an impossible outcome is checked, not extended
				}
				seen[child.key] = true
				counts.states++
				counts.maxDepth = max(counts.maxDepth, int64(d+1))
				next = append(next, child)
			}
		}
		frontier = next
	}
	counts.frontierLeft += int64(len(frontier))
	counts.configs++
}

// stepCall feeds o to node's call and checks the result; ok is false when
// the check failed.
func stepCall(req fsm.Request, p fsm.Retry, node callNode, o fsm.Outcome, counts *callCounts, report func(string, ...any)) (callNode, bool) {
	counts.edges++
	c := node.key.c
	facts := c.Next()
	d := c.Step(o)
	got := ObserveCall(&c)
	tr := CallTrace{Request: req, Policy: p, Outcomes: append(clone(node.outcomes), o)}
	ids, rd, err := CheckCall(tr, got, node.key.reading)
	if err != nil {
		report("%v", err)
		return callNode{}, false
	}
	for _, id := range ids {
		if !hasID(idsOf(node.key.reading), id) {
			counts.diverged[id]++
		}
	}
	text := ModelCall(tr, CallReading{})
	textFacts := ModelCall(CallTrace{Request: req, Policy: p, Outcomes: node.outcomes}, CallReading{}).Next
	possible := node.key.possible && AttemptMayEnd(facts, o)
	child := callNode{
		key: callKey{
			c: c, reading: rd, possible: possible, depth: node.key.depth + 1,
			read: bodyReadBy(tr.Outcomes), early: tooEarlyBefore(tr.Outcomes),
			text: text.Decision, textAttempts: int8(text.Attempts),
		},
		outcomes: tr.Outcomes,
		steps:    append(clone(node.steps), CallStep{Facts: facts, Outcome: o, Decision: d, Attempts: got.Attempts}),
		text:     append(clone(node.text), CallStep{Facts: textFacts, Outcome: o, Decision: text.Decision, Attempts: text.Attempts}),
	}
	if err := CallInvariants(req, p, child.text); err != nil {
		report("the model, reading the text, breaks an invariant: %v\ncall:\n%s", err, indent(FormatCallTrace(tr, &text.Decision)))
		return callNode{}, false
	}
	if possible {
		counts.possibleEdges++
		if err := CallInvariants(req, p, child.steps); err != nil {
			report("fsm.Call breaks an invariant: %v\ncall:\n%s", err, indent(FormatCallTrace(tr, &d)))
			return callNode{}, false
		}
	} else {
		counts.impossibleEdges++
	}
	return child, true
}

// checkDecidedCall feeds each of decidedLetters to a decided call:
// neither fsm.Call (its whole state) nor the model may move.
func checkDecidedCall(req fsm.Request, p fsm.Retry, node callNode, counts *callCounts, report func(string, ...any)) {
	for _, o := range decidedLetters {
		counts.edges++
		after := node.key.c
		after.Step(o)
		tr := CallTrace{Request: req, Policy: p, Outcomes: append(clone(node.outcomes), o)}
		if after != node.key.c {
			report("a Step after the decision %v changed the call:\n%s", node.key.c.Decision(), indent(FormatCallTrace(tr, nil)))
			return
		}
		if got, want := ObserveCall(&after), ModelCall(tr, node.key.reading); got != want {
			report("%v", &CallMismatch{Trace: tr, Got: got, Want: want})
			return
		}
	}
}

func idsOf(rd CallReading) []string {
	for _, r := range callReadings {
		if r.rd == rd {
			return r.ids
		}
	}
	return nil
}

func hasID(ids []string, id string) bool {
	for _, have := range ids {
		if have == id {
			return true
		}
	}
	return false
}
