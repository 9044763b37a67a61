package modeltest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// TestExhaustive walks every trace over the whole event alphabet (every
// EventKind, the zero kind and one past the vocabulary included, with
// parameter variants) for every combination of request facts and two sets
// of limits, and compares fsm with the model after every event.
//
// It explores distinct states rather than raw sequences: two traces that
// leave the machine in the same state (fsm.Machine is comparable), at the
// same instant, having seen the same progress kinds, and agreeing with the
// same model reading, have the same futures, so only the first one found is
// extended. Every edge out of every state is still compared with the model
// on its own whole trace. The clock moves only by ticks, which land now,
// just before, at and just after a deadline, so that instants (the
// timestamps in the machine) stay few and states repeat. A closed attempt
// is fed one event of each sort, which must change nothing, and is not
// extended further.
//
// Depth: exhaustiveDepth normally, which is past the deepest state (the
// walk ends when no new state appears); smaller under -race and -short.
// The whole walk is time-boxed by exhaustiveBudget, and running out of it
// fails the test: a walk that did not finish checked less than it claims.
// At full depth no state may be left at the depth limit either.
const (
	exhaustiveDepth      = 32
	exhaustiveRaceDepth  = 3
	exhaustiveShortDepth = 4
	exhaustiveBudget     = 100 * time.Second
)

// fixedLetters is the alphabet apart from ticks, which are made per state
// because they depend on the deadlines.
var fixedLetters = func() []fsm.Event {
	out := []fsm.Event{
		{Kind: fsm.EventInvalid},
		{Kind: fsm.EventKind(fsm.EventKinds)}, // one past the vocabulary
	}
	for _, reused := range []bool{false, true} {
		for _, p := range []fsm.Proto{fsm.ProtoH1, fsm.ProtoH2, fsm.ProtoH3} {
			out = append(out, fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: p})
		}
	}
	// Early data: a fresh HTTP/3 connection in its handshake, and a reused
	// one (a second request on a connection still in its handshake).
	for _, reused := range []bool{false, true} {
		out = append(out, fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH3, Early: true})
	}
	for _, k := range []fsm.EventKind{
		fsm.EventHandedBack, fsm.EventFirstByteWritten, fsm.EventBodyRead, fsm.EventRequestWritten,
		fsm.EventFirstResponseByte, fsm.EventInformational, fsm.EventFinalHeaders, fsm.EventResponseComplete,
		fsm.EventClosed, fsm.EventReset, fsm.EventTLSFailure, fsm.EventMalformed, fsm.EventCanceled,
		fsm.EventRefusedStream, fsm.EventRequestRejected, fsm.EventAcquireFailed, fsm.EventLocalFailure,
		fsm.EventEarlyAccepted, fsm.EventEarlyRejected,
	} {
		out = append(out, fsm.Event{Kind: k})
	}
	for p := fsm.PhaseNone; p <= fsm.PhaseBody; p++ {
		out = append(out, fsm.Event{Kind: fsm.EventTimeout, Phase: p})
	}
	for _, last := range []uint64{3, 5, 7} { // below, at and above our stream 5
		out = append(out, fsm.Event{Kind: fsm.EventH2GoAway, Stream: 5, Boundary: last})
	}
	out = append(out, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 8}) // boundary not seen
	for _, b := range []uint64{4, 8, 12} {                           // below, at and above our stream 8
		out = append(out, fsm.Event{Kind: fsm.EventH3GoAway, Stream: 8, Boundary: b, BoundaryKnown: true})
	}
	return out
}()

// closedLetters are fed to a closed machine: one of each sort (invalid,
// progress, delivery, evidence, failure, timeout, a late tick).
var closedLetters = []fsm.Event{
	{Kind: fsm.EventInvalid},
	{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH2},
	{Kind: fsm.EventFirstByteWritten},
	{Kind: fsm.EventFinalHeaders},
	{Kind: fsm.EventResponseComplete},
	{Kind: fsm.EventHandedBack},
	{Kind: fsm.EventRefusedStream},
	{Kind: fsm.EventClosed},
	{Kind: fsm.EventLocalFailure},
	{Kind: fsm.EventEarlyRejected},
	{Kind: fsm.EventTimeout, Phase: fsm.PhaseBody},
	{Kind: fsm.EventTick, At: 1000 * ms},
}

// requests is every combination of request facts.
func requests() []fsm.Request {
	var out []fsm.Request
	for m := fsm.MethodUnknown; m <= fsm.MethodOther; m++ {
		for b := fsm.BodyNone; b <= fsm.BodyOneShotConsumed; b++ {
			for flags := range 32 {
				out = append(out, fsm.Request{
					Method:         m,
					Body:           b,
					IdempotencyKey: flags&1 != 0,
					RetryPolicy:    flags&2 != 0,
					ResendOff:      flags&4 != 0,
					Attempt:        fsm.Attempt(flags >> 3 & 1),
					EarlyKeyed:     flags&16 != 0,
				})
			}
		}
	}
	return out
}

