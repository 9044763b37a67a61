package conformance

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
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

// Usage is the text of the loopback suite's -h before the flags.
const Usage = `usage: replaysafe conformance [-quick] [-json] [-runs N] [-case REGEX]

Runs fault scenarios over loopback against replaysafe and its peers (net/http, x/net/http2,
quic-go/http3), each with a fresh scripted server that counts the copies of the request it
receives. The scenarios are the files of internal/harness/conformance/testdata.

flags:
`

// ExtraFlags, when set, registers flags for Extra on Main's flag set.
var ExtraFlags func(fs *flag.FlagSet)

// Flags are the loopback suite's command-line flags.
type Flags struct {
	JSON  bool   // -json: the reports as JSON, no table
	Runs  int    // -runs: runs of each case; 0 means DefaultRuns, or QuickRuns with Quick
	Quick bool   // -quick
	Case  string // -case: a regular expression over the case names
}

// Register defines the flags on fs, and ExtraFlags' when it is set.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.JSON, "json", false, "print the reports as one JSON document instead of the tables")
	fs.IntVar(&f.Runs, "runs", 0, fmt.Sprintf("runs of each case (default %d, %d with -quick)", DefaultRuns, QuickRuns))
	fs.BoolVar(&f.Quick, "quick", false, "few runs, the slow proxy tunnel cuts shortened, each deadline-bound peer once")
	fs.StringVar(&f.Case, "case", "", "run only the cases whose name (scenario/network) matches this regular expression")
	if ExtraFlags != nil {
		ExtraFlags(fs)
	}
}

// Settings returns the settings the flags ask for, or the usage error
// that -runs is out of range.
func (f Flags) Settings() (Settings, error) {
	set := Settings{Runs: f.Runs, Quick: f.Quick}
	if set.Runs == 0 {
		set.Runs = DefaultRuns
		if set.Quick {
			set.Runs = QuickRuns
		}
	}
	if set.Runs < 1 || set.Runs > maxRuns {
		return Settings{}, fmt.Errorf("-runs must be between 1 and %d", maxRuns)
	}
	return set, nil
}

// Main is the loopback suite as a command: it runs the scenarios over
// loopback against replaysafe and its peers side by side, counting at
// the server, checks every replaysafe attempt's trace with tracecheck,
// and streams each case's rows as it finishes (or prints the reports as
// one JSON array at the end with -json). It returns the exit code: 0 when
// replaysafe met every expectation, 1 when it did not, 2 for bad flags.
// `replaysafe conformance` runs it through RunSuite, beside its other
// sections.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f Flags
	f.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, Usage)
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
	table := stdout
	if f.JSON {
		table = io.Discard
	}
	all, code := RunSuite(f, fs, table, stderr)
	if code == 2 || !f.JSON {
		return code
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(all); err != nil {
		fmt.Fprintf(stderr, "conformance: %v\n", err)
		return 1
	}
	return code
}

// ProgressInterval is how often RunSuite says, on its progress writer,
// which run of which client each unfinished case is at.
var ProgressInterval = 5 * time.Second

// RunSuite runs the cases the flags select (the built-in scenarios, then
// Extra's sections, given fs to read their flags), streaming each case's
// rows to table as it finishes and the totals at the end, and progress
// to progress: a line a finished case, and every ProgressInterval the run
// and client of each case still running. It returns the reports and the
// exit code: 0 when replaysafe met every expectation, 1 when it did not,
// 2 for a bad flag (said on progress).
func RunSuite(f Flags, fs *flag.FlagSet, table, progress io.Writer) ([]Report, int) {
	set, err := f.Settings()
	if err != nil {
		fmt.Fprintf(progress, "conformance: %v\n", err)
		return nil, 2
	}
	re, err := regexp.Compile(f.Case)
	if err != nil {
		fmt.Fprintf(progress, "conformance: -case: %v\n", err)
		return nil, 2
	}
	scenarios, err := Scenarios()
	if err != nil {
		fmt.Fprintln(progress, err)
		return nil, 1
	}
	sections := []Section{{Title: "loopback scenarios", Cases: Cases(scenarios)}}
	if Extra != nil {
		more, err := Extra(fs)
		if err != nil {
			fmt.Fprintf(progress, "conformance: %v\n", err)
			return nil, 2
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
		fmt.Fprintf(progress, "conformance: no case matches %q\n", f.Case)
		return nil, 2
	}

	start := time.Now()
	fmt.Fprintf(progress, "conformance: %d cases, %d runs each, %d at once\n", total, set.Runs, Workers())
	running := newRunning(progress, start)
	set.OnRun = running.at
	stop := running.report(ProgressInterval)
	defer stop()
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
			running.done(sec.Cases[i].Name(), fmt.Sprintf("[case %d/%d, %s] %s\n", finished, total, time.Since(start).Round(100*time.Millisecond), sec.Cases[i].Name()))
		})
		all = append(all, reps...)
	}
	printSummary(table, all, set.Runs, time.Since(start))
	for _, r := range all {
		if r.Client == Replaysafe && !r.OK {
			return all, 1
		}
	}
	return all, 0
}

// running is where each unfinished case is: its client and run.
type running struct {
	w     io.Writer
	start time.Time

	mu    sync.Mutex
	where map[string]string // case name: "client run i/n"
}

func newRunning(w io.Writer, start time.Time) *running {
	return &running{w: w, start: start, where: map[string]string{}}
}

// at records that case c's client starts its run-th run of runs.
func (r *running) at(c Case, client string, run, runs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.where[c.Name()] = fmt.Sprintf("%s run %d/%d", client, run, runs)
}

// done records that case name finished and prints line on the progress
// writer, which the reporter writes to under the same lock.
func (r *running) done(name, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.where, name)
	io.WriteString(r.w, line)
}

// report prints where every unfinished case is, every interval, until
// the returned function is called.
func (r *running) report(interval time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			r.mu.Lock()
			for _, name := range slices.Sorted(maps.Keys(r.where)) {
				fmt.Fprintf(r.w, "[running, %s] %s: %s\n", time.Since(r.start).Round(100*time.Millisecond), name, r.where[name])
			}
			r.mu.Unlock()
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// columns are the table's columns and their widths in characters (µs is
// two); a cell wider than its column pushes the rest of the line right.
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
		pad = max(columns[i].width-utf8.RuneCountInString(c), 0) + 2
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
