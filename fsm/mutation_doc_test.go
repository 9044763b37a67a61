//go:build !mutation

package fsm_test

// The figures of docs/mutation.md, measured again or checked:
//
//   - TestMutationDoc (fast, in every go test run) measures the coverage
//     lines again in a subprocess, checks that the gremlins summary, the
//     score table and the list of survivors agree with each other, and
//     that fsm's code is the code of the commit they were measured on.
//   - go test ./fsm/ -run TestMutationRun -args -mutation.run (minutes,
//     by hand) is the command that produces them: gremlins in a scratch
//     copy, then every mutant gremlins leaves "not covered" applied and
//     tested one by one, and the lines to paste into the document.
//
// The mutation runs build with the tag mutation, which leaves this file
// out: a mutant is killed by a test of behaviour, never by a coverage
// figure that moved.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	mutationRun  = flag.Bool("mutation.run", false, "TestMutationRun: run gremlins over fsm in a scratch copy and print docs/mutation.md's figures")
	mutationJSON = flag.String("mutation.json", "", "TestMutationRun: use this gremlins -o result instead of running gremlins")
)

// mutationDoc is docs/mutation.md, relative to this package.
const mutationDoc = "../docs/mutation.md"

// childEnv marks the subprocess that measures coverage, so that it does
// not measure again.
const childEnv = "REPLAYSAFE_MUTATION_DOC_CHILD"

// gremlinsFlags are the flags of the documented gremlins run, in order.
var gremlinsFlags = []string{"unleash", "--invert-bitwise", "--invert-bwassign", "--invert-logical",
	"--invert-assignments", "--invert-loopctrl", "--remove-self-assignments",
	"--workers", "2", "--timeout-coefficient", "30", "--tags", "mutation", "-E", "route/", "-E", "plan/"}

// TestMutationDoc checks docs/mutation.md against what it claims.
func TestMutationDoc(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("the coverage subprocess of TestMutationDoc")
	}
	b, err := os.ReadFile(mutationDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)

	// The coverage lines: measured again.
	for _, c := range coverageRuns {
		line, err := measureCoverage(t, c.run)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.command + "\n    " + line; !strings.Contains(doc, want) {
			t.Errorf("docs/mutation.md does not say what %s measures now:\n    %s", c.command, want)
		}
	}

	// The gremlins summary, the table and the survivors agree.
	s, err := parseSummary(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%.2f%%", 100*float64(s.killed)/float64(s.killed+s.lived)); got != s.efficacy {
		t.Errorf("summary: efficacy %s, but %d killed and %d lived make %s", s.efficacy, s.killed, s.lived, got)
	}
	row := fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %s |", s.commit, s.killed, s.lived, s.notCovered, s.timedOut, s.notViable, s.efficacy)
	if !strings.Contains(doc, row) {
		t.Errorf("docs/mutation.md has no score row %q matching its gremlins summary", row)
	}
	if len(s.survivors) != s.lived {
		t.Errorf("%d survivors listed as equivalent, gremlins counted %d", len(s.survivors), s.lived)
	}
	if !strings.Contains(doc, "    ~/go/bin/gremlins "+strings.Join(gremlinsFlags, " ")+" ./fsm") {
		t.Errorf("docs/mutation.md does not show the gremlins command %q", strings.Join(gremlinsFlags, " "))
	}
	if s.handTotal != s.notCovered {
		t.Errorf("the hand run tested %d mutants, gremlins left %d not covered", s.handTotal, s.notCovered)
	}
	if len(s.handSurvivors) != s.handLived {
		t.Errorf("%d mutants of the hand run listed as equivalent, the hand run counted %d that lived", len(s.handSurvivors), s.handLived)
	}

	// fsm's code is the code the figures were measured on.
	checkMeasuredCommit(t, s.commit)
}

// coverageRuns are the coverage lines of the document: the self-contained
// table tests, and every test of the package.
var coverageRuns = []struct{ command, run string }{
	{"    go test -cover -run '^TestCoverage' ./fsm/", "^TestCoverage"},
	{"    go test -cover ./fsm/", ""},
}