// limitSets: none, and a different limit for each phase so that a
// deadline taken from the wrong phase shows.
var limitSets = []fsm.Limits{
	{},
	{Acquire: 10 * ms, Write: 20 * ms, Header: 30 * ms, Body: 40 * ms},
}

type exhaustiveKey struct {
	m       fsm.Machine
	now     fsm.Instant
	seen    uint32 // the progress kinds seen, so that a fact fsm forgot still tells states apart
	reading int8   // the model reading (ReadingAt) the trace agrees with
}

type exhaustiveNode struct {
	key       exhaustiveKey
	events    []fsm.Event
	decisions []fsm.Decision
}

type exhaustiveCounts struct {
	configs, states, edges, frontierLeft, maxDepth int64
	diverged                                       [8]int64
}

func (c *exhaustiveCounts) add(o *exhaustiveCounts) {
	c.configs += o.configs
	c.states += o.states
	c.edges += o.edges
	c.frontierLeft += o.frontierLeft
	c.maxDepth = max(c.maxDepth, o.maxDepth)
	for i := range c.diverged {
		c.diverged[i] += o.diverged[i]
	}
}

type exhaustiveConfig struct {
	req fsm.Request
	lim fsm.Limits
}

func TestExhaustive(t *testing.T) {
	if Readings() > len(exhaustiveCounts{}.diverged) {
		t.Fatalf("exhaustiveCounts holds %d readings, there are %d", len(exhaustiveCounts{}.diverged), Readings())
	}
	depth := exhaustiveDepth
	switch {
	case testing.Short():
		depth = exhaustiveShortDepth
	case raceEnabled:
		depth = exhaustiveRaceDepth
	}
	requireFullDepth(t, depth < exhaustiveDepth)
	var configs []exhaustiveConfig
	for _, lim := range limitSets {
		for _, req := range requests() {
			configs = append(configs, exhaustiveConfig{req, lim})
		}
	}
	counts, partial := exhaust(t, configs, depth, exhaustiveBudget)
	t.Logf("exhaustive: depth %d, %d of %d request/limit combinations, %d letters plus ticks: "+
		"%d distinct states, %d traces (edges) compared with the model, deepest new state at depth %d, %d states left at the depth limit",
		depth, counts.configs, len(configs), len(fixedLetters), counts.states, counts.edges, counts.maxDepth, counts.frontierLeft)
	for i := 1; i < Readings(); i++ {
		if n := counts.diverged[i]; n > 0 {
			_, ids := ReadingAt(i)
			t.Logf("  %d traces explained by known divergence %v", n, ids)
		}
	}
	if t.Failed() {
		return // the walk stops after a few mismatches; they say why
	}
	for _, p := range (walk{configs: len(configs), walked: int(counts.configs), left: counts.frontierLeft,
		full: depth == exhaustiveDepth, partial: partial, budget: exhaustiveBudget}).problems() {
		t.Error(p)
	}
}

// TestExhaustiveTimeBoxIsAFailure: a walk whose time box ran out, or a
// full-depth walk that left states at its depth limit, is a failure of
// TestExhaustive; the same walk with time to spare and depth enough is
// not.
func TestExhaustiveTimeBoxIsAFailure(t *testing.T) {
	configs := []exhaustiveConfig{
		{fsm.Request{Method: fsm.MethodGET}, limitSets[1]},
		{fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotUntouched}, limitSets[1]},
	}
	result := func(depth int, budget time.Duration) walk {
		counts, partial := exhaust(t, configs, depth, budget)
		return walk{configs: len(configs), walked: int(counts.configs), left: counts.frontierLeft,
			full: depth == exhaustiveDepth, partial: partial, budget: budget}
	}
	// A time box that has already run out: nothing is walked.
	w := result(exhaustiveDepth, 0)
	if p := w.problems(); !w.partial || w.walked != 0 || len(p) != 1 || !strings.Contains(p[0], "time box of 0s ran out after 0 of 2") {
		t.Errorf("an expired time box: %+v, problems %q", w, p)
	}
	// Time to spare: the two combinations are walked to the end.
	w = result(exhaustiveDepth, exhaustiveBudget)
	if p := w.problems(); w.partial || w.walked != 2 || w.left != 0 || len(p) != 0 {
		t.Errorf("a full walk: %+v, problems %q", w, p)
	}
	// Two events deep, states are left at the limit: a problem only for
	// a walk that claims full depth.
	w = result(2, exhaustiveBudget)
	if w.left == 0 || len(w.problems()) != 0 {
		t.Errorf("a walk of depth 2: %+v, problems %q", w, w.problems())
	}
	w.full = true
	if p := w.problems(); len(p) != 1 || !strings.Contains(p[0], "left at the depth limit") {
		t.Errorf("states left at full depth: problems %q", p)
	}
	// Combinations not walked without the time box running out.
	if p := (walk{configs: 3, walked: 2}).problems(); len(p) != 1 || p[0] != "walked 2 of 3 combinations" {
		t.Errorf("a combination not walked: problems %q", p)
	}
}

