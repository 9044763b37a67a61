package conformance

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// DefaultRuns is how many times Main runs each case.
const DefaultRuns = 30

// QuickRuns is how many times Main -quick runs each case.
const QuickRuns = 3

// maxRuns bounds -runs.
const maxRuns = 10000

// Section is a titled group of cases in the command's output. Main runs
// the built-in scenarios as the first section and then every section
// Extra returns, each streamed the same way; a later flag (real servers,
// say) adds its cases by appending to Extra.
type Section struct {
	// Title heads the section's output.
	Title string
	// Cases are the section's cases, in table order.
	Cases []Case
}

// Extra, when set, returns more sections for Main to run after the
// built-in one, given the parsed flag set (so that it can read its own
// flags, registered by ExtraFlags).
var Extra func(fs *flag.FlagSet) ([]Section, error)

// usage is the text of -h before the flags.
const usage = `usage: replaysafe conformance [-quick] [-json] [-runs N] [-case REGEX]

Runs fault scenarios over loopback against replaysafe and its peers (net/http, x/net/http2,
quic-go/http3), each with a fresh scripted server that counts the copies of the request it
receives. The scenarios are the files of internal/harness/conformance/testdata.

flags:
`

// ExtraFlags, when set, registers flags for Extra on Main's flag set.
var ExtraFlags func(fs *flag.FlagSet)

// Main is the `replaysafe conformance` command: it runs the scenarios
// over loopback against replaysafe and its peers side by side, counting
// at the server, checks every replaysafe attempt's trace with tracecheck,
// and streams each case's rows as it finishes with a progress line (or
// prints JSON at the end with -json). It returns the exit code: 0 when
// replaysafe met every expectation, 1 when it did not, 2 for bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the reports as JSON at the end")
	runs := fs.Int("runs", 0, fmt.Sprintf("runs of each case (default %d, %d with -quick)", DefaultRuns, QuickRuns))
	quick := fs.Bool("quick", false, "few runs, the slow proxy tunnel cuts shortened, each deadline-bound peer once")
	pattern := fs.String("case", "", "run only the cases whose name (scenario/network) matches this regular expression")
	if ExtraFlags != nil {
		ExtraFlags(fs)
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
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
	set := Settings{Runs: *runs, Quick: *quick}
	if set.Runs == 0 {
		set.Runs = DefaultRuns
		if set.Quick {
			set.Runs = QuickRuns
		}
	}
	if set.Runs < 1 || set.Runs > maxRuns {
		fmt.Fprintf(stderr, "conformance: -runs must be between 1 and %d\n", maxRuns)
		return 2
	}
	re, err := regexp.Compile(*pattern)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: -case: %v\n", err)
		return 2
	}
	scenarios, err := Scenarios()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sections := []Section{{Title: "loopback scenarios", Cases: Cases(scenarios)}}
	if Extra != nil {
		more, err := Extra(fs)
		if err != nil {
			fmt.Fprintf(stderr, "conformance: %v\n", err)
			return 2
		}
		sections = append(sections, more...)
	}
	total := 0
	for i := range sections {
		var keep []Case
		for _, c := range sections[i].Cases {
			if re.MatchString(c.Name()) {
				keep = append(keep, c)
			}
		}
		sections[i].Cases = keep
		total += len(keep)
	}
	if total == 0 {
		fmt.Fprintf(stderr, "conformance: no case matches %q\n", *pattern)
		return 2
	}

	table, progress := stdout, stderr
	if *asJSON {
		table = io.Discard
	}
	start := time.Now()
	fmt.Fprintf(progress, "conformance: %d cases, %d runs each, %d at once\n", total, set.Runs, Workers())
	var all []Report
	finished := 0
	for _, sec := range sections {
		if len(sec.Cases) == 0 {
			continue
		}
		fmt.Fprintf(table, "== %s\n", sec.Title)
		printHeader(table)
		reps := RunAll(sec.Cases, set, func(i int, reps []Report) {
			finished++
			printCase(table, sec.Cases[i], reps)
			fmt.Fprintf(progress, "[case %d/%d, %s] %s\n", finished, total, time.Since(start).Round(100*time.Millisecond), sec.Cases[i].Name())
		})
		all = append(all, reps...)
	}
	printSummary(table, all, set.Runs, time.Since(start))
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(all); err != nil {
			fmt.Fprintf(stderr, "conformance: %v\n", err)
			return 1
		}
	}
	for _, r := range all {
		if r.Client == Replaysafe && !r.OK {
			return 1
		}
	}
	return 0
}

// columns are the table's columns and their widths; a cell wider than
// its column pushes the rest of the line right.
var columns = []struct {
	name  string
	width int
}{
	{"net", 10}, {"client", 13}, {"outcome", 16}, {"copies", 6}, {"conns", 6}, {"rules", 14}, {"slowest", 9}, {"check", 0},
}

func printLine(w io.Writer, cells []string) {
	var b strings.Builder
	b.WriteString("  ")
	pad := 0
	for i, c := range cells {
		b.WriteString(strings.Repeat(" ", pad))
		b.WriteString(c)
		pad = max(columns[i].width-len(c), 0) + 2
	}
	fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
}

func printHeader(w io.Writer) {
	cells := make([]string, len(columns))
	for i, c := range columns {
		cells[i] = c.name
	}
	printLine(w, cells)
}

// printCase prints a case's title line (with its scenario ID, the first
// half of the names -case matches) and a row per client, then the trace
// and errors of any row that failed.
func printCase(w io.Writer, c Case, reps []Report) {
	fmt.Fprintf(w, "%s (%s)\n", c.Title, c.Name())
	for _, r := range reps {
		printLine(w, Row(r))
	}
	for _, r := range reps {
		if r.Client == Replaysafe && !r.OK && !r.Skipped {
			for _, e := range r.Errors {
				fmt.Fprintf(w, "    error: %s\n", e)
			}
			if r.Trace != "" {
				fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(r.Trace, "\n", "\n    "))
			}
		}
	}
}

// Row returns a report's table cells.
func Row(r Report) []string {
	if r.Skipped {
		return []string{r.Network, r.Client, "n/a", "-", "-", "-", "-", ""}
	}
	check := "ok"
	switch {
	case r.Trace != "":
		check = "TRACE FAILED"
	case r.Measured:
		check = "measured"
	case !r.OK:
		check = "UNEXPECTED: want " + wantCell(r.Want, r.Client)
	}
	return []string{r.Network, r.Client, r.OutcomeCell(), r.CopiesCell(), r.ConnsCell(), r.RulesCell(), cmp.Or(r.Elapsed, "-"), check}
}

// printSummary prints the totals and what the columns mean.
func printSummary(w io.Writer, reps []Report, runs int, took time.Duration) {
	var rsOK, rsAll, traces int
	for _, r := range reps {
		traces += r.Traces
		if r.Client == Replaysafe {
			rsAll++
			if r.OK {
				rsOK++
			}
		}
	}
	fmt.Fprintf(w, "\n%d cases, %d runs each, in %s; replaysafe met its expectation in %d/%d; %d attempt traces checked by tracecheck.\n",
		rsAll, runs, took.Round(100*time.Millisecond), rsOK, rsAll, traces)
	fmt.Fprintln(w, "copies: copies of the request the server received, per run (ok means also identical; a burst: the most any request got);")
	fmt.Fprintln(w, "conns: connections the origin accepted per run; rules: the replaysafe rule that ended each wire attempt (docs/rules.md);")
	fmt.Fprintln(w, "slowest: the slowest run's call of the request, resends included; measured: a peer shown, not checked.")
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
