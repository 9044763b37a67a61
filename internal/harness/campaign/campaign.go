// Package campaign runs fuzz campaigns over the native fuzz targets of
// package fuzz: replaysafe fuzz [-time 10m] [-parallel N] [-target REGEX]
// [-dir path-to-repo]. Each target runs as its own
//
//	go test -run=^$ -fuzz=^Name$ -fuzztime=T -fuzzminimizetime=10s -parallel=W ./fuzz/
//
// in the repository, one after another or N at a time. The campaign shows
// each target's progress (elapsed, execs/s, new corpus entries) from go's
// own progress lines, reports every crasher go writes under
// fuzz/testdata/fuzz/Name/ with the command that replays it, and ends with
// a summary table. The target list is targets.txt.
package campaign

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

//go:embed targets.txt
var targetList string

// Targets returns the fuzz targets of package fuzz, in campaign order.
func Targets() []string {
	var out []string
	for _, f := range targetLines() {
		out = append(out, f[0])
	}
	return out
}

// targetFlags returns the go test flags targets.txt gives a target after
// its name.
func targetFlags(target string) []string {
	for _, f := range targetLines() {
		if f[0] == target {
			return f[1:]
		}
	}
	return nil
}

func targetLines() [][]string {
	var out [][]string
	for _, line := range strings.Split(targetList, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// Config is a parsed command line.
type Config struct {
	FuzzTime time.Duration  // -time: how long each target fuzzes
	Parallel int            // -parallel: how many targets run at once
	Target   *regexp.Regexp // -target: which targets run
	Dir      string         // -dir: the repository
}

const usage = `usage: replaysafe fuzz [-time 10m] [-parallel N] [-target REGEX] [-dir path-to-repo]

Runs every fuzz target of fuzz/ (or those matching -target) for -time each,
as go test -fuzz subprocesses, one at a time or -parallel at once, and
reports crashers with the command that replays them.
`

// ParseArgs parses the command line (without the subcommand name).
func ParseArgs(args []string) (Config, error) {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fuzzTime := fs.Duration("time", 10*time.Minute, "how long each target fuzzes")
	parallel := fs.Int("parallel", 1, "how many targets fuzz at once")
	target := fs.String("target", "", "a regular expression: only the targets it matches run")
	dir := fs.String("dir", ".", "the replaysafe repository")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *fuzzTime <= 0 {
		return Config{}, fmt.Errorf("-time %v: want a positive duration", *fuzzTime)
	}
	if *parallel < 1 {
		return Config{}, fmt.Errorf("-parallel %d: want at least 1", *parallel)
	}
	re, err := regexp.Compile(*target)
	if err != nil {
		return Config{}, fmt.Errorf("-target: %w", err)
	}
	return Config{FuzzTime: *fuzzTime, Parallel: *parallel, Target: re, Dir: *dir}, nil
}

// Main runs a campaign and returns the exit code: 0 when every target ran
// and found nothing, 1 when a target crashed or failed to run, 2 for a bad
// command line.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, err := ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "replaysafe fuzz: %v\n%s", err, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return Run(ctx, cfg, Targets(), "go", stdout, stderr)
}

// Result is what one target's run came to.
type Result struct {
	Target   string
	Status   string // "ok", "crash", "error" or "skipped"
	Elapsed  time.Duration
	Progress Progress // the last progress line
	Crashers []Crasher
	Err      error
}

// Crasher is a failing input go test -fuzz saved.
type Crasher struct {
	Path   string // as go reports it, relative to fuzz/
	Replay string // the command that replays it, from the repository
}

// Run runs the targets that cfg selects with the go command goCmd and
// prints progress and the summary.
func Run(ctx context.Context, cfg Config, targets []string, goCmd string, stdout, stderr io.Writer) int {
	var selected []string
	for _, t := range targets {
		if cfg.Target.MatchString(t) {
			selected = append(selected, t)
		}
	}
	if len(selected) == 0 {
		fmt.Fprintf(stderr, "replaysafe fuzz: no target matches %q (targets: %s)\n", cfg.Target, strings.Join(targets, ", "))
		return 2
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "fuzz")); err != nil {
		fmt.Fprintf(stderr, "replaysafe fuzz: -dir %s: %v\n", cfg.Dir, err)
		return 2
	}
	parallel := min(cfg.Parallel, len(selected))
	workers := max(1, runtime.NumCPU()/parallel) // go test -fuzz workers for each target
	out := &lockedWriter{w: stdout}
	fmt.Fprintf(out, "fuzzing %d target(s) for %v each, %d at a time, %d worker(s) each, in %s\n",
		len(selected), cfg.FuzzTime, parallel, workers, cfg.Dir)

	results := make([]Result, len(selected))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, target := range selected {
		sem <- struct{}{}
		if ctx.Err() != nil {
			results[i] = Result{Target: target, Status: "skipped"}
			<-sem
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = runTarget(ctx, cfg, target, goCmd, workers, out)
		}()
	}
	wg.Wait()
	return summarize(out, results)
}

// minimizeTime caps go's minimisation of each new corpus entry and
// crasher; go's default is 60s. targets.txt can set another for a target.
const minimizeTime = 10 * time.Second

