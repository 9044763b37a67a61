// Package campaign runs fuzz campaigns over the native fuzz targets of
// package fuzz: replaysafe fuzz [-time 10m] [-per-target] [-parallel N]
// [-target REGEX] [-dir path-to-repo]. Each target runs as its own
//
//	go test -run=^$ -fuzz=^Name$ -fuzztime=T -fuzzminimizetime=10s -parallel=W ./fuzz/
//
// in the repository, one after another or N at a time. -time is the
// whole campaign's budget: each target is given its share of what is
// left when it starts, less what starting go test has cost the targets
// before it (-per-target makes -time each target's fuzzing time, as go
// test's -fuzztime). The campaign shows each target's progress (elapsed,
// execs/s, new corpus entries) from go's own progress lines, reports
// every crasher go writes under fuzz/testdata/fuzz/Name/ with the command
// that replays it, and ends with a summary table. The target list is
// targets.txt.
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
	FuzzTime  time.Duration  // -time: the campaign's budget, or each target's fuzzing time with PerTarget
	PerTarget bool           // -per-target: FuzzTime is each target's -fuzztime
	Parallel  int            // -parallel: how many targets run at once
	Target    *regexp.Regexp // -target: which targets run
	Dir       string         // -dir: the repository
}

// usage is the text of -h before the flags.
const usage = `usage: replaysafe fuzz [-time 10m] [-per-target] [-parallel N] [-target REGEX] [-dir path-to-repo]

Runs every fuzz target of fuzz/ (or those matching -target) as go test -fuzz
subprocesses, one at a time or -parallel at once, within -time for the whole
campaign (with -per-target, -time for each target), and reports crashers with
the command that replays them.

flags:
`

// ParseArgs parses the command line (without the subcommand name); -h
// prints the usage and every flag to out and returns flag.ErrHelp, and a
// bad command line says what is wrong on out.
func ParseArgs(args []string, out io.Writer) (Config, error) {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fs.SetOutput(out)
	fuzzTime := fs.Duration("time", 10*time.Minute, "how long the whole campaign fuzzes, shared among the targets (with -per-target: how long each target fuzzes)")
	perTarget := fs.Bool("per-target", false, "make -time each target's fuzzing time (go test -fuzztime), not the campaign's")
	parallel := fs.Int("parallel", 1, "how many targets fuzz at once, sharing the processors")
	target := fs.String("target", "", "a regular expression: only the targets it matches run")
	dir := fs.String("dir", ".", "the replaysafe repository")
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
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
	return Config{FuzzTime: *fuzzTime, PerTarget: *perTarget, Parallel: *parallel, Target: re, Dir: *dir}, nil
}

// Main runs a campaign and returns the exit code: 0 when every target ran
// and found nothing, 1 when a target crashed or failed to run, 2 for a bad
// command line.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, err := ParseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "replaysafe fuzz: %v (see replaysafe fuzz -h)\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return Run(ctx, cfg, Targets(), "go", stdout, stderr)
}

// Result is what one target's run came to.
type Result struct {
	Target   string
	Status   string        // "ok", "crash", "error", "stopped" or "skipped"
	FuzzTime time.Duration // the -fuzztime it was given
	Elapsed  time.Duration // the whole go test run
	Progress Progress      // the last progress line
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
	start := time.Now()
	share := &budget{total: cfg.FuzzTime, deadline: start.Add(cfg.FuzzTime), parallel: parallel, left: len(selected)}
	if cfg.PerTarget {
		fmt.Fprintf(out, "fuzzing %d target(s) for %v each, %d at a time, %d worker(s) each, in %s\n",
			len(selected), cfg.FuzzTime, parallel, workers, cfg.Dir)
	} else {
		fmt.Fprintf(out, "fuzzing %d target(s) within %v in all, each its share of the time left, %d at a time, %d worker(s) each, in %s\n",
			len(selected), cfg.FuzzTime, parallel, workers, cfg.Dir)
	}

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
		fuzzTime := cfg.FuzzTime
		if !cfg.PerTarget {
			fuzzTime = share.next(time.Now())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = runTarget(ctx, cfg.Dir, target, fuzzTime, goCmd, workers, out)
			share.done(results[i].Elapsed, fuzzTime)
		}()
	}
	wg.Wait()
	code := summarize(out, results)
	fmt.Fprintf(out, "campaign: %d target(s) in %v\n", len(selected), time.Since(start).Round(time.Second))
	return code
}

// minFuzzTime is the least fuzzing time a target is given, however
// little of the budget is left.
const minFuzzTime = time.Second

// budget shares a campaign's time among its targets. A target started
// at now with left targets still to start (itself included), parallel at
// a time, gets the time to the deadline divided by the rounds those
// targets need, less what starting go test (building, the baseline
// coverage, the ending) cost the last target that finished beyond its
// fuzzing time, and at least minFuzzTime.
type budget struct {
	total    time.Duration
	deadline time.Time
	parallel int

	mu       sync.Mutex
	left     int
	overhead time.Duration
}

// next returns the fuzzing time of the target that starts at now.
func (b *budget) next(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	rounds := (b.left + b.parallel - 1) / b.parallel
	b.left--
	d := b.deadline.Sub(now)/time.Duration(max(rounds, 1)) - b.overhead
	return max(d.Round(100*time.Millisecond), minFuzzTime)
}

// done records what a target's run took beyond its fuzzing time.
func (b *budget) done(elapsed, fuzzTime time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.overhead = max(elapsed-fuzzTime, 0)
}

// minimizeTime caps go's minimisation of each new corpus entry and
// crasher; go's default is 60s. targets.txt can set another for a target.
const minimizeTime = 10 * time.Second

func runTarget(ctx context.Context, dir, target string, fuzzTime time.Duration, goCmd string, workers int, out io.Writer) Result {
	res := Result{Target: target, Status: "ok", FuzzTime: fuzzTime}
	args := []string{"test", "-run=^$", "-fuzz=^" + target + "$", "-fuzztime=" + fuzzTime.String(),
		"-fuzzminimizetime=" + minimizeTime.String(), "-parallel=" + strconv.Itoa(workers)}
	args = append(append(args, targetFlags(target)...), "./fuzz/") // a later flag wins
	fmt.Fprintf(out, "[%s] %s %s\n", target, goCmd, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
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
	res.Elapsed = time.Since(start)
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
	fmt.Fprintln(tw, "TARGET\tSTATUS\tFUZZTIME\tELAPSED\tEXECS\tEXECS/S\tNEW\tCORPUS\tCRASHERS")
	code := 0
	for _, r := range results {
		p := r.Progress
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\t%d\t%d\t%d\t%d\n", r.Target, r.Status, r.FuzzTime, r.Elapsed.Round(time.Second),
			p.Execs, p.MeanPerSecond(), p.NewInteresting, p.Total, len(r.Crashers))
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

// MeanPerSecond is the run's executions a second so far: Execs over
// Elapsed, where PerSecond is the rate of the last interval only.
func (p Progress) MeanPerSecond() int64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return int64(float64(p.Execs) / p.Elapsed.Seconds())
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
