package conformance

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

var (
	rewrite  = flag.Bool("rewrite", false, "rewrite the expectations of testdata/*.txt from what the runs did")
	runsFlag = flag.Int("runs", DefaultRuns, "runs of each case against each client")
)

// TestScenarios reads every scenario file, runs each of its cases
// against each client -runs times, and compares every run with the
// file's expectation: the outcome, the rules that ended replaysafe's
// attempts, and the exact number of identical copies the server
// received. Every replaysafe attempt's trace goes through tracecheck.
// With -rewrite it writes what the runs did back into the files instead
// (a peer's row whose runs differed becomes "measured"; a replaysafe row
// whose runs differed fails and keeps its line).
func TestScenarios(t *testing.T) {
	scenarios, err := Load(os.DirFS("."), "testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) < 40 {
		t.Fatalf("%d scenarios", len(scenarios))
	}
	var traces atomic.Int64
	set := Settings{Runs: *runsFlag}
	t.Run("files", func(t *testing.T) {
		for _, s := range scenarios {
			t.Run(s.ID, func(t *testing.T) {
				t.Parallel()
				var exps []Expectation
				for _, c := range Cases([]*Scenario{s}) {
					for _, cl := range s.Clients {
						rep := RunCase(c, cl, set)
						traces.Add(int64(rep.Traces))
						exp, err := rep.Expectation()
						if err != nil {
							t.Error(err)
							exp, _ = c.Expectation(cl)
						}
						exps = append(exps, exp)
						if *rewrite {
							continue
						}
						checkReport(t, c, rep)
					}
				}
				if *rewrite {
					name := filepath.Join("testdata", s.ID+".txt")
					if err := os.WriteFile(name, []byte(s.Format(exps)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
	t.Logf("%d attempt traces checked by tracecheck", traces.Load())
	if traces.Load() == 0 {
		t.Error("no trace checked")
	}
}

func checkReport(t *testing.T, c Case, rep Report) {
	t.Helper()
	exp, ok := c.Expectation(rep.Client)
	switch {
	case !ok:
		t.Errorf("%s %s: no expectation in the file (run with -rewrite)", c.Name(), rep.Client)
	case rep.Trace != "":
		t.Errorf("%s %s: tracecheck:\n%s", c.Name(), rep.Client, rep.Trace)
	case exp.NA != rep.Skipped:
		t.Errorf("%s %s: n/a is %v in the file, skipped %v", c.Name(), rep.Client, exp.NA, rep.Skipped)
	case rep.Measured && rep.Client == Replaysafe:
		t.Errorf("%s %s: a replaysafe row is measured, not checked", c.Name(), rep.Client)
	case rep.Measured:
		t.Logf("%s %s (measured): %s, copies %s, conns %s, slowest %s, errors %q",
			c.Name(), rep.Client, rep.OutcomeCell(), rep.CopiesCell(), rep.ConnsCell(), rep.Elapsed, rep.Errors)
	case !rep.OK && !rep.Skipped:
		t.Errorf("%s %s: %s, copies %v, rules %s, identical %v, errors %q; want %s",
			c.Name(), rep.Client, rep.OutcomeCell(), rep.Copies, rep.RulesCell(), rep.Identical, rep.Errors, wantCell(rep.Want, rep.Client))
	}
}

// Every file parses, its expectations cover every case and client, and
// formatting its expectations again gives the file back.
func TestFiles(t *testing.T) {
	scenarios, err := Load(os.DirFS("."), "testdata")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range scenarios {
		for _, c := range Cases([]*Scenario{s}) {
			if seen[c.Name()] {
				t.Errorf("duplicate case %s", c.Name())
			}
			seen[c.Name()] = true
			for _, cl := range s.Clients {
				if _, ok := c.Expectation(cl); !ok {
					t.Errorf("%s: no expectation for %s", c.Name(), cl)
				}
			}
		}
		b, err := os.ReadFile(filepath.Join("testdata", s.ID+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Format(s.Expect); got != string(b) && *rewrite {
			if err := os.WriteFile(filepath.Join("testdata", s.ID+".txt"), []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if got != string(b) {
			t.Errorf("%s: not in canonical form (go test -rewrite rewrites it):\n%s", s.ID, got)
		}
	}
	if len(seen) < 90 {
		t.Errorf("%d cases", len(seen))
	}
	embedded, err := Scenarios()
	if err != nil || len(embedded) != len(scenarios) {
		t.Errorf("embedded scenarios: %d, %v; on disk %d", len(embedded), err, len(scenarios))
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"no-proto", "title t\nstep target GET none\n"},
		{"bad-proto", "title t\nproto h9\nstep target GET none\n"},
		{"no-step", "title t\nproto h1\n"},
		{"bad-step", "title t\nproto h1\nstep jump\n"},
		{"bad-action", "title t\nproto h2\nconn teleport\nstep target GET none\n"},
		{"bad-1xx", "title t\nproto h2\nconn 204:refuse\nstep target GET none\n"},
		{"bad-net", "title t\nproto h1\nnets h3\nstep target GET none\n"},
		{"bad-client", "title t\nproto h3\nclients net/http\nstep target GET none\n"},
		{"bad-expect", "title t\nproto h1\nstep target GET none\n----\ntcp replaysafe maybe\n"},
		{"foreign-expect", "title t\nproto h1\nnets tcp\nstep target GET none\n----\ntls replaysafe 200 copies=1\n"},
		{"bad-option", "title t\nproto h1\noption fly\nstep target GET none\n"},
		{"bad-server", "title t\nproto h2\nserver max-requests=0\nstep target GET none\n"},
		{"bad-window", "title t\nproto h2\nserver initial-window=x\nstep target GET none\n"},
		{"unknown", "title t\nproto h1\nfrobnicate\nstep target GET none\n"},
		{"replaysafe-measured", "title t\nproto h1\nnets tcp\nstep target GET none\n----\ntcp replaysafe measured\ntcp net/http 200 copies=1\n"},
	} {
		if _, err := Parse("x", tc.text); err == nil {
			t.Errorf("%s: parsed", tc.name)
		}
	}
}

// A replaysafe row is never "measured": the parser refuses the line, and
// a report of replaysafe runs that differed cannot be written back as
// one; a peer's row can be measured either way.
func TestReplaysafeRowsAreChecked(t *testing.T) {
	const head = "title t\nproto h1\nnets tcp\nstep target GET none\n----\n"
	_, err := Parse("x", head+"tcp replaysafe measured\ntcp net/http measured\n")
	if err == nil || !strings.Contains(err.Error(), "line 6: tcp replaysafe measured: replaysafe rows are checked") {
		t.Errorf("replaysafe measured: %v", err)
	}
	s, err := Parse("x", head+"tcp replaysafe 200 copies=1 rules=RS02\ntcp net/http measured\n")
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := Cases([]*Scenario{s})[0].Expectation(NetHTTP); !e.Measured {
		t.Errorf("a peer's measured row: %+v", e)
	}
	differ := Report{Case: "x/tcp", Network: "tcp", Runs: 2, Outcomes: []Count{{"200", 1}, {"error", 1}}, Copies: []int{1, 2}}
	rs, peer := differ, differ
	rs.Client, peer.Client = Replaysafe, NetHTTP
	if _, err := rs.Expectation(); !errors.Is(err, ErrReplaysafeRunsDiffer) {
		t.Errorf("replaysafe runs that differ: %v", err)
	}
	if e, err := peer.Expectation(); err != nil || !e.Measured {
		t.Errorf("a peer's runs that differ: %+v, %v", e, err)
	}
	agree := rs
	agree.Observed = &Want{Status: 200, Copies: 1, Rules: "RS02"}
	if e, err := agree.Expectation(); err != nil || e.Measured || e.Want != *agree.Observed {
		t.Errorf("replaysafe runs that agree: %+v, %v", e, err)
	}
	// Were a measured replaysafe line to reach RunCase past the parser,
	// the row would still be checked: against the zero expectation here,
	// which one delivered GET does not meet.
	s, err = Parse("x", "title t\nproto h1\nnets tcp\nconn ok\nstep target GET none\n----\n")
	if err != nil {
		t.Fatal(err)
	}
	s.Expect = []Expectation{{Net: "tcp", Client: Replaysafe, Measured: true}}
	rep := RunCase(Cases([]*Scenario{s})[0], Replaysafe, Settings{Runs: 1})
	if rep.Measured || rep.OK || rep.OutcomeCell() != "200 1/1" {
		t.Errorf("a measured replaysafe row past the parser: measured %v, ok %v, %s", rep.Measured, rep.OK, rep.OutcomeCell())
	}
}
