package conformance

import (
	"strings"
	"testing"
)

// TestH3Cases runs every HTTP/3 case runsPerCase times against
// replaysafe and quic-go's own Transport, with exact copy counts for
// both.
func TestH3Cases(t *testing.T) {
	for _, s := range H3Scenarios() {
		t.Run(s.Name(), func(t *testing.T) {
			t.Parallel()
			for _, client := range H3Clients {
				rep := RunH3Case(s, client, runsPerCase)
				if !rep.OK {
					t.Errorf("%s: %s, copies %v, rules %s, identical %v, errors %q; want %s",
						client, rep.OutcomeCell(), rep.Copies, rep.RulesCell(), rep.Identical, rep.Errors, wantCell(rep.Want, client))
				}
			}
		})
	}
}

func TestH3CaseNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		seen[c.Name()] = true
	}
	for _, c := range H2Cases() {
		seen[c.Name()] = true
	}
	for _, s := range H3Scenarios() {
		if seen[s.Name()] || strings.ContainsAny(s.ID, " /") {
			t.Errorf("HTTP/3 case %q clashes or has a space or slash", s.Name())
		}
		seen[s.Name()] = true
		for _, client := range H3Clients {
			if _, ok := s.Want[client]; !ok {
				t.Errorf("%s: no expectation for %s", s.Name(), client)
			}
		}
	}
}

func TestMainH3Table(t *testing.T) {
	code, out, errs := runMain("-runs", "2", "-case", `^h3-post-rejected/h3$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"replaysafe", QuicGoHTTP3, "RS15,RS02", "(h3-post-rejected)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
