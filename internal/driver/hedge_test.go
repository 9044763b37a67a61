package driver

import (
	"errors"
	"net/http"
	"testing"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// TestHedgeAfterWinNeverGoes: a hedge the call machine decided just
// before another copy's response header won registers after the winner
// canceled the losers. It is canceled as it registers, its machine
// deciding the cancellation (RS05), so its stack starts on a context
// already ended and sends nothing.
func TestHedgeAfterWinNeverGoes(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &try{call: &Call{req: req}}
	h := &hedging{won: &attempt{tr: tr}}
	late := &attempt{tr: tr}
	var rec streamRec
	rec.InitUnarmed(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, recorder.NewClock(), late)
	late.rec = &rec
	h.add(late)
	if err := late.abortCause(); !errors.Is(err, errHedgeLost) {
		t.Errorf("the late hedge's cause is %v, want errHedgeLost", err)
	}
	if d := rec.Decision(); d.Action != fsm.ActionFail || d.Rule != fsm.RuleCanceled {
		t.Errorf("the late hedge's machine decided %v, want fail by RS05", d)
	}
	if ctx := late.context(); ctx.Err() == nil {
		t.Error("the late hedge's context is live")
	}

	// A copy that registers before any win runs.
	h2 := &hedging{}
	early := &attempt{tr: tr}
	var rec2 streamRec
	rec2.InitUnarmed(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, recorder.NewClock(), early)
	early.rec = &rec2
	h2.add(early)
	if err := early.abortCause(); err != nil || early.context().Err() != nil {
		t.Errorf("a copy registered before any win ended: %v", err)
	}
}

// hedgedTry returns a try of a GET under a policy of three attempts and
// one hedge, on a Transport with EarlyData, for the hedging unit tests.
func hedgedTry(t *testing.T) (*try, *hedging) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	facts := fsm.Request{Method: fsm.MethodGET}
	pol := &Policy{Retry: fsm.Retry{Attempts: 3, Hedges: 1}}
	c := &Call{t: &Transport{cfg: Config{EarlyData: true}, clock: recorder.NewClock()}, req: req,
		cm: fsm.NewCall(facts, &pol.Retry), pol: pol}
	h := &hedging{connected: true, fire: make(chan struct{}, 1)}
	tr := &try{call: c, hedge: h}
	return tr, h
}

// TestNoHedgeWhileResending: a copy whose failure decided the call's
// resend marks the try as resending, and no hedge goes until the try
// started that resend; otherwise the hedge would be a copy beside one
// the call has not sent, which a configured retry (a new try) would
// leave running with no one to read it.
func TestNoHedgeWhileResending(t *testing.T) {
	tr, h := hedgedTry(t)
	first := tr.newAttempt(&attempt{}, nil, newRec(tr), bodyWatch{}, false)
	cd, lost := first.stepCopy(fsm.Outcome{Decision: fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend}})
	if lost || cd.Action != fsm.ActionResend || !h.resending {
		t.Fatalf("the only copy's resend: %v lost %v resending %v", cd, lost, h.resending)
	}
	if _, ok := tr.hedgeNow(h); ok {
		t.Fatal("a hedge went while the call's resend had not started")
	}
	h.resending = false // the try launched the resend
	if _, ok := tr.hedgeNow(h); !ok {
		t.Fatal("no hedge once the resend was under way")
	}
}

// TestLateHedgeLostAtStart: a copy canceled as it registered reads as
// lost before it acquires anything; a copy of a live try does not.
func TestLateHedgeLostAtStart(t *testing.T) {
	tr, h := hedgedTry(t)
	live := tr.newAttempt(&attempt{}, nil, newRec(tr), bodyWatch{}, false)
	if live.lostAtStart() {
		t.Fatal("the first copy of a live try reads as lost")
	}
	h.end() // the try returned
	late := tr.newAttempt(&attempt{}, nil, newRec(tr), bodyWatch{}, true)
	if !late.lostAtStart() || !errors.Is(late.abortCause(), errHedgeLost) {
		t.Fatalf("a hedge registered after the try returned: lost %v, cause %v", late.lostAtStart(), late.abortCause())
	}
	if !errors.Is(live.abortCause(), errHedgeLost) {
		t.Errorf("the try's end left its unstepped copy running: %v", live.abortCause())
	}
}

// TestEarlyOnlyForTheCallsFirstAttempt: early data is offered to the
// call's first wire attempt only, by its number: a configured retry,
// RS22's 425 retry among them, starts a try of its own whose first
// attempt is not the call's, and never goes early (RFC 8470 §5.2).
func TestEarlyOnlyForTheCallsFirstAttempt(t *testing.T) {
	tr, _ := hedgedTry(t)
	facts := fsm.Request{Method: fsm.MethodGET}
	if !tr.offersEarly(&attempt{number: 1}, facts) {
		t.Error("the call's first attempt is not offered early data")
	}
	for _, n := range []int32{2, 3} {
		if tr.offersEarly(&attempt{number: n}, facts) {
			t.Errorf("wire attempt %d of the call, a retry's first in its try, is offered early data", n)
		}
	}
}

// newRec returns an unarmed stream recorder for a GET on tr.
func newRec(tr *try) *streamRec {
	r := new(streamRec)
	r.InitUnarmed(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, tr.call.t.clock, nil)
	return r
}
