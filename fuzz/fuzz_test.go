package fuzz

import (
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
	modeltest "github.com/replaysafe/replaysafe/model_test"
	"github.com/replaysafe/replaysafe/spec"
)

// Each known round-trip issue must still reproduce; when this fails it was
// fixed: delete it from KnownRoundTripIssues.
func TestRoundTripIssuesStillReproduce(t *testing.T) {
	for _, issue := range KnownRoundTripIssues {
		traces, err := spec.ParseTraces(strings.NewReader(issue.Example))
		if err != nil {
			t.Fatalf("%s: the example does not parse: %v", issue.ID, err)
		}
		if roundTrip(traces, false) == nil {
			t.Errorf("%s no longer reproduces: delete it from KnownRoundTripIssues", issue.ID)
		}
		known, err := CheckTraceText(issue.Example)
		if err != nil || len(known) != 1 || known[0] != issue.ID {
			t.Errorf("%s: CheckTraceText = %v, %v", issue.ID, known, err)
		}
		t.Logf("%s: %s\n%s", issue.ID, issue.Summary, issue.Example)
	}
}

func TestSpecExamplesRoundTrip(t *testing.T) {
	seeds, err := traceRoundTripSeeds()
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range seeds {
		if known, err := CheckTraceText(text); err != nil || len(known) != 0 {
			t.Errorf("%s: %v %v", name, known, err)
		}
	}
}

// A round trip that loses something is reported.
func TestRoundTripReportsADifference(t *testing.T) {
	traces, err := spec.ParseTraces(strings.NewReader("request method=GET\n@1ms closed\nexpect fail invalid-order\n"))
	if err != nil {
		t.Fatal(err)
	}
	other := traces[0]
	other.Steps = append([]spec.Step(nil), other.Steps...)
	other.Steps[0].Event.At = 2
	if d := traceDiff(traces[0], other); !strings.Contains(d, "event 1") {
		t.Errorf("traceDiff = %q", d)
	}
	other = traces[0]
	other.Request.IdempotencyKey = true
	if d := traceDiff(traces[0], other); !strings.Contains(d, "request") {
		t.Errorf("traceDiff = %q", d)
	}
	if d := traceDiff(traces[0], traces[0]); d != "" {
		t.Errorf("traceDiff of a trace with itself = %q", d)
	}
}

func TestEncodeDecodeSpecExamples(t *testing.T) {
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range all {
		if ex.IsCall() {
			continue // no events to encode
		}
		tr := modeltest.Trace{Request: ex.Request, Limits: ex.Limits, Start: ex.Start}
		for _, s := range ex.Steps {
			tr.Events = append(tr.Events, s.Event)
		}
		b, err := Encode(tr)
		if err != nil {
			t.Errorf("%s %s: %v", ex.File, ex.Name, err)
			continue
		}
		if !sameTrace(Decode(b), tr) {
			t.Errorf("%s %s: does not decode back", ex.File, ex.Name)
		}
		if err := CheckMachineBytes(b); err != nil {
			t.Errorf("%s %s: %v", ex.File, ex.Name, err)
		}
	}
	if _, err := Encode(modeltest.Trace{Events: []fsm.Event{{Kind: fsm.EventClosed, At: 1}}}); err == nil {
		t.Error("Encode accepted a sub-millisecond instant")
	}
}

func TestDecodeOddInput(t *testing.T) {
	for _, in := range [][]byte{nil, {0xff}, make([]byte, headerBytes+eventBytes-1), make([]byte, 10000)} {
		tr := Decode(in)
		if n := max(0, len(in)-headerBytes) / eventBytes; len(tr.Events) != min(n, maxEvents) {
			t.Errorf("%d bytes decoded to %d events", len(in), len(tr.Events))
		}
	}
	tr := Decode([]byte{0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})
	if e := tr.Events[0]; e.Kind != fsm.EventKind(255%(fsm.EventKinds+1)) || e.At != 255*1_000_000 {
		t.Errorf("decoded %+v", e)
	}
}

// After the original attempt resends, the rest of the input drives the
// second attempt, with Request.Resend, starting where the first ended.
func TestSplitAttempts(t *testing.T) {
	tr := modeltest.Trace{
		Request: fsm.Request{Method: fsm.MethodGET},
		Events: []fsm.Event{
			{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH1},
			{Kind: fsm.EventClosed, At: 2},
			{Kind: fsm.EventConnAcquired, At: 3, Proto: fsm.ProtoH1},
			{Kind: fsm.EventClosed, At: 4},
		},
	}
	first, second, ok := SplitAttempts(tr)
	if !ok || len(first.Events) != 2 || len(second.Events) != 2 || second.Start != 2 || second.Request.Attempt != fsm.AttemptResend {
		t.Fatalf("SplitAttempts = %+v, %+v, %v", first, second, ok)
	}
	decisions, _, err := modeltest.Run(second)
	if err != nil || decisions[1].Rule != fsm.RuleNoSecondResend {
		t.Errorf("second attempt: %v, %v", decisions, err)
	}
	tr.Request.Attempt = fsm.AttemptResend
	if _, _, ok := SplitAttempts(tr); ok {
		t.Error("a resend attempt was given a second attempt")
	}
}
