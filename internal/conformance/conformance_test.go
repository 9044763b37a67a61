package conformance

import (
	"strings"
	"testing"
)

// runsPerCase is how many times the suite runs each case against each
// client.
const runsPerCase = DefaultRuns

// TestCases runs every case against both clients and checks every run:
// the outcome, the rules that ended replaysafe's attempts, and the exact
// number of byte-identical copies the server received. net/http's
// expectations document its behaviour beside replaysafe's.
func TestCases(t *testing.T) {
	for _, c := range Cases() {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			for _, client := range Clients {
				wantRS, wantStd := c.Want(c.Network)
				want := wantRS
				if client == NetHTTP {
					if c.Options != nil {
						continue
					}
					want = wantStd
				}
				for i := range runsPerCase {
					r := RunOnce(c, client)
					if !r.Matches(want, client == Replaysafe) {
						t.Fatalf("%s run %d: got %s, %d copies (%d partial, identical %v), rules %q, err %v, setup %v; want %s",
							client, i+1, r.Outcome(), r.Copies, r.Partial, r.Identical, r.Rules, r.Err, r.Setup, wantCell(want, client))
					}
				}
			}
		})
	}
}

func TestCaseNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.Name()] {
			t.Errorf("duplicate case %s", c.Name())
		}
		seen[c.Name()] = true
		if strings.ContainsAny(c.ID, " /") {
			t.Errorf("scenario ID %q has a space or slash", c.ID)
		}
	}
	if len(seen) < 80 {
		t.Errorf("%d cases", len(seen))
	}
}
