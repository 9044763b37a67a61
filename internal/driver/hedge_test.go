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
