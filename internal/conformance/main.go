package conformance

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// DefaultRuns is how many times Main runs each case.
const DefaultRuns = 30

// maxRuns bounds -runs.
const maxRuns = 10000

// Main is the `replaysafe conformance` command: it runs the scenarios
// over loopback against replaysafe and against net/http side by side,
// counting at the server, and prints a table (or JSON with -json). It
// returns the exit code: 0 when replaysafe met every expectation, 1 when
// it did not, 2 for bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the reports as JSON")
	runs := fs.Int("runs", DefaultRuns, "runs of each case")
	pattern := fs.String("case", "", "run only the cases whose name (scenario/network) matches this regular expression")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe conformance [-json] [-runs N] [-case REGEX]")
		fmt.Fprintln(stderr, "\nRuns fault scenarios over loopback against replaysafe and net/http, each with a fresh")
		fmt.Fprintln(stderr, "scripted server that counts the copies of the request it receives.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "conformance: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	if *runs < 1 || *runs > maxRuns {
		fmt.Fprintf(stderr, "conformance: -runs must be between 1 and %d\n", maxRuns)
		return 2
	}
	re, err := regexp.Compile(*pattern)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: -case: %v\n", err)
		return 2
	}
	var cases []Case
	for _, c := range Cases() {
		if re.MatchString(c.Name()) {
			cases = append(cases, c)
		}
	}
	var h2cases []H2Case // h2.go
	for _, c := range H2Cases() {
		if re.MatchString(c.Name()) {
			h2cases = append(h2cases, c)
		}
	}
	var h3cases []H3Scenario // h3.go
	for _, c := range H3Scenarios() {
		if re.MatchString(c.Name()) {
			h3cases = append(h3cases, c)
		}
	}
	if len(cases)+len(h2cases)+len(h3cases) == 0 {
		fmt.Fprintf(stderr, "conformance: no case matches %q\n", *pattern)
		return 2
	}

	reps := slices.Concat(RunAll(cases, *runs), RunAllH2(h2cases, *runs), RunAllH3(h3cases, *runs))
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reps); err != nil {
			fmt.Fprintf(stderr, "conformance: %v\n", err)
			return 1
		}
	} else {
		PrintTable(stdout, reps)
	}
	for _, r := range reps {
		if r.Client == Replaysafe && !r.OK {
			return 1
		}
	}
	return 0
}

// PrintTable prints reports as a table: a title line per scenario (with
// its ID, the first half of the names -case matches), then a line per
// network and client, and a summary.
func PrintTable(w io.Writer, reps []Report) {
	header := []string{"net", "client", "outcome", "copies", "rules", "check"}
	timed := slices.ContainsFunc(reps, func(r Report) bool { return r.Elapsed != "" })
	if timed {
		header = append(header, "slowest")
	}
	type group struct {
		title string
		rows  [][]string
	}
	var groups []group
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len(h)
	}
	var rsOK, rsAll, runs int
	for _, r := range reps {
		title := r.Title + " (" + strings.TrimSuffix(r.Case, "/"+r.Network) + ")"
		if len(groups) == 0 || groups[len(groups)-1].title != title {
			groups = append(groups, group{title: title})
		}
		var row []string
		switch {
		case r.Skipped:
			row = []string{r.Network, r.Client, "n/a", "-", "-", ""}
		default:
			check := "ok"
			switch {
			case r.Measured:
				check = "measured"
			case !r.OK:
				check = "UNEXPECTED: want " + wantCell(r.Want, r.Client)
			}
			if r.Client == Replaysafe {
				rsAll++
				if r.OK {
					rsOK++
				}
				runs = r.Runs
			}
			row = []string{r.Network, r.Client, r.OutcomeCell(), r.CopiesCell(), r.RulesCell(), check}
		}
		if timed {
			row = append(row, cmp.Or(r.Elapsed, "-"))
		}
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
		g := &groups[len(groups)-1]
		g.rows = append(g.rows, row)
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range cells {
			if i == len(cells)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-len(c)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(header)
	for _, g := range groups {
		fmt.Fprintln(w, g.title)
		for _, row := range g.rows {
			line(row)
		}
	}
	fmt.Fprintf(w, "\n%d cases, %d runs each; replaysafe met its expectation in %d/%d.\n", rsAll, runs, rsOK, rsAll)
	fmt.Fprintln(w, "copies: complete copies of the request the server received, per run (ok means also byte-identical);")
	fmt.Fprintln(w, "rules: the replaysafe rule that ended each wire attempt of the request (docs/rules.md).")
	if timed {
		fmt.Fprintln(w, "slowest: the slowest run's call of the request, resends included (HTTP/2 and HTTP/3 cases); measured: a peer shown, not checked.")
	}
}

// wantCell prints an expectation like a table row.
func wantCell(w Want, client string) string {
	out := "error"
	if w.Status != 0 {
		out = fmt.Sprint(w.Status)
	}
	s := fmt.Sprintf("%s, %d copies", out, w.Copies)
	if client == Replaysafe {
		s += ", " + w.Rules
	}
	return s
}