// walk is what an exhaustive walk covered, for the checks that it
// covered what it claims.
type walk struct {
	configs, walked int   // the combinations to walk, and walked to the end
	left            int64 // states left at the depth limit
	full            bool  // the walk ran at full depth
	partial         bool  // the time box ran out
	budget          time.Duration
}

// problems says why the walk checked less than it should have: its time
// box ran out, a combination was not walked to the end, or, at full
// depth, a state was left unexplored. A walk cut short by its own
// failures (it stops after a few) is reported by them, not here.
func (w walk) problems() []string {
	var out []string
	if w.partial {
		out = append(out, fmt.Sprintf("the time box of %v ran out after %d of %d combinations: the walk is incomplete", w.budget, w.walked, w.configs))
	} else if w.walked != w.configs {
		out = append(out, fmt.Sprintf("walked %d of %d combinations", w.walked, w.configs))
	}
	if w.full && w.left > 0 {
		out = append(out, fmt.Sprintf("%d states left at the depth limit of a full-depth walk: raise the depth", w.left))
	}
	return out
}

// fullDepthEnv, set to 1, makes the exhaustive walks fail instead of
// running at a reduced depth (-race, -short): .ci/run sets it for the
// step that runs them at full depth, so that the step cannot quietly
// check less.
const fullDepthEnv = "REPLAYSAFE_EXHAUSTIVE_FULL_DEPTH"

func requireFullDepth(t *testing.T, reduced bool) {
	t.Helper()
	if reduced && os.Getenv(fullDepthEnv) == "1" {
		t.Fatalf("%s=1, but the walk would run at a reduced depth (race detector %v, -short %v)", fullDepthEnv, raceEnabled, testing.Short())
	}
}

// exhaust explores every config, on as many goroutines as there are
// processors, until done or the budget runs out (partial is then set).
func exhaust(t *testing.T, configs []exhaustiveConfig, depth int, budget time.Duration) (counts exhaustiveCounts, partial bool) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var (
		failures atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
	)
	report := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			mu.Lock()
			t.Errorf(format, args...)
			mu.Unlock()
		}
	}
	work := make(chan exhaustiveConfig)
	started := time.Now()
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine exhaustiveCounts
			for c := range work {
				explore(ctx, c.req, c.lim, depth, &mine, report)
			}
			mu.Lock()
			counts.add(&mine)
			mu.Unlock()
		}()
	}
	for _, c := range configs {
		if ctx.Err() != nil || failures.Load() > 5 {
			break
		}
		work <- c
	}
	close(work)
	wg.Wait()
	t.Logf("walked %d configs in %v", counts.configs, time.Since(started).Round(time.Millisecond))
	return counts, ctx.Err() != nil
}

// extendPast says whether the walk goes on past an edge that only a
// divergence explains. D1 (fsm takes the zero kind as a no-op) leads to
// machine states that other traces reach anyway; D2 changes which
// deadline applies after an early response, so the walk follows fsm there
// under D2's reading.
func extendPast(ids []string) bool {
	for _, id := range ids {
		if id != "D2" {
			return false
		}
	}
	return true
}

