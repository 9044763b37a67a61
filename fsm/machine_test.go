package fsm_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec"
)

// TestSpecExamples replays every example of spec/examples: each rule must
// decide its "decides" traces and must not decide its "not" traces.
func TestSpecExamples(t *testing.T) {
	all, err := spec.Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range spec.Rules() {
		if r.Value == fsm.RuleNone {
			continue
		}
		decides, not := spec.ExamplesFor(all, r.Value)
		t.Run(r.ID+"-"+r.Slug, func(t *testing.T) {
			if len(decides) == 0 || len(not) == 0 {
				t.Fatalf("want examples both ways, have %d decides and %d not", len(decides), len(not))
			}
			for _, e := range append(decides, not...) {
				action, rule := e.FinalRule()
				if (rule == r.Value) != e.Decides {
					t.Errorf("%s line %d (%s): final %v %v\n%s", e.File, e.Line, e.Name, action, rule, e.Explain())
				}
				if err := e.Check(); err != nil {
					t.Errorf("%s: %v", e.File, err)
				}
			}
		})
	}
}

// TestImportsOnlyStandardLibrary keeps the core portable: no module outside
// the standard library, no clock, no network.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"net": true, "os": true, "math/rand": true, "math/rand/v2": true, "crypto/rand": true, "syscall": true, "unsafe": true}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") || forbidden[path] {
				t.Errorf("%s imports %s: fsm may import only pure standard library packages", name, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
	src, err := os.ReadFile("machine.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"time.Now", "time.Sleep", "go func"} {
		if strings.Contains(string(src), banned) {
			t.Errorf("machine.go uses %s", banned)
		}
	}
}

func acquired(reused bool, p fsm.Proto) fsm.Event {
	return fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: p}
}

func ev(k fsm.EventKind, at time.Duration) fsm.Event {
	return fsm.Event{Kind: k, At: fsm.Instant(at)}
}

// TestEventIs32Bytes keeps Event's fields in the order that packs it:
// every attempt holds its events inline, and each in-flight request pays
// for them.
func TestEventIs32Bytes(t *testing.T) {
	if n := unsafe.Sizeof(fsm.Event{}); n > 32 {
		t.Errorf("fsm.Event is %d bytes, want at most 32: put the 8-byte fields first", n)
	}
}

func TestDeadlinesFollowPhases(t *testing.T) {
	lim := fsm.Limits{Acquire: 1 * time.Second, Write: 2 * time.Second, Header: 3 * time.Second, Body: 4 * time.Second}
	m := fsm.New(fsm.Request{Method: fsm.MethodGET}, lim, fsm.Instant(10*time.Second))
	steps := []struct {
		event fsm.Event
		phase fsm.Phase
		want  time.Duration // deadline; 0 for none
	}{
		{ev(fsm.EventTick, 10*time.Second), fsm.PhaseAcquire, 11 * time.Second},
		{fsm.Event{Kind: fsm.EventConnAcquired, At: fsm.Instant(10500 * time.Millisecond), Proto: fsm.ProtoH1}, fsm.PhaseWrite, 12500 * time.Millisecond},
		{ev(fsm.EventFirstByteWritten, 11*time.Second), fsm.PhaseWrite, 12500 * time.Millisecond},
		{ev(fsm.EventRequestWritten, 12*time.Second), fsm.PhaseHeader, 15 * time.Second},
		{ev(fsm.EventFinalHeaders, 13*time.Second), fsm.PhaseBody, 17 * time.Second},
		{ev(fsm.EventResponseComplete, 14*time.Second), fsm.PhaseNone, 0},
	}
	for i, s := range steps {
		m.Step(s.event)
		if got := m.Phase(); got != s.phase {
			t.Errorf("step %d (%v): phase %v, want %v", i, s.event, got, s.phase)
		}
		at, ok := m.Deadline()
		if ok != (s.want != 0) || (ok && at != fsm.Instant(s.want)) {
			t.Errorf("step %d (%v): deadline %v %v, want %v", i, s.event, at, ok, s.want)
		}
	}
	if d := m.Decision(); d.Action != fsm.ActionDeliver || d.Conn != fsm.ConnReuse {
		t.Errorf("final decision %v, want deliver with reuse", d)
	}
}

func TestTickBeforeDeadlineIsProgressAndAtDeadlineTimesOut(t *testing.T) {
	m := fsm.New(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{Acquire: time.Second}, 0)
	if d := m.Step(ev(fsm.EventTick, 999*time.Millisecond)); d.Action != fsm.ActionContinue {
		t.Fatalf("tick before the deadline: %v", d)
	}
	d := m.Step(ev(fsm.EventTick, time.Second))
	if d.Action != fsm.ActionFail || d.Rule != fsm.RuleTimeout || d.Conn != fsm.ConnDiscard {
		t.Fatalf("tick at the deadline: %v, want fail timeout", d)
	}
}

