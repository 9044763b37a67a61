package driver

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// errCopyFailed ends a copy of a hedged call that failed while another
// copy was in flight (the call machine's RuleHedgeCopyFailed): not the
// call's failure.
var errCopyFailed = errors.New("replaysafe: a hedged copy failed beside another")

// errHedgeLost is the cause a copy of a hedged call is canceled with
// when another copy's response header came first, and what it ends with.
var errHedgeLost = errors.New("replaysafe: another copy of the hedged request answered first")

// lostDecision is how the call went on after a copy that lost: another
// copy's response is the call's, and this copy was one of those counted
// beside it.
var lostDecision = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed}

// hedging is what the copies of a hedged try share: every copy started
// (at most MaxAttempts), the one whose response header came first, and
// whether the try's first copy holds its connection. Its mutex orders a
// copy's claim of the win against the others' outcomes, so that the call
// machine sees a loser's outcome never after the winner's.
type hedging struct {
	mu        sync.Mutex
	copies    []hedgeCopy
	won       *attempt
	connected bool          // the first copy got its connection or stream
	pending   bool          // the delay passed before it did: its connection fires the hedge
	resending bool          // a copy's failure decided a resend or a retry, not yet under way: no hedge
	over      bool          // the try returned: a copy that registers now never goes out
	fire      chan struct{} // the hedge delay passed (capacity one)
}

// hedgeCopy is one copy of a hedged try; stepped is set once its outcome
// was fed to the call machine (or it lost): it is over.
type hedgeCopy struct {
	a       *attempt
	stepped bool
}

// add registers a copy as it starts. A hedge decided just before another
// copy won, or before the try returned, starts after the losers were
// canceled: it is canceled here, as they were, and never goes out (the
// attempt sees it at once, lostAtStart).
func (h *hedging) add(a *attempt) {
	h.mu.Lock()
	h.copies = append(h.copies, hedgeCopy{a: a})
	if h.won != nil || h.over {
		a.rec.Feed(fsm.Event{Kind: fsm.EventCanceled})
		a.cancel(errHedgeLost)
	}
	h.mu.Unlock()
}

// end marks the try over as it returns, and cancels any copy still
// running but the winner: none should be (a call fails or retries only
// once its copies in flight ended, and refuses hedges meanwhile), and a
// copy left behind would hold its connection and body with no one to
// read its result.
func (h *hedging) end() {
	h.mu.Lock()
	h.over = true
	h.cancelLosersLocked()
	h.mu.Unlock()
}

// lostAtStart reports a copy of a hedged try canceled as it registered
// (hedging.add): it must acquire and send nothing.
func (a *attempt) lostAtStart() bool {
	return a.tr.hedge != nil && a.rec.Decision().Action == fsm.ActionFail
}

// gotConn records that copy a holds its connection: a hedge waits until
// the try's first copy does, because a first copy still acquiring may
// yet hand the call to another leg (ALPN chose HTTP/1.1, no QUIC), with
// nothing sent, and that hand-over is the try's to make alone.
func (h *hedging) gotConn(a *attempt) {
	h.mu.Lock()
	if len(h.copies) > 0 && h.copies[0].a == a {
		h.connected = true
		if h.pending {
			h.pending = false
			h.signal()
		}
	}
	h.mu.Unlock()
}

// signal tells the try that a hedge is due; one signal waiting is enough.
func (h *hedging) signal() {
	select {
	case h.fire <- struct{}{}:
	default:
	}
}

// lostLocked reports whether another copy than a won.
func (h *hedging) lostLocked(a *attempt) bool { return h.won != nil && h.won != a }

// cancelLosersLocked cancels every copy still running but the winner:
// its machine decides the cancellation (RS05) first, so that whatever
// its stack then reports reads as the caller's giving up on it, not as
// its connection's failure; its stack ends with errHedgeLost, and the
// copy, seeing it lost, closes what it holds.
func (h *hedging) cancelLosersLocked() {
	for _, c := range h.copies {
		if c.a != h.won && !c.stepped {
			c.a.rec.Feed(fsm.Event{Kind: fsm.EventCanceled})
			c.a.cancel(errHedgeLost)
		}
	}
}

// steppedLocked marks copy a over.
func (h *hedging) steppedLocked(a *attempt) {
	for i := range h.copies {
		if h.copies[i].a == a {
			h.copies[i].stepped = true
		}
	}
}

// gotConn tells the try's hedging, if any, that a holds its connection.
func (a *attempt) gotConn() {
	if h := a.tr.hedge; h != nil {
		h.gotConn(a)
	}
}

