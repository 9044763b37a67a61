package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
)

func TestEveryRuleHasExamplesBothWays(t *testing.T) {
	all, err := Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Rules() {
		if r.Value == fsm.RuleNone {
			continue
		}
		decides, not := ExamplesFor(all, r.Value)
		if len(decides) == 0 || len(not) == 0 {
			t.Errorf("%s %s: %d examples where it decides, %d where it must not; want at least one of each", r.ID, r.Slug, len(decides), len(not))
		}
		if r.Source == "" || r.Statement == "" {
			t.Errorf("%s: statement and source are required", r.ID)
		}
	}
}

func TestExamplesHold(t *testing.T) {
	all, err := Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		t.Run(e.File+":"+e.Name, func(t *testing.T) {
			if err := e.Check(); err != nil {
				t.Fatalf("%s: %v\n%s", e.File, err, e.Explain())
			}
			if e.IsCall() {
				if e.Calls[len(e.Calls)-1].Expect == nil {
					t.Fatalf("%s line %d: an example must end with an expect line", e.File, e.Line)
				}
				return
			}
			if len(e.Steps) == 0 || e.Steps[len(e.Steps)-1].Expect == nil {
				t.Fatalf("%s line %d: an example must end with an expect line", e.File, e.Line)
			}
		})
	}
}

func TestRuleDataMatchesConstants(t *testing.T) {
	rules := Rules()
	if len(rules) != fsm.RuleCount {
		t.Fatalf("ruledata has %d rules, fsm %d: run go generate ./...", len(rules), fsm.RuleCount)
	}
	for _, r := range rules {
		if r.Value.String() != r.Slug || r.Value.ID() != r.ID {
			t.Errorf("rule %d: fsm says %s %s, ruledata %s %s: run go generate ./...", r.Number, r.Value.ID(), r.Value, r.ID, r.Slug)
		}
		if _, ok := fsm.ParseAction(r.Action); !ok {
			t.Errorf("%s: unknown action %q", r.ID, r.Action)
		}
	}
}

func TestEventStringRoundTrips(t *testing.T) {
	events := []fsm.Event{
		{Kind: fsm.EventConnAcquired, At: 5, Reused: true, Proto: fsm.ProtoH2},
		{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH1},
		{Kind: fsm.EventTimeout, At: 1000, Phase: fsm.PhaseHeader},
		{Kind: fsm.EventH2GoAway, Boundary: 3, Stream: 5},
		{Kind: fsm.EventH3GoAway, Boundary: 8, BoundaryKnown: true, Stream: 8},
		{Kind: fsm.EventH3GoAway, Stream: 4},
		{Kind: fsm.EventClosed, At: 7},
	}
	for _, want := range events {
		src := "request method=GET\n" + want.String() + "\n"
		tr, err := ParseTrace(strings.NewReader(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := tr.Steps[0].Event; got != want {
			t.Errorf("%q parsed as %+v, want %+v", src, got, want)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	bad := map[string]string{
		"unknown event":       "request method=GET\n@0s teleported\n",
		"expect first":        "request method=GET\nexpect fail timeout\n",
		"goaway without last": "request method=GET\n@0s conn-acquired reused h2\n@1ms h2-goaway stream=5\n",
		"bad fact":            "request colour=blue\n",
		"bad rule":            "example no-such-rule decides\n",
	}
	for name, src := range bad {
		_, err := ParseTraces(strings.NewReader(src))
		var se *SyntaxError
		if err == nil || !errors.As(err, &se) || se.Line < 1 {
			t.Errorf("%s: got %v, want a SyntaxError with a line", name, err)
		}
	}
}

func TestEverySourceIsExplained(t *testing.T) {
	used := map[string]bool{}
	for _, r := range Rules() {
		names := r.SourceNames()
		if len(names) == 0 {
			t.Errorf("%s cites no source", r.ID)
		}
		for _, n := range names {
			used[n] = true
			if _, ok := LookupSource(n); !ok {
				t.Errorf("%s cites %q, which Sources does not explain", r.ID, n)
			}
		}
	}
	for _, s := range Sources() {
		if !used[s.Name] {
			t.Errorf("source %q is cited by no rule", s.Name)
		}
		if s.Title == "" || s.Doc == "" || s.Summary == "" {
			t.Errorf("source %q: title, doc and summary are required", s.Name)
		}
	}
}

func TestSourceParts(t *testing.T) {
	got := SourceParts(`RFC 9110 §9.2.2 ("A client SHOULD NOT."); replaysafe; request-dispatch-guarantees (acquisition); RFC 9114 §4.1.1 and §8.1`)
	want := []SourcePart{
		{"RFC 9110", ` §9.2.2 ("A client SHOULD NOT.")`},
		{"replaysafe", ""},
		{"request-dispatch-guarantees", " (acquisition)"},
		{"RFC 9114", " §4.1.1 and §8.1"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("part %d: got %q, want %q", i, got[i], want[i])
		}
	}
}
