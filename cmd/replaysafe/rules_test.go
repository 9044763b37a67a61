package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/replaysafe/replaysafe/spec"
)

func TestRulesVerboseWrapsUnderEachRow(t *testing.T) {
	code, out, _ := runCmd(t, "rules", "-v")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for i, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > rulesWidth {
			t.Errorf("line %d has %d columns, want at most %d: %q", i+1, n, rulesWidth, l)
		}
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, r := range spec.Rules() {
		if !strings.Contains(flat, strings.Join(strings.Fields(r.Statement), " ")) {
			t.Errorf("%s: statement missing from rules -v", r.ID)
		}
		row := strings.Index(out, "\n"+r.ID+"  ")
		if row < 0 {
			t.Errorf("%s: no row", r.ID)
			continue
		}
		// The statement's first words follow the row, indented.
		first := strings.Fields(r.Statement)[0]
		rest := out[row+1:]
		_, after, _ := strings.Cut(rest, "\n")
		for strings.HasPrefix(after, strings.Repeat(" ", 20)) { // the row's own wrapped SOURCE lines
			_, after, _ = strings.Cut(after, "\n")
		}
		if !strings.HasPrefix(strings.TrimLeft(after, " "), first) || !strings.HasPrefix(after, "  ") {
			t.Errorf("%s: the line under the row is %q, want the indented statement", r.ID, strings.SplitN(after, "\n", 2)[0])
		}
	}
}

func TestRulesExplainsEverySource(t *testing.T) {
	code, out, _ := runCmd(t, "rules")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for i, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > rulesWidth {
			t.Errorf("line %d has %d columns: %q", i+1, n, l)
		}
	}
	_, footer, ok := strings.Cut(out, "SOURCES")
	if !ok {
		t.Fatalf("no SOURCES footer:\n%s", out)
	}
	for _, r := range spec.Rules() {
		for _, name := range r.SourceNames() {
			if !strings.Contains(footer, "\n"+name+" ") {
				t.Errorf("%s cites %q, which the footer does not explain", r.ID, name)
			}
		}
	}
	code, long, _ := runCmd(t, "rules", "-sources")
	if code != 0 {
		t.Fatalf("-sources: exit %d", code)
	}
	flat := strings.Join(strings.Fields(long), " ")
	for _, s := range spec.Sources() {
		if !strings.Contains(flat, "docs/"+s.Doc) || !strings.Contains(flat, strings.Join(strings.Fields(s.Summary), " ")) {
			t.Errorf("-sources lacks %s's page or summary", s.Name)
		}
	}
	if strings.Contains(long, "RS20") {
		t.Errorf("-sources prints the rule table too")
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aa bb cc dddddddddd e", 5)
	want := []string{"aa bb", "cc", "dddddddddd", "e"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("wrap = %q, want %q", got, want)
	}
	if len(wrap("", 10)) != 0 {
		t.Error("wrap of nothing gives lines")
	}
}

// TestRulesSeparatesCallRules: the call rules follow the attempt rules
// under a line of their own.
func TestRulesSeparatesCallRules(t *testing.T) {
	code, out, _ := runCmd(t, "rules")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	sep := strings.Index(out, "-- call rules:")
	if sep < 0 {
		t.Fatal("no call-rules line")
	}
	for _, r := range spec.Rules() {
		at := strings.Index(out, "\n"+r.ID+"  ")
		if at < 0 || (at > sep) != r.Call {
			t.Errorf("%s (call rule %v) at %d, the call-rules line at %d", r.ID, r.Call, at, sep)
		}
	}
}