// measureCoverage runs this package's tests matching run (all when
// empty) in a subprocess with a coverage profile, and returns the line
// the document shows: each file's statement coverage for machine.go and
// call.go, and the package's.
func measureCoverage(t *testing.T, run string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			return "", err
		}
		t.Skip("no go command on PATH to measure coverage with")
	}
	profile := filepath.Join(t.TempDir(), "cover.out")
	args := []string{"test", "-covermode=set", "-coverprofile=" + profile}
	if run != "" {
		args = append(args, "-run", run)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append(args, ".")...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	f, err := os.Open(profile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	type count struct{ covered, all int }
	files := map[string]*count{}
	var total count
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		// file:start.col,end.col statements count
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 {
			return "", fmt.Errorf("coverage profile line %q", line)
		}
		n, err1 := strconv.Atoi(fields[1])
		hit, err2 := strconv.Atoi(fields[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", fmt.Errorf("coverage profile line %q: %v", line, err)
		}
		base := filepath.Base(name)
		if files[base] == nil {
			files[base] = &count{}
		}
		for _, c := range []*count{files[base], &total} {
			c.all += n
			if hit > 0 {
				c.covered += n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	pct := func(c *count) string {
		if c == nil || c.all == 0 {
			return "no statements"
		}
		return fmt.Sprintf("%.1f%% of %d statements", 100*float64(c.covered)/float64(c.all), c.all)
	}
	return fmt.Sprintf("machine.go %s, call.go %s, package fsm %s", pct(files["machine.go"]), pct(files["call.go"]), pct(&total)), nil
}

// summary is what the document says of its gremlins run.
type summary struct {
	commit                                         string
	killed, lived, notCovered, timedOut, notViable int
	efficacy                                       string
	survivors                                      []string // the LIVED lines the document explains
	handTotal, handLived                           int      // the not-covered mutants tested by hand, and those that lived
	handSurvivors                                  []string // the hand run's LIVED lines the document explains
}

var (
	summaryRE   = regexp.MustCompile(`(?m)^    Killed: (\d+), Lived: (\d+), Not covered: (\d+)\n    Timed out: (\d+), Not viable: (\d+), Skipped: 0\n    Test efficacy: ([0-9.]+%)`)
	commitRE    = regexp.MustCompile(`(?m)^Measured on commit ([0-9a-f]{7,40})\b`)
	survivorRE  = regexp.MustCompile("(?m)^- `LIVED [A-Z_]+ at [a-z_]+\\.go:\\d+:\\d+`")
	handLivedRE = regexp.MustCompile("(?m)^- `NOT COVERED, LIVED [A-Z_]+ at [a-z_]+\\.go:\\d+:\\d+`")
	handRE      = regexp.MustCompile(`(?m)^\| [a-z_]+\.go \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$`)
)

func parseSummary(doc string) (summary, error) {
	var s summary
	m := summaryRE.FindStringSubmatch(doc)
	c := commitRE.FindStringSubmatch(doc)
	if m == nil || c == nil {
		return s, errors.New("docs/mutation.md: no gremlins summary block or no \"Measured on commit\" line")
	}
	s.commit, s.efficacy = c[1], m[6]
	for i, p := range []*int{&s.killed, &s.lived, &s.notCovered, &s.timedOut, &s.notViable} {
		*p, _ = strconv.Atoi(m[i+1])
	}
	s.survivors = survivorRE.FindAllString(doc, -1)
	s.handSurvivors = handLivedRE.FindAllString(doc, -1)
	for _, h := range handRE.FindAllStringSubmatch(doc, -1) {
		n, _ := strconv.Atoi(h[1])
		var parts int
		for _, v := range h[2:] {
			k, _ := strconv.Atoi(v)
			parts += k
		}
		if parts != n {
			return s, fmt.Errorf("docs/mutation.md: hand run row %q does not add up", h[0])
		}
		s.handTotal += n
		lived, _ := strconv.Atoi(h[3])
		s.handLived += lived
	}
	return s, nil
}

// checkMeasuredCommit fails when fsm's code (its non-test files) differs
// from the commit the figures were measured on: then they are stale, and
// the document says how to measure again.
func checkMeasuredCommit(t *testing.T, commit string) {
	t.Helper()
	// Outside CI a checkout without git or without the commit (a
	// shallow clone) only says so; CI's full clone must compare.
	skipped := t.Logf
	if os.Getenv("CI") == "true" {
		skipped = t.Errorf
	}
	if _, err := exec.LookPath("git"); err != nil {
		skipped("no git: fsm's code not compared with commit %s", commit)
		return
	}
	if err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		skipped("commit %s is not in this clone: fsm's code not compared with it", commit)
		return
	}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.go") })
	var stderr bytes.Buffer
	cmd := exec.Command("git", append([]string{"diff", "--stat", commit, "--"}, names...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git diff: %v: %s", err, stderr.String())
	}
	if len(out) > 0 {
		t.Errorf("fsm's code changed since commit %s, where docs/mutation.md's figures were measured:\n%s"+
			"measure again (go test ./fsm/ -run TestMutationRun -args -mutation.run) and update the document", commit, out)
	}
}

// TestMutationRun is the command behind docs/mutation.md's figures
// (-mutation.run): gremlins over fsm in a scratch copy of the module,
// then each mutant it left "not covered" (a case expression or a
// package-level declaration, which Go's coverage profile has no block
// for) applied to the scratch copy and fsm's tests run against it. It
// prints the document's figures.
func TestMutationRun(t *testing.T) {
	if !*mutationRun && *mutationJSON == "" {
		t.Skip("by hand: go test ./fsm/ -run TestMutationRun -v -timeout 60m -args -mutation.run")
	}
	scratch := t.TempDir()
	copyModule(t, scratch)
	result := *mutationJSON
	if result == "" {
		gremlins, err := exec.LookPath("gremlins")
		if err != nil {
			home, _ := os.UserHomeDir()
			gremlins = filepath.Join(home, "go", "bin", "gremlins")
		}
		result = filepath.Join(t.TempDir(), "gremlins.json")
		cmd := exec.Command(gremlins, append(append(slices.Clone(gremlinsFlags), "-o", result), "./fsm")...)
		cmd.Dir = scratch
		out, err := cmd.CombinedOutput()
		t.Logf("gremlins %s ./fsm:\n%s", strings.Join(gremlinsFlags, " "), lastLines(out, 8))
		if err != nil {
			t.Fatalf("gremlins: %v", err)
		}
	}
	b, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Files []struct {
			Name      string `json:"file_name"`
			Mutations []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
				Line   int    `json:"line"`
				Column int    `json:"column"`
			} `json:"mutations"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	type tally struct{ n, killed, lived, notViable int }
	hand := map[string]*tally{}
	var names []string
	for _, f := range r.Files {
		for _, m := range f.Mutations {
			if m.Status == "LIVED" {
				t.Logf("LIVED %s at %s:%d:%d", m.Type, f.Name, m.Line, m.Column)
			}
			if m.Status != "NOT COVERED" {
				continue
			}
			if hand[f.Name] == nil {
				hand[f.Name] = &tally{}
				names = append(names, f.Name)
			}
			h := hand[f.Name]
			h.n++
			switch outcome := applyAndTest(t, scratch, f.Name, m.Type, m.Line, m.Column); outcome {
			case "killed":
				h.killed++
			case "not viable":
				h.notViable++
				t.Logf("NOT COVERED, NOT VIABLE %s at %s:%d:%d", m.Type, f.Name, m.Line, m.Column)
			default:
				h.lived++
				t.Logf("NOT COVERED, LIVED %s at %s:%d:%d (%s)", m.Type, f.Name, m.Line, m.Column, outcome)
			}
		}
	}
	slices.Sort(names)
	var table strings.Builder
	for _, n := range names {
		h := hand[n]
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %d |\n", n, h.n, h.killed, h.lived, h.notViable)
	}
	t.Logf("not covered, run by hand (file | mutants | killed | lived | not viable):\n%s", table.String())
}

// copyModule copies the module's files that git knows (as they are in the
// working tree) and the untracked files of fsm into dir.
func copyModule(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join("..", name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// mutatorTokens maps gremlins' mutator types to the replacements they
// make, longest operators first.
var mutatorTokens = map[string][][2]string{
	"CONDITIONALS_BOUNDARY": {{"<=", "<"}, {">=", ">"}, {"<", "<="}, {">", ">="}},
	"CONDITIONALS_NEGATION": {{"==", "!="}, {"!=", "=="}, {"<=", ">"}, {">=", "<"}, {"<", ">="}, {">", "<="}},
	"INVERT_LOGICAL":        {{"&&", "||"}, {"||", "&&"}},
	"ARITHMETIC_BASE":       {{"+", "-"}, {"-", "+"}, {"*", "/"}, {"/", "*"}, {"%", "*"}},
	"INVERT_NEGATIVES":      {{"-", "+"}},
	"INCREMENT_DECREMENT":   {{"++", "--"}, {"--", "++"}},
	"INVERT_BITWISE":        {{"&^", "&"}, {"<<", ">>"}, {">>", "<<"}, {"&", "|"}, {"|", "&"}, {"^", "&"}},
	"INVERT_BWASSIGN":       {{"&^=", "&="}, {"<<=", ">>="}, {">>=", "<<="}, {"&=", "|="}, {"|=", "&="}, {"^=", "&="}},
	"INVERT_ASSIGNMENTS":    {{"+=", "-="}, {"-=", "+="}, {"*=", "/="}, {"/=", "*="}, {"%=", "*="}},
	"INVERT_LOOPCTRL":       {{"break", "continue"}, {"continue", "break"}},
}

// applyAndTest applies one mutant to fsm/file in the scratch module, runs
// fsm's tests, restores the file and says what happened: "killed",
// "lived", "not viable" (it does not build) or "timed out".
func applyAndTest(t *testing.T, scratch, file, typ string, line, col int) string {
	t.Helper()
	path := filepath.Join(scratch, "fsm", file)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(orig, []byte("\n"))
	if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1]) {
		t.Fatalf("%s:%d:%d: no such position", file, line, col)
	}
	src := lines[line-1]
	var mutated []byte
	for _, r := range mutatorTokens[typ] {
		if bytes.HasPrefix(src[col-1:], []byte(r[0])) {
			mutated = slices.Concat(src[:col-1], []byte(r[1]), src[col-1+len(r[0]):])
			break
		}
	}
	if mutated == nil {
		t.Fatalf("%s:%d:%d: no %s operator in %q", file, line, col, typ, src)
	}
	lines[line-1] = mutated
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(path, orig, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// -vet=off: a mutant vet frowns on ("suspect and") still compiles,
	// and is tested like any other.
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-vet=off", "-tags", "mutation", "./fsm/")
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return "timed out"
	case err == nil:
		return "lived"
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "not viable"
	}
	return "killed"
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
