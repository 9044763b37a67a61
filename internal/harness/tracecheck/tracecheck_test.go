package tracecheck_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/harness/tracecheck"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// A close crossing a reused connection's GET: the original attempt
// decides RS20 and the resend delivers. Both traces check out.
func TestRealAttemptsCheckOut(t *testing.T) {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c tracecheck.Checker
	var reports []replaysafe.AttemptReport
	tr := replaysafe.New(replaysafe.Options{Observer: replaysafe.Observer{OnAttempt: func(r replaysafe.AttemptReport) {
		reports = append(reports, r)
		c.Observe(r)
	}}})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, path := range []string{"/first", "/second"} {
		resp, err := client.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if c.Checked() != 3 {
		t.Fatalf("checked %d traces, want 3 (first, the second's original and its resend)", c.Checked())
	}
	if got := reports[1].Decision.Rule; got != fsm.RuleAmbiguousIdempotentResend {
		t.Fatalf("second call's first attempt decided %v", reports[1].Decision)
	}

	// The same reports, tampered with, fail.
	bad := reports[1]
	bad.Decision = fsm.Decision{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent, Conn: fsm.ConnDiscard}
	bad.Call = fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent} // the call's word agrees: only the replay disagrees
	if err := tracecheck.Check(bad); err == nil || !strings.Contains(err.Error(), "the transport reported") {
		t.Fatalf("a wrong reported decision: %v", err)
	}
	// A call decision the attempt's own does not allow fails too.
	bad = reports[1]
	bad.Call = fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleEvidenceRefusedStream}
	if err := tracecheck.Check(bad); err == nil || !strings.Contains(err.Error(), "resent at once") {
		t.Fatalf("an automatic resend by another rule than the attempt's: %v", err)
	}
	bad = reports[0]
	bad.Call = fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleRetryBudget}
	if err := tracecheck.Check(bad); err == nil || !strings.Contains(err.Error(), "delivered attempt") {
		t.Fatalf("a delivered attempt whose call failed: %v", err)
	}
	bad = reports[0]
	bad.Call = fsm.CallDecision{}
	if err := tracecheck.Check(bad); err == nil || !strings.Contains(err.Error(), "no call decision") {
		t.Fatalf("an attempt without a call decision: %v", err)
	}
	bad = reports[1]
	bad.Events = bad.Events[:len(bad.Events)-1]
	if err := tracecheck.Check(bad); err == nil {
		t.Fatal("a trace with an event the report lacks checked out")
	}
	bad = reports[0]
	bad.Trace = strings.Replace(bad.Trace, "conn-acquired fresh h1", "first-byte-written", 1)
	if err := tracecheck.Check(bad); err == nil {
		t.Fatal("a trace edited to an event before a connection checked out")
	}

	// An attempt 2 without a resend before it fails the order check.
	var order tracecheck.Checker
	order.Observe(reports[0])
	second := reports[0]
	second.Number = 2
	order.Observe(second)
	if err := order.Err(); err == nil || !strings.Contains(err.Error(), "not a resend") {
		t.Fatalf("attempt 2 after a delivered attempt 1: %v", err)
	}
}
