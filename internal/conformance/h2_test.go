package conformance

import (
	"strings"
	"testing"
)

// TestH2Cases runs every HTTP/2 case: replaysafe runsPerCase times with
// exact counts, each peer as often as its scenario allows, checked where
// the scenario states what the peer does.
func TestH2Cases(t *testing.T) {
	for _, c := range H2Cases() {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			for _, client := range H2Clients {
				rep := RunH2Case(c, client, runsPerCase)
				if rep.Measured {
					t.Logf("%s (measured): %s, copies %s, slowest %s, errors %q", client, rep.OutcomeCell(), rep.CopiesCell(), rep.Elapsed, rep.Errors)
					continue
				}
				if !rep.OK {
					t.Errorf("%s: %s, copies %v, rules %s, identical %v, errors %q; want %s",
						client, rep.OutcomeCell(), rep.Copies, rep.RulesCell(), rep.Identical, rep.Errors, wantCell(rep.Want, client))
				}
			}
		})
	}
}

func TestH2CaseNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		seen[c.Name()] = true
	}
	for _, c := range H2Cases() {
		if seen[c.Name()] || strings.ContainsAny(c.ID, " /") {
			t.Errorf("HTTP/2 case %q clashes or has a space or slash", c.Name())
		}
		seen[c.Name()] = true
		if _, ok := c.Want[Replaysafe]; !ok {
			t.Errorf("%s: no replaysafe expectation", c.Name())
		}
	}
}

func TestMainH2Table(t *testing.T) {
	code, out, errs := runMain("-runs", "2", "-case", `^h2-post-refused/h2$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"slowest", "replaysafe", XNetHTTP2, NetHTTPH2, "RS13,RS02", "(h2-post-refused)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
