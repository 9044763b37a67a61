package campaign

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args    []string
		want    Config
		wantErr string
	}{
		{args: nil, want: Config{FuzzTime: 10 * time.Minute, Parallel: 1, Target: regexp.MustCompile(""), Dir: "."}},
		{args: []string{"-time", "30s", "-parallel", "3", "-target", "Machine", "-dir", "/src/replaysafe"},
			want: Config{FuzzTime: 30 * time.Second, Parallel: 3, Target: regexp.MustCompile("Machine"), Dir: "/src/replaysafe"}},
		{args: []string{"-time=1h"}, want: Config{FuzzTime: time.Hour, Parallel: 1, Target: regexp.MustCompile(""), Dir: "."}},
		{args: []string{"-time=2m", "-per-target"}, want: Config{FuzzTime: 2 * time.Minute, PerTarget: true, Parallel: 1, Target: regexp.MustCompile(""), Dir: "."}},
		{args: []string{"-time", "soon"}, wantErr: "invalid value"},
		{args: []string{"-time", "0s"}, wantErr: "positive"},
		{args: []string{"-parallel", "0"}, wantErr: "at least 1"},
		{args: []string{"-target", "("}, wantErr: "-target"},
		{args: []string{"-colour"}, wantErr: "not defined"},
		{args: []string{"extra"}, wantErr: "unexpected argument"},
	}
	for _, c := range cases {
		got, err := ParseArgs(c.args, io.Discard)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseArgs(%q) error = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.FuzzTime != c.want.FuzzTime || got.PerTarget != c.want.PerTarget || got.Parallel != c.want.Parallel ||
			got.Target.String() != c.want.Target.String() || got.Dir != c.want.Dir {
			t.Errorf("ParseArgs(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
}

func TestMainUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage: replaysafe fuzz") || out.Len() != 0 {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	for _, flag := range []string{"-time", "-per-target", "-parallel", "-target", "-dir"} {
		if !strings.Contains(errOut.String(), "  "+flag+" ") && !strings.Contains(errOut.String(), "  "+flag+"\n") {
			t.Errorf("-h does not list %s:\n%s", flag, errOut.String())
		}
	}
	errOut.Reset()
	if code := Main([]string{"-parallel", "-1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "at least 1") {
		t.Errorf("bad flag: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main([]string{"-target", "NoSuchTarget"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "no target matches") {
		t.Errorf("no target: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main([]string{"-dir", t.TempDir()}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-dir") {
		t.Errorf("no fuzz dir: exit %d, %q", code, errOut.String())
	}
}

func TestTargetFlags(t *testing.T) {
	for _, name := range Targets() {
		for _, f := range targetFlags(name) {
			if !strings.HasPrefix(f, "-") {
				t.Errorf("%s: %q is not a flag", name, f)
			}
		}
	}
	if f := targetFlags("NoSuchTarget"); f != nil {
		t.Errorf("flags for an unknown target: %v", f)
	}
}

func TestParseProgress(t *testing.T) {
	cases := []struct {
		line string
		want Progress
		ok   bool
	}{
		{"fuzz: elapsed: 3s, execs: 1234 (411/sec), new interesting: 5 (total: 12)", Progress{3 * time.Second, 1234, 411, 5, 12}, true},
		{"fuzz: elapsed: 1m3s, execs: 98765432 (1567600/sec), new interesting: 0 (total: 44)", Progress{63 * time.Second, 98765432, 1567600, 0, 44}, true},
		{"    fuzz: elapsed: 0s, execs: 0 (0/sec), new interesting: 0 (total: 3)", Progress{0, 0, 0, 0, 3}, true},
		{"fuzz: elapsed: 0s, gathering baseline coverage: 0/42 completed", Progress{}, false},
		{"fuzz: elapsed: 3s, execs: 12 (4/sec)", Progress{}, false},
		{"fuzz: elapsed: forever, execs: 1 (1/sec), new interesting: 1 (total: 1)", Progress{}, false},
		{"--- FAIL: FuzzX (0.10s)", Progress{}, false},
	}
	for _, c := range cases {
		got, ok := ParseProgress(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseProgress(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
	if s := (Progress{3 * time.Second, 1234, 411, 5, 12}).String(); s != "elapsed 3s, 1234 execs (411/s), 5 new interesting (corpus 12)" {
		t.Errorf("Progress.String = %q", s)
	}
}

func TestParseCrasher(t *testing.T) {
	cases := []struct{ line, want string }{
		{"    Failing input written to testdata/fuzz/FuzzSomething/582528ddfad69eb5", "testdata/fuzz/FuzzSomething/582528ddfad69eb5"},
		{"Failing input written to testdata/fuzz/FuzzX/abc", "testdata/fuzz/FuzzX/abc"},
		{"    To re-run:", ""},
		{"    go test -run=FuzzX/abc", ""},
		{"Failing input written to /tmp/elsewhere", ""},
	}
	for _, c := range cases {
		got, ok := ParseCrasher(c.line)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("ParseCrasher(%q) = %q, %v; want %q", c.line, got, ok, c.want)
		}
	}
	if got := ReplayCommand("FuzzX", "testdata/fuzz/FuzzX/abc"); got != "go test -run=FuzzX/abc ./fuzz/" {
		t.Errorf("ReplayCommand = %q", got)
	}
}

// fuzzFuncs returns the names of the func FuzzX(f *testing.F) in dir.
func fuzzFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") && fn.Type.Params.NumFields() == 1 {
				out[fn.Name.Name] = true
			}
		}
	}
	return out
}

// The target list is every fuzz target of package fuzz, each buildable by
// OSS-Fuzz: compile_native_go_fuzzer finds a target's file by grepping the
// package directory, subdirectories included, for its name, so the name
// must be in one .go file only and no name may contain another; and
// docs/fuzzing.md has the target's build line.
func TestTargetsListEveryFuzzFunc(t *testing.T) {
	targets := Targets()
	funcs := fuzzFuncs(t, filepath.Join("..", "..", "..", "fuzz"))
	listed := map[string]bool{}
	for _, name := range targets {
		if listed[name] {
			t.Errorf("%s is listed twice", name)
		}
		listed[name] = true
		if !funcs[name] {
			t.Errorf("targets.txt lists %s, which is not a fuzz target in fuzz/", name)
		}
	}
	for name := range funcs {
		if !listed[name] {
			t.Errorf("fuzz/ has %s, which targets.txt does not list", name)
		}
	}

	var goFiles []string
	err := filepath.WalkDir(filepath.Join("..", "..", "..", "fuzz"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			goFiles = append(goFiles, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "fuzzing.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range targets {
		var in []string
		for _, f := range goFiles {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(name)) {
				in = append(in, f)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s appears in %d .go files under fuzz/ (%v); OSS-Fuzz needs exactly one", name, len(in), in)
		}
		for _, other := range targets {
			if other != name && strings.Contains(other, name) {
				t.Errorf("%s contains %s; OSS-Fuzz's grep would find both files", other, name)
			}
		}
		line := "compile_native_go_fuzzer github.com/replaysafe/replaysafe/fuzz " + name + " "
		if !bytes.Contains(docs, []byte(line)) {
			t.Errorf("docs/fuzzing.md has no %q line", line)
		}
	}
}

// TestBudget: a campaign's -time is shared among its targets. Each gets
// the time to the deadline over the rounds its remaining targets need,
// less the last target's cost beyond its fuzzing time, and never less
// than minFuzzTime.
func TestBudget(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	b := &budget{total: 70 * time.Second, deadline: t0.Add(70 * time.Second), parallel: 1, left: 7}
	if got := b.next(t0); got != 10*time.Second {
		t.Fatalf("first of 7 targets in 70s: %v, want 10s", got)
	}
	b.done(15*time.Second, 10*time.Second) // 5s of building and ending
	// 55s left for 6 targets is 9.17s each, less the 5s of overhead.
	if got := b.next(t0.Add(15 * time.Second)); got != 4200*time.Millisecond {
		t.Fatalf("second target: %v, want 4.2s", got)
	}
	b.done(9200*time.Millisecond, 4200*time.Millisecond)
	if got := b.next(t0.Add(69 * time.Second)); got != minFuzzTime {
		t.Fatalf("a target starting with 1s left: %v, want the minimum %v", got, minFuzzTime)
	}
	if got := b.next(t0.Add(80 * time.Second)); got != minFuzzTime {
		t.Fatalf("a target starting past the deadline: %v, want the minimum %v", got, minFuzzTime)
	}

	// Two at a time: 4 targets are two rounds.
	p := &budget{total: time.Minute, deadline: t0.Add(time.Minute), parallel: 2, left: 4}
	if got, got2 := p.next(t0), p.next(t0); got != 30*time.Second || got2 != 30*time.Second {
		t.Fatalf("4 targets 2 at a time in 1m: %v and %v, want 30s each", got, got2)
	}
}

// TestMeanPerSecond: the summary's EXECS/S is the run's executions over
// its elapsed time, not the last interval's rate.
func TestMeanPerSecond(t *testing.T) {
	p := Progress{Elapsed: 4 * time.Second, Execs: 1000, PerSecond: 900}
	if got := p.MeanPerSecond(); got != 250 {
		t.Errorf("MeanPerSecond = %d, want 250", got)
	}
	if got := (Progress{}).MeanPerSecond(); got != 0 {
		t.Errorf("MeanPerSecond before any progress = %d, want 0", got)
	}
}

// A real campaign over a scratch module: one target that finds nothing and
// one that crashes. The campaign reports the crasher, go saved it where
// the campaign says, and the replay command replays it.
func TestRunReportsCrashers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -fuzz")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/campaigntest\n\ngo 1.26\n")
	write("fuzz/fuzz_test.go", `package fuzz

import "testing"

func FuzzQuiet(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {})
}

func FuzzLoud(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1 && b[0] != 'a' {
			t.Fatal("found it")
		}
	})
}
`)
	var out bytes.Buffer
	cfg := Config{FuzzTime: time.Second, Parallel: 2, Target: regexp.MustCompile(""), Dir: dir}
	// A hang guard, not a deadline the campaign should meet: go test
	// builds and starts the instrumented binary first, which on a
	// two-core machine running the race-detector suite beside it once
	// took about a minute before either target fuzzed, and a one-minute
	// guard then stopped FuzzQuiet before its one second.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := Run(ctx, cfg, []string{"FuzzQuiet", "FuzzLoud"}, goCmd, &out, &out)
	log := out.String()
	t.Logf("campaign output:\n%s", log)
	if code != 1 {
		t.Errorf("exit code %d, want 1 for a crash", code)
	}
	m := regexp.MustCompile(`crasher fuzz/(testdata/fuzz/FuzzLoud/\S+): (go test -run=FuzzLoud/\S+ \./fuzz/)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatal("no crasher line in the summary")
	}
	if _, err := os.Stat(filepath.Join(dir, "fuzz", m[1])); err != nil {
		t.Errorf("the reported crasher is not there: %v", err)
	}
	if !regexp.MustCompile(`(?m)^FuzzQuiet\s+ok\s`).MatchString(log) || !regexp.MustCompile(`(?m)^FuzzLoud\s+crash\s`).MatchString(log) {
		t.Error("the summary table does not show FuzzQuiet ok and FuzzLoud crash")
	}
	replay := exec.Command(goCmd, strings.Fields(m[2])[1:]...)
	replay.Dir = dir
	if b, err := replay.CombinedOutput(); err == nil || !strings.Contains(string(b), "found it") {
		t.Errorf("replaying %q: %v\n%s", m[2], err, b)
	}
}

// TestDeadlineRace: the fuzzing engine's bare deadline at the end of
// -fuzztime is told apart from a failing target.
func TestDeadlineRace(t *testing.T) {
	race := []string{
		"fuzz: elapsed: 1s, execs: 31600 (30525/sec), new interesting: 0 (total: 1)",
		"--- FAIL: FuzzQuiet (1.04s)",
		"    context deadline exceeded",
		"FAIL",
		"exit status 1",
	}
	if !DeadlineRace(race) {
		t.Error("the bare deadline is not recognised")
	}
	for name, tail := range map[string][]string{
		"failing input": append(append([]string(nil), race...), "    Failing input written to testdata/fuzz/FuzzQuiet/abc"),
		"panic":         {"--- FAIL: FuzzQuiet (0.1s)", "panic: boom", "context deadline exceeded"},
		"test error":    {"--- FAIL: FuzzQuiet (0.1s)", "    x_test.go:12: wrong", "context deadline exceeded"},
		"no deadline":   {"--- FAIL: FuzzQuiet (0.1s)", "exit status 1"},
	} {
		if DeadlineRace(tail) {
			t.Errorf("%s: taken for the deadline race", name)
		}
	}
}