func runTarget(ctx context.Context, cfg Config, target, goCmd string, workers int, out io.Writer) Result {
	res := Result{Target: target, Status: "ok"}
	args := []string{"test", "-run=^$", "-fuzz=^" + target + "$", "-fuzztime=" + cfg.FuzzTime.String(),
		"-fuzzminimizetime=" + minimizeTime.String(), "-parallel=" + strconv.Itoa(workers)}
	args = append(append(args, targetFlags(target)...), "./fuzz/") // a later flag wins
	fmt.Fprintf(out, "[%s] %s %s\n", target, goCmd, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = cfg.Dir
	cmd.WaitDelay = 10 * time.Second
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return Result{Target: target, Status: "error", Err: err}
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{Target: target, Status: "error", Err: err}
	}
	var tail []string // the last lines, to show when the run fails without a crasher
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 20 {
			tail = tail[1:]
		}
		if p, ok := ParseProgress(line); ok {
			res.Progress = p
			fmt.Fprintf(out, "[%s] %s\n", target, p)
			continue
		}
		if path, ok := ParseCrasher(line); ok {
			c := Crasher{Path: path, Replay: ReplayCommand(target, path)}
			res.Crashers = append(res.Crashers, c)
			fmt.Fprintf(out, "[%s] CRASHER %s\n[%s]   replay: %s\n", target, filepath.Join("fuzz", path), target, c.Replay)
		}
	}
	err = cmd.Wait()
	res.Elapsed = time.Since(start).Round(time.Second)
	switch {
	case len(res.Crashers) > 0:
		res.Status = "crash"
	case ctx.Err() != nil:
		res.Status, res.Err = "stopped", ctx.Err()
	case err != nil && DeadlineRace(tail):
		fmt.Fprintf(out, "[%s] go test failed with a bare \"context deadline exceeded\" at the end of -fuzztime and no failing input: "+
			"the fuzzing engine's own shutdown race (go.dev/issue/75804, fixed in Go 1.27), counted as ok\n", target)
	case err != nil:
		res.Status, res.Err = "error", err
		fmt.Fprintf(out, "[%s] go test failed: %v\n", target, err)
		for _, l := range tail {
			fmt.Fprintf(out, "[%s]   %s\n", target, l)
		}
	}
	return res
}

func summarize(out io.Writer, results []Result) int {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tSTATUS\tELAPSED\tEXECS\tEXECS/S\tNEW\tCORPUS\tCRASHERS")
	code := 0
	for _, r := range results {
		p := r.Progress
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\n", r.Target, r.Status, r.Elapsed, p.Execs, p.PerSecond, p.NewInteresting, p.Total, len(r.Crashers))
		if r.Status != "ok" && r.Status != "skipped" {
			code = 1
		}
	}
	tw.Flush()
	for _, r := range results {
		for _, c := range r.Crashers {
			fmt.Fprintf(out, "crasher %s: %s\n", filepath.Join("fuzz", c.Path), c.Replay)
		}
	}
	if code != 0 {
		fmt.Fprintln(out, "A crasher stays in fuzz/testdata/fuzz/<target>/, where go test ./fuzz/ replays it: fix the bug, then commit the file as a regression seed.")
	}
	return code
}

// Progress is one of go test -fuzz's progress lines:
//
//	fuzz: elapsed: 3s, execs: 1234 (411/sec), new interesting: 5 (total: 12)
type Progress struct {
	Elapsed        time.Duration
	Execs          int64
	PerSecond      int64
	NewInteresting int64
	Total          int64
}

// String prints the progress as one line of a campaign's report.
func (p Progress) String() string {
	return fmt.Sprintf("elapsed %v, %d execs (%d/s), %d new interesting (corpus %d)", p.Elapsed, p.Execs, p.PerSecond, p.NewInteresting, p.Total)
}

var (
	progressLine = regexp.MustCompile(`^fuzz: elapsed: (\S+), execs: (\d+) \((\d+)/sec\), new interesting: (\d+) \(total: (\d+)\)`)
	crasherLine  = regexp.MustCompile(`^\s*Failing input written to (testdata/fuzz/[^\s/]+/\S+)\s*$`)
)

// ParseProgress reads a progress line; ok is false for any other line.
func ParseProgress(line string) (p Progress, ok bool) {
	m := progressLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return Progress{}, false
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return Progress{}, false
	}
	var n [4]int64
	for i := range n {
		if n[i], err = strconv.ParseInt(m[i+2], 10, 64); err != nil {
			return Progress{}, false
		}
	}
	return Progress{Elapsed: d, Execs: n[0], PerSecond: n[1], NewInteresting: n[2], Total: n[3]}, true
}

// ParseCrasher reads go's "Failing input written to testdata/fuzz/Name/HASH"
// line and returns the path, relative to the package directory.
func ParseCrasher(line string) (string, bool) {
	m := crasherLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// ReplayCommand is the command, run from the repository, that replays a
// crasher: go test -run=FuzzX/HASH ./fuzz/.
func ReplayCommand(target, path string) string {
	return "go test -run=" + target + "/" + filepath.Base(path) + " ./fuzz/"
}

// lockedWriter serialises the lines of targets that run at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// DeadlineRace reports whether the last lines of a failed fuzzing run
// show only Go's fuzzing-engine race at the end of -fuzztime
// (go.dev/issue/75804, fixed in Go 1.27): the target failed with a bare
// "context deadline exceeded" and no input failed (no failing input
// written, no panic, no test error). A real finding always writes its
// input, which ParseCrasher sees.
func DeadlineRace(tail []string) bool {
	bare := false
	for _, l := range tail {
		switch t := strings.TrimSpace(l); {
		case t == "context deadline exceeded":
			bare = true
		case strings.Contains(t, "Failing input written"), strings.HasPrefix(t, "panic:"),
			strings.Contains(t, "_test.go:"), strings.Contains(t, ".go:") && strings.Contains(t, "Error"):
			return false
		}
	}
	return bare
}
