package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// Packages are the packages whose benchmarks `replaysafe bench` runs.
var Packages = []string{"./fsm/", "./internal/harness/bench/"}

// Main is the `replaysafe bench` command: it runs the benchmarks with go
// test (or reads a saved run), prints each replaysafe row beside its peer
// with the ratios, and can write the plot.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 1, "run each benchmark `n` times; the table shows the medians")
	interleave := fs.Bool("interleave", true, "with -count above 1, run the suite n times with -count 1, so that the rows of a pair alternate\n"+
		"and drift of a shared machine falls on both (false: go test -count n, n samples of one row, then of the next)")
	benchtime := fs.String("benchtime", "1s", "go test -benchtime for each benchmark")
	filter := fs.String("filter", ".", "go test -bench `regexp` selecting the benchmarks")
	asJSON := fs.Bool("json", false, "print the results and pairs as JSON instead of a table")
	svg := fs.String("svg", "", "write the ratio plot to `file` (for example docs/performance.svg)")
	in := fs.String("in", "", "read saved go test -bench output from `file` instead of running the benchmarks")
	save := fs.String("o", "", "also save the raw go test output to `file`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: replaysafe bench [flags]

A development command: run it from the repository root, where it runs
  go test -run '^$' -bench FILTER -skip '^BenchmarkMemory$' -benchmem -count 1 -benchtime T ./fsm/ ./internal/harness/bench/
N times (-count N; with -interleave=false once with -count N instead), then
each memory benchmark FILTER selects N times in a process of its own,
streams that output to stderr, and prints every replaysafe benchmark beside
its peers (net/http, x/net/http2, quic-go's http3.Transport) with the ratio
peer ÷ replaysafe, so that 1.0 or more means replaysafe is at least as
fast, allocates no more, holds no more bytes; rows without a peer (a
recovery the peer cannot make) follow the pairs. With -in it reads a saved
run instead.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}

	var raw []byte
	if *in != "" {
		b, err := os.ReadFile(*in)
		if err != nil {
			fmt.Fprintln(stderr, "replaysafe bench:", err)
			return 1
		}
		raw = b
	} else {
		if _, err := os.Stat("go.mod"); err != nil {
			fmt.Fprintln(stderr, "replaysafe bench: run it from the repository root (no go.mod here)")
			return 1
		}
		rounds, perRound := Rounds(*count, *interleave)
		var runs [][]string
		for range rounds {
			runs = append(runs, append([]string{"test", "-run", "^$", "-bench", *filter, "-skip", "^" + memoryBenchmark + "$",
				"-benchmem", "-count", strconv.Itoa(perRound), "-benchtime", *benchtime}, Packages...))
		}
		// Each memory reading in a process of its own: a heap reading
		// taken after another measurement in the same process can see
		// that measurement's connections freed in the middle of it.
		for range *count {
			for _, leaf := range MemoryLeaves(*filter) {
				runs = append(runs, []string{"test", "-run", "^$", "-bench", leaf, "-benchmem", "-count", "1",
					"-benchtime", *benchtime, memoryPackage})
			}
		}
		var buf bytes.Buffer
		for i, args := range runs {
			fmt.Fprintf(stderr, "run %d/%d: go %s\n", i+1, len(runs), join(args))
			cmd := exec.Command("go", args...)
			cmd.Stdout = io.MultiWriter(&buf, stderr)
			cmd.Stderr = stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(stderr, "replaysafe bench: go test:", err)
				return 1
			}
		}
		raw = buf.Bytes()
		fmt.Fprintf(stderr, "go version %s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	}
	if *save != "" {
		if err := os.WriteFile(*save, raw, 0o644); err != nil {
			fmt.Fprintln(stderr, "replaysafe bench:", err)
			return 1
		}
	}
	out, err := Parse(bytes.NewReader(raw))
	if err != nil {
		fmt.Fprintln(stderr, "replaysafe bench:", err)
		return 1
	}
	if len(out.Results) == 0 {
		fmt.Fprintln(stderr, "replaysafe bench: no benchmark results")
		return 1
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err == nil {
			err = out.WriteSVG(f, "replaysafe beside its peers ("+out.Env["cpu"]+")")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "replaysafe bench:", err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Env     map[string]string
			Pairs   []Pair
			Singles []Result
		}{out.Env, out.Pairs(), out.Singles()}); err != nil {
			fmt.Fprintln(stderr, "replaysafe bench:", err)
			return 1
		}
		return 0
	}
	if err := out.WriteTable(stdout); err != nil {
		return 1
	}
	return 0
}

// memoryBenchmark and memoryPackage name the memory benchmarks, which
// bench runs one process per reading (MemoryLeaves).
const (
	memoryBenchmark = "BenchmarkMemory"
	memoryPackage   = "./internal/harness/bench/"
)

// MemoryStates are the states BenchmarkMemory reads for each protocol.
var MemoryStates = []string{"idle-conn", "inflight"}

// MemoryLeaves returns a go test -bench pattern for each memory
// benchmark (protocol / state / client) that filter selects, matched as go
// test matches: the filter's slash-separated elements against the name's.
func MemoryLeaves(filter string) []string {
	var out []string
	for _, p := range Protocols {
		for _, st := range MemoryStates {
			for _, c := range p.Clients {
				name := []string{memoryBenchmark, p.Name, st, c.Name}
				if !matchBench(filter, name) {
					continue
				}
				out = append(out, "^"+memoryBenchmark+"$/^"+regexp.QuoteMeta(p.Name)+"$/^"+regexp.QuoteMeta(st)+"$/^"+regexp.QuoteMeta(c.Name)+"$")
			}
		}
	}
	return out
}

// matchBench reports whether go test -bench filter selects the benchmark
// whose name elements are name; an element that does not compile matches
// nothing.
func matchBench(filter string, name []string) bool {
	for i, el := range strings.Split(filter, "/") {
		if i >= len(name) {
			break
		}
		re, err := regexp.Compile(el)
		if err != nil || !re.MatchString(name[i]) {
			return false
		}
	}
	return true
}

// Rounds returns how many times bench runs go test and the -count of
// each run for count samples of every benchmark: count runs of one
// sample each when interleaving (the rows of a pair then alternate, so
// that a shared machine's drift falls on both), else one run of count.
func Rounds(count int, interleave bool) (rounds, perRound int) {
	if interleave && count > 1 {
		return count, 1
	}
	return 1, count
}

func join(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "^$" || a == "" {
			a = "'" + a + "'"
		}
		b.WriteString(a)
	}
	return b.String()
}