func TestNoLimitsNoDeadline(t *testing.T) {
	m := fsm.New(fsm.Request{}, fsm.Limits{}, 0)
	if _, ok := m.Deadline(); ok {
		t.Fatal("zero limits reported a deadline")
	}
	if d := m.Step(ev(fsm.EventTick, 24*time.Hour)); d.Action != fsm.ActionContinue || d.Rule != fsm.RuleProgress {
		t.Fatalf("tick without limits: %v", d)
	}
}

func TestDeliveredResponseFailingDiscardsButKeepsDecision(t *testing.T) {
	m := fsm.New(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, 0)
	for _, e := range []fsm.Event{acquired(true, fsm.ProtoH1), ev(fsm.EventFirstByteWritten, 0), ev(fsm.EventRequestWritten, 0), ev(fsm.EventFinalHeaders, 0)} {
		m.Step(e)
	}
	d := m.Step(ev(fsm.EventReset, 0))
	want := fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnDiscard}
	if d != want {
		t.Fatalf("reset after delivery: %v, want %v", d, want)
	}
	if again := m.Step(ev(fsm.EventResponseComplete, 0)); again != want {
		t.Fatalf("events after the verdict changed it: %v", again)
	}
}

func TestEarlyResponseReusesOnlyAfterUploadEnds(t *testing.T) {
	m := fsm.New(fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}, fsm.Limits{}, 0)
	for _, e := range []fsm.Event{acquired(false, fsm.ProtoH1), ev(fsm.EventFirstByteWritten, 0), ev(fsm.EventFinalHeaders, 0), ev(fsm.EventResponseComplete, 0)} {
		m.Step(e)
	}
	if d := m.Decision(); d.Conn != fsm.ConnInUse {
		t.Fatalf("response complete while uploading: conn %v, want in-use", d.Conn)
	}
	if d := m.Step(ev(fsm.EventRequestWritten, 0)); d.Conn != fsm.ConnReuse || d.Action != fsm.ActionDeliver {
		t.Fatalf("upload finished: %v, want deliver with reuse", d)
	}
}

func TestInvalidValuesNeverPanic(t *testing.T) {
	m := fsm.New(fsm.Request{Method: 200, Body: 200, Attempt: 200}, fsm.Limits{}, 0)
	d := m.Step(fsm.Event{Kind: 250})
	if d.Action != fsm.ActionFail || d.Rule != fsm.RuleInvalidOrder {
		t.Fatalf("unknown event kind: %v", d)
	}
	for _, s := range []string{fsm.Rule(250).String(), fsm.EventKind(250).String(), fsm.Method(250).String(), fsm.Action(9).String(), fsm.Phase(9).String()} {
		if !strings.Contains(s, "(") {
			t.Errorf("invalid value printed as %q, want Type(n)", s)
		}
	}
}

func TestParseMethod(t *testing.T) {
	cases := map[string]fsm.Method{"": fsm.MethodGET, "GET": fsm.MethodGET, "get": fsm.MethodOther, "PUT": fsm.MethodPUT, "QUERY": fsm.MethodOther, "unknown": fsm.MethodOther}
	for in, want := range cases {
		if got := fsm.ParseMethod(in); got != want {
			t.Errorf("ParseMethod(%q) = %v, want %v", in, got, want)
		}
	}
	for _, m := range []fsm.Method{fsm.MethodGET, fsm.MethodHEAD, fsm.MethodOPTIONS, fsm.MethodTRACE, fsm.MethodPUT, fsm.MethodDELETE} {
		if !m.Idempotent() {
			t.Errorf("%v must be idempotent (RFC 9110 §9.2.2)", m)
		}
	}
	for _, m := range []fsm.Method{fsm.MethodPOST, fsm.MethodPATCH, fsm.MethodCONNECT, fsm.MethodOther, fsm.MethodUnknown} {
		if m.Idempotent() {
			t.Errorf("%v must not be idempotent", m)
		}
	}
}

// closeCrossing is the common stale-connection trace: a GET written on a
// reused connection that then closes.
var closeCrossing = []fsm.Event{
	{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH1},
	{Kind: fsm.EventFirstByteWritten, At: 1},
	{Kind: fsm.EventRequestWritten, At: 2},
	{Kind: fsm.EventClosed, At: 3},
}

var fullExchange = []fsm.Event{
	{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH1},
	{Kind: fsm.EventFirstByteWritten, At: 1},
	{Kind: fsm.EventRequestWritten, At: 2},
	{Kind: fsm.EventFirstResponseByte, At: 3},
	{Kind: fsm.EventFinalHeaders, At: 4},
	{Kind: fsm.EventResponseComplete, At: 5},
}