// stepCopy feeds o, the outcome of copy a, to the call machine, unless a
// is a copy of a hedged try that another copy won (lost is then set, and
// nothing is fed). A delivered outcome claims the win: the other copies
// are canceled.
func (a *attempt) stepCopy(o fsm.Outcome) (cd fsm.CallDecision, lost bool) {
	h := a.tr.hedge
	if h == nil {
		return a.tr.step(o), false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.steppedLocked(a)
	if h.lostLocked(a) {
		return lostDecision, true
	}
	cd = a.tr.step(o)
	if o.Decision.Action == fsm.ActionDeliver {
		h.won = a
		h.cancelLosersLocked()
	}
	if cd.Action == fsm.ActionResend {
		// The call goes on with this copy's resend (the try launches it)
		// or a configured retry (a new try): until then a hedge would
		// be a copy beside one the call has not started yet.
		h.resending = true
	}
	return cd, false
}

// copyResult is how one copy of a hedged try ended.
type copyResult struct {
	resp *http.Response
	next *resend
	err  error
}

// hedgeApplies reports whether the call could send a hedge at all: a
// hedging policy, and a request the call machine would let go twice
// (asked of a copy of the machine, with budget). A call it does not
// apply to runs its attempts one after another, with no goroutine and
// no timer; under a hedging policy its history starts with the refusal
// (RuleHedgeRefused), decided at once since no delay could change it.
func (c *Call) hedgeApplies() bool {
	if c.pol.HedgeDelay <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	probe := c.cm
	if probe.Hedge(true).Action == fsm.ActionResend {
		return true
	}
	if c.cm.Attempts() == 0 && c.n == 0 {
		c.record(c.cm.Hedge(true)) // once a call, before its first attempt
	}
	return false
}

// hedged runs a try's wire attempts under a hedging policy: the first
// copy, from start, and, each time the hedge delay passes with no copy's response
// header, one more if the call machine decides so (RuleHedge), each on
// a goroutine of its own and on a connection no other copy uses. The
// first copy whose response header arrives wins (stepCopy); the others
// are canceled and close their bodies and connections themselves. A
// copy that fails beside another leaves the call to the others; the
// last copy's failure is decided as a sequential attempt's would be: the
// automatic resend starts here as the next copy, anything else ends the
// try.
func (tr *try) hedged(attempt attemptFunc, start resend) (*http.Response, error) {
	h := &hedging{fire: make(chan struct{}, 1)}
	tr.hedge = h
	c := tr.call
	// Every copy sends its result once, and a call starts at most
	// MaxAttempts of them: no send blocks, so a loser's goroutine ends
	// once its stack does, whether or not the try still listens.
	results := make(chan copyResult, MaxAttempts+1)
	inFlight, n := 0, 0
	launch := func(start resend) {
		n++
		inFlight++
		go func(n int) {
			resp, next, err := attempt(tr, n, start)
			results <- copyResult{resp, next, err}
		}(n)
	}
	launch(start)
	stop := func() bool { return false }
	// arm sets the delay afresh: the timer before it stopped, and a
	// firing it left behind dropped, so that a hedge waits a whole
	// delay after the copy before it.
	arm := func() {
		stop()
		select {
		case <-h.fire:
		default:
		}
		stop = c.t.clock.AfterFunc(c.pol.HedgeDelay, h.signal)
	}
	arm()
	defer func() {
		stop()
		h.end()
	}()
	// Every turn ends a copy (at most MaxAttempts, with the automatic
	// resend) or takes one firing of the delay, armed once at the start
	// and once a copy launched, or fired by the first copy's connection.
	for range 4 * (MaxAttempts + 1) {
		select {
		case r := <-results:
			inFlight--
			switch {
			case r.next != nil:
				h.mu.Lock()
				h.resending = false
				h.mu.Unlock()
				launch(*r.next) // the automatic resend of the only copy
				arm()
			case errors.Is(r.err, errCopyFailed), errors.Is(r.err, errHedgeLost):
				if inFlight == 0 {
					panic("replaysafe: a hedged try's last copy ended as one beside another")
				}
			default:
				return r.resp, r.err // the winner, or the call's end
			}
		case <-h.fire:
			if start, ok := tr.hedgeNow(h); ok {
				launch(start)
				arm() // the next hedge's delay
			}
		}
	}
	panic("replaysafe: a hedged try went on past the copies a call allows")
}

// hedgeNow asks the call machine for a hedge, the delay having passed:
// none yet while the first copy is still acquiring (its connection fires
// the hedge, see hedging.gotConn), none once a copy's response header
// came, else as fsm.Call.Hedge decides, with a copy reserved from the
// route's budget and given back unless it goes. It returns the copy's
// start: the next facts, the body again, and a mark that lets it take
// only a connection that joins the pool from now on, so never one
// another copy uses. None either while a copy's failure decided a
// resend or a retry that has not started (hedging.resending). A refused
// hedge sends nothing; the delay is armed again only when another copy
// starts.
func (tr *try) hedgeNow(h *hedging) (resend, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.connected {
		h.pending = true
		return resend{}, false
	}
	if h.won != nil || h.resending {
		return resend{}, false
	}
	c := tr.call
	c.mu.Lock()
	budget, now := true, time.Time{}
	if c.pol.Budget.Window > 0 {
		now = time.Now()
		budget = c.t.budgets.reserve(tr.key.Addr, c.pol.Budget, now)
	}
	d := c.cm.Hedge(budget)
	if budget && c.pol.Budget.Window > 0 && d.Action != fsm.ActionResend {
		c.t.budgets.unreserve(tr.key.Addr, c.pol.Budget, now)
	}
	c.record(d)
	next := c.cm.Next()
	c.mu.Unlock()
	if d.Action != fsm.ActionResend {
		return resend{}, false
	}
	start := resend{facts: next, body: c.req.Body, hedge: true}
	if next.Body == fsm.BodyBuffered {
		b, err := c.req.GetBody()
		if err != nil {
			if c.pol.Budget.Window > 0 {
				c.t.budgets.unreserve(tr.key.Addr, c.pol.Budget, now) // the copy never went
			}
			// The copy cannot be made as the caller meant it: its
			// machine decides the local failure (RS21) before any
			// connection, a copy failing beside the others, which go on.
			m := fsm.New(next, c.t.limits, c.t.clock.Now())
			tr.step(fsm.Outcome{Decision: m.Step(fsm.Event{Kind: fsm.EventLocalFailure, At: c.t.clock.Now()})})
			return resend{}, false
		}
		start.body = b
	}
	start.after = c.t.poolMark(tr.leg.Proto)
	return start, true
}