// explore walks the state graph of one request and limit set breadth
// first, to at most depth events. Along every path it extends, fsm has
// agreed with the model under the node's reading, so the model's previous
// decision is fsm's and Next extends the trace by one event.
func explore(ctx context.Context, req fsm.Request, lim fsm.Limits, depth int, counts *exhaustiveCounts, report func(string, ...any)) {
	root := exhaustiveNode{key: exhaustiveKey{m: fsm.New(req, lim, 0)}}
	seen := map[exhaustiveKey]bool{root.key: true}
	closed := map[exhaustiveKey]bool{} // closed machines already checked
	frontier := []exhaustiveNode{root}
	var letters, events []fsm.Event // scratch: the alphabet of a node, the trace of an edge
	var decisions []fsm.Decision
	for d := 0; d < depth && len(frontier) > 0; d++ {
		if ctx.Err() != nil {
			return
		}
		var next []exhaustiveNode
		for _, node := range frontier {
			rd, _ := ReadingAt(int(node.key.reading))
			parent := node.key.m.Decision()
			letters = alphabet(letters[:0], node, Trace{Request: req, Limits: lim, Events: node.events}, rd)
			for _, e := range letters {
				counts.edges++
				m := node.key.m
				dec := m.Step(e)
				got := Observed(&m)
				events = append(append(events[:0], node.events...), e)
				tr := Trace{Request: req, Limits: lim, Events: events}
				reading := int(node.key.reading)
				if Next(tr, parent, rd) != got {
					// Not what the node's reading says: a known divergence
					// (checked on the whole trace) or a mismatch.
					reading = -1
					for r := int(node.key.reading) + 1; r < Readings(); r++ {
						if rdr, _ := ReadingAt(r); covers(rdr, rd) && Decide(tr, rdr) == got {
							reading = r
							break
						}
					}
					if reading < 0 {
						failed := Trace{Request: req, Limits: lim, Events: clone(events)}
						report("%v", &Mismatch{Trace: failed, Got: got, Want: Decide(failed, rd)})
						continue
					}
					counts.diverged[reading]++
				}
				decisions = append(append(decisions[:0], node.decisions...), dec)
				// The invariants held on the parent's trace; appending the
				// same decision again cannot break one.
				if dec != parent {
					if err := Invariants(req, events, decisions); err != nil {
						report("%v\ntrace:\n%s", err, indent(FormatTrace(tr, nil)))
						continue
					}
				}
				if _, ids := ReadingAt(reading); reading != int(node.key.reading) && !extendPast(ids) {
					continue
				}
				if dec.Conn != fsm.ConnInUse {
					if k := (exhaustiveKey{m: m, reading: int8(reading)}); !closed[k] {
						closed[k] = true
						checkClosed(tr, m, reading, counts, report)
					}
					continue
				}
				child := exhaustiveKey{m: m, now: e.At, seen: node.key.seen, reading: int8(reading)}
				if isProgress(e.Kind) {
					child.seen |= 1 << e.Kind
				}
				if seen[child] {
					continue
				}
				seen[child] = true
				counts.states++
				counts.maxDepth = max(counts.maxDepth, int64(d+1))
				next = append(next, exhaustiveNode{key: child, events: clone(events), decisions: clone(decisions)})
			}
		}
		frontier = next
	}
	counts.frontierLeft += int64(len(frontier))
	counts.configs++
}

// checkClosed feeds each closed letter to a closed machine and compares
// it with the model, which keeps a closed attempt's decision.
func checkClosed(tr Trace, m fsm.Machine, reading int, counts *exhaustiveCounts, report func(string, ...any)) {
	rd, _ := ReadingAt(reading)
	prev := m.Decision()
	n := len(tr.Events)
	next := Trace{Request: tr.Request, Limits: tr.Limits, Events: append(clone(tr.Events), fsm.Event{})}
	for _, e := range closedLetters {
		e.At += tr.Events[n-1].At
		next.Events[n] = e
		counts.edges++
		after := m
		after.Step(e)
		got := Observed(&after)
		if want := Next(next, prev, rd); got != want {
			report("%v", &Mismatch{Trace: next, Got: got, Want: want})
			return
		}
	}
}

func clone[T any](s []T) []T { return append([]T(nil), s...) }

// covers reports whether reading a includes every divergence of b.
func covers(a, b Reading) bool { return merge(a, b) == a }

func isProgress(k fsm.EventKind) bool {
	for _, p := range progressKinds {
		if k == p {
			return true
		}
	}
	return false
}

// alphabet returns every event to try after node: the letters at the
// current instant, and ticks now and just before, at and just after each
// deadline that fsm or the model reports.
func alphabet(out []fsm.Event, node exhaustiveNode, tr Trace, rd Reading) []fsm.Event {
	now := node.key.now
	for _, e := range fixedLetters {
		e.At = now
		out = append(out, e)
	}
	var buf [8]fsm.Instant
	ticks := append(buf[:0], now)
	add := func(at fsm.Instant, ok bool) {
		if !ok {
			return
		}
		for _, c := range []fsm.Instant{at - 1, at, at + ms} {
			dup := c < now
			for _, have := range ticks {
				dup = dup || have == c
			}
			if !dup {
				ticks = append(ticks, c)
			}
		}
	}
	m := node.key.m
	add(m.Deadline())
	for _, r := range []Reading{{}, rd} {
		model := outcome(tr, m.Decision(), r)
		add(model.Deadline, model.HasDeadline)
	}
	for _, at := range ticks {
		out = append(out, fsm.Event{Kind: fsm.EventTick, At: at})
	}
	return out
}