func TestStepDoesNotAllocate(t *testing.T) {
	req := fsm.Request{Method: fsm.MethodGET}
	allocs := testing.AllocsPerRun(100, func() {
		m := fsm.New(req, fsm.Limits{Header: time.Second}, 0)
		for _, e := range fullExchange {
			m.Step(e)
		}
		m.Deadline()
	})
	if allocs != 0 {
		t.Fatalf("a full exchange allocates %v times, want 0", allocs)
	}
}

var sink fsm.Decision

// BenchmarkStep measures one event on average over a full exchange.
func BenchmarkStep(b *testing.B) {
	req := fsm.Request{Method: fsm.MethodGET}
	b.ReportAllocs()
	m := fsm.New(req, fsm.Limits{}, 0)
	for i := 0; b.Loop(); i++ {
		if i%len(fullExchange) == 0 {
			m = fsm.New(req, fsm.Limits{}, 0)
		}
		sink = m.Step(fullExchange[i%len(fullExchange)])
	}
}

// BenchmarkExchange measures a whole clean exchange, six events from the
// acquired connection to the complete response, and reports the cost per
// event without BenchmarkStep's loop bookkeeping.
func BenchmarkExchange(b *testing.B) {
	req := fsm.Request{Method: fsm.MethodGET}
	b.ReportAllocs()
	for b.Loop() {
		m := fsm.New(req, fsm.Limits{}, 0)
		for _, e := range fullExchange {
			sink = m.Step(e)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(fullExchange)), "ns/event")
}

// BenchmarkCallDecision measures a whole attempt that ends in a resend
// decision: the call's cost of being decided.
func BenchmarkCallDecision(b *testing.B) {
	req := fsm.Request{Method: fsm.MethodGET}
	b.ReportAllocs()
	for b.Loop() {
		m := fsm.New(req, fsm.Limits{Header: time.Second}, 0)
		for _, e := range closeCrossing {
			sink = m.Step(e)
		}
	}
}

func TestLimitsFor(t *testing.T) {
	lim := fsm.Limits{Acquire: 1, Write: 2, Header: 3, Body: 4}
	want := map[fsm.Phase]time.Duration{fsm.PhaseNone: 0, fsm.PhaseAcquire: 1, fsm.PhaseWrite: 2, fsm.PhaseHeader: 3, fsm.PhaseBody: 4, fsm.Phase(99): 0}
	for p, d := range want {
		if got := lim.For(p); got != d {
			t.Errorf("Limits.For(%v) = %v, want %v", p, got, d)
		}
	}
}

// TestNeedAndForbidAreDisjoint guards Step's single masked compare of
// the facts against a transition's need and forbid sets: it is the same
// as two compares only when no valid kind forbids a fact it needs.
func TestNeedAndForbidAreDisjoint(t *testing.T) {
	for k := fsm.EventKind(1); int(k) < fsm.EventKinds; k++ {
		if need, forbid, _, _ := fsm.Requires(k); need&forbid != 0 {
			t.Errorf("%v needs %v and forbids %v", k, need, forbid)
		}
	}
}

// earlyExchange is a GET sent as early data that the server accepts.
var earlyExchange = []fsm.Event{
	{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3, Early: true},
	{Kind: fsm.EventFirstByteWritten},
	{Kind: fsm.EventRequestWritten, At: 1},
	{Kind: fsm.EventEarlyAccepted, At: 2},
	{Kind: fsm.EventFirstResponseByte, At: 3},
	{Kind: fsm.EventFinalHeaders, At: 3},
	{Kind: fsm.EventResponseComplete, At: 4},
}

func TestEarlyExchangeDoesNotAllocate(t *testing.T) {
	req := fsm.Request{Method: fsm.MethodGET}
	var d fsm.Decision
	allocs := testing.AllocsPerRun(100, func() {
		m := fsm.New(req, fsm.Limits{Header: time.Second}, 0)
		for _, e := range earlyExchange {
			d = m.Step(e)
		}
	})
	if allocs != 0 {
		t.Fatalf("an early-data exchange allocates %v times, want 0", allocs)
	}
	if d != (fsm.Decision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse, Conn: fsm.ConnReuse}) {
		t.Fatalf("an accepted early-data exchange ends %v", d)
	}
}

// BenchmarkEarlyExchange is BenchmarkExchange for a GET sent as early
// data and accepted: seven events, the RS32 check and the acceptance
// included.
func BenchmarkEarlyExchange(b *testing.B) {
	req := fsm.Request{Method: fsm.MethodGET}
	b.ReportAllocs()
	for b.Loop() {
		m := fsm.New(req, fsm.Limits{}, 0)
		for _, e := range earlyExchange {
			sink = m.Step(e)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(earlyExchange)), "ns/event")
}
