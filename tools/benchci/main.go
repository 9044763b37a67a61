// Command benchci summarises a `replaysafe bench` run (raw go test -bench
// output, for example docs/performance-bench.txt) with
// golang.org/x/perf/benchmath: for every benchmark and unit the median of
// its samples with a distribution-free confidence interval (90 % by
// default: with the five samples of `bench -count 5` a 95 % interval of
// the median does not exist, and the 90 % one is the samples' range,
// whose actual confidence is 93.75 %), and for
// every replaysafe row beside its peer the ratio of the medians, the range
// of ratios the two intervals allow, and the Mann-Whitney U test's p-value
// (whether the two samples differ at all).
//
// It lives in its own module (tools/go.mod) so that x/perf is no
// dependency of the library. From the repository root:
//
//	go run -C tools ./benchci ../docs/performance-bench.txt
//	go run -C tools ./benchci -paired ../docs/performance-bench.txt
//
// With -paired it also prints each pair's ratio round by round: sample i
// of a row over sample i of its peer, which an interleaved
// `replaysafe bench -count N` ran in the same round, so that a shared
// machine's drift cancels; their median and interval summarise them.
//
// Ratios are peer ÷ replaysafe for costs (ns/op, p50-ns, p99-ns,
// allocs/op, B/op) and replaysafe ÷ peer for req/s, as in the bench
// table: 1.00 or more means replaysafe is at least as good. -client
// compares every row with another client's instead, for example the
// HTTP/2 peer with the evidence floor beside it:
//
//	go run -C tools ./benchci -paired -client x-net-http2-evidence ../docs/performance-bench.txt
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// paired adds the paired ratios: sample i of a row over sample i of its
// peer, which `replaysafe bench -count N` runs in the same round.
var paired = flag.Bool("paired", false, "also print each pair's ratio per round (sample i beside sample i), its median and interval")

// confidence is the requested confidence level of the intervals.
var confidence = flag.Float64("confidence", 0.9, "confidence `level` of the median's interval")

// units are the measurements summarised, in print order.
var units = []string{"ns/op", "p50-ns", "p99-ns", "req/s", "allocs/op", "B/op", "ns/event"}

// client is the name of the rows every sibling (a benchmark whose name
// differs only in its last element) is compared with: replaysafe's, or
// another's (a protocol's floor beside its peer and replaysafe).
var client = flag.String("client", "replaysafe", "the `client` whose rows the others are compared with (the last element of the benchmark names)")

var procs = regexp.MustCompile(`-\d+$`)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchci [-confidence 0.9] FILE (go test -bench output; - for stdin)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	file := flag.Arg(0)
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchci:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	samples, names, err := read(in, file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchci:", err)
		os.Exit(1)
	}
	write(os.Stdout, samples, names)
	if *paired {
		fmt.Println()
		writePaired(os.Stdout, samples, names)
	}
}

// writePaired prints, for every row of the compared client (-client,
// replaysafe by default) beside each sibling, the ratio of each round's
// two samples (the i-th of each, which ran in the same round of an
// interleaved run, so that drift of a shared machine falls on both) and
// the median of those ratios with its confidence interval. Ratios are
// oriented as in write: 1.00 or more is the compared client at least as
// good.
func writePaired(w io.Writer, samples map[key][]float64, names []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	fmt.Fprintf(tw, "benchmark\tpeer\tunit\tpaired ratio median [CI]\tper round\tn\t\n")
	for _, pr := range pairsOf(names) {
		if strings.HasPrefix(pr.row, "Memory/") {
			continue // a memory reading runs in a process of its own, in no round
		}
		for _, u := range units {
			rs, ok1 := samples[key{pr.row, u}]
			ps, ok2 := samples[key{pr.sibling, u}]
			if !ok1 || !ok2 || len(rs) != len(ps) {
				continue
			}
			ratios := pairedRatios(rs, ps, u == "req/s")
			each := make([]string, len(ratios))
			for i, r := range ratios {
				each[i] = fmt.Sprintf("%.2f", r)
			}
			s := summary(sample(ratios))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f [%.2f, %.2f]\t%s\t%d\t\n", pr.base, pr.peer, u, s.Center, s.Lo, s.Hi, strings.Join(each, " "), len(ratios))
		}
	}
}

// pair is a row of the compared client (row) and a sibling: a benchmark
// whose name differs only in its last element, the peer's name.
type pair struct{ row, sibling, base, peer string }

// pairsOf returns every row of the compared client with each sibling, in
// the order of names.
func pairsOf(names []string) []pair {
	var out []pair
	for _, name := range names {
		base, last := split(name)
		if last != *client {
			continue
		}
		for _, sib := range names {
			if sb, sl := split(sib); sb == base && sl != *client {
				out = append(out, pair{row: name, sibling: sib, base: base, peer: sl})
			}
		}
	}
	return out
}

// pairedRatios returns peer[i] ÷ rs[i] for each round (rs[i] ÷ peer[i]
// when higher is better).
func pairedRatios(rs, peer []float64, higherBetter bool) []float64 {
	out := make([]float64, len(rs))
	for i := range rs {
		if higherBetter {
			out[i] = rs[i] / peer[i]
		} else {
			out[i] = peer[i] / rs[i]
		}
	}
	return out
}

// key is one benchmark's measurements in one unit.
type key struct{ name, unit string }

// read returns every benchmark's values per unit, and the benchmark
// names in the order they first appear.
func read(r io.Reader, file string) (map[key][]float64, []string, error) {
	samples := map[key][]float64{}
	var names []string
	br := benchfmt.NewReader(r, file)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or a unit line
		}
		name := procs.ReplaceAllString(strings.TrimPrefix(string(res.Name.Full()), "Benchmark"), "")
		seen := false
		for _, v := range res.Values {
			unit, value := v.OrigUnit, v.OrigValue
			if unit == "" { // benchfmt keeps only a unit it tidied (ns/op into sec/op)
				unit, value = v.Unit, v.Value
			}
			k := key{name, unit}
			if _, ok := samples[k]; !ok && !seen {
				if !hasName(samples, name) {
					names = append(names, name)
				}
			}
			seen = true
			samples[k] = append(samples[k], value)
		}
	}
	return samples, names, br.Err()
}

func hasName(samples map[key][]float64, name string) bool {
	for k := range samples {
		if k.name == name {
			return true
		}
	}
	return false
}

func write(w io.Writer, samples map[key][]float64, names []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	fmt.Fprintf(tw, "benchmark\tpeer\tunit\treplaysafe median [CI]\tpeer median [CI]\tratio\tratio range\tp\tn\t\n")
	paired := map[string]bool{}
	for _, pr := range pairsOf(names) {
		paired[pr.row], paired[pr.sibling] = true, true
		for _, u := range units {
			rs, ok1 := samples[key{pr.row, u}]
			ps, ok2 := samples[key{pr.sibling, u}]
			if !ok1 || !ok2 {
				continue
			}
			a, b := sample(rs), sample(ps)
			sa, sb := summary(a), summary(b)
			ratio, lo, hi := sb.Center/sa.Center, sb.Lo/sa.Hi, sb.Hi/sa.Lo
			if u == "req/s" {
				ratio, lo, hi = sa.Center/sb.Center, sa.Lo/sb.Hi, sa.Hi/sb.Lo
			}
			c := benchmath.AssumeNothing.Compare(a, b)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.3f\t%d/%d\t\n", pr.base, pr.peer, u,
				format(sa), format(sb), ratio, ratioRange(lo, hi), c.P, c.N1, c.N2)
		}
	}
	for _, name := range names {
		if paired[name] {
			continue
		}
		for _, u := range units {
			v, ok := samples[key{name, u}]
			if !ok {
				continue
			}
			s := summary(sample(v))
			fmt.Fprintf(tw, "%s\t\t%s\t%s\t\t\t\t\t%d\t\n", name, u, format(s), len(v))
		}
	}
}

// sample returns a benchmath sample of a copy of v: NewSample sorts the
// values it is given in place, and the samples of a row must stay in
// round order for the paired ratios, which are computed after the
// medians.
func sample(v []float64) *benchmath.Sample {
	return benchmath.NewSample(slices.Clone(v), &benchmath.DefaultThresholds)
}

// summary is the sample's median with its confidence interval.
func summary(s *benchmath.Sample) benchmath.Summary {
	return benchmath.AssumeNothing.Summary(s, *confidence)
}

func format(s benchmath.Summary) string {
	return fmt.Sprintf("%s [%s, %s]", num(s.Center), num(s.Lo), num(s.Hi))
}

func ratioRange(lo, hi float64) string {
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) || math.IsNaN(lo) || math.IsNaN(hi) {
		return "-"
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

func num(x float64) string {
	switch {
	case math.IsInf(x, 0) || math.IsNaN(x):
		return fmt.Sprint(x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// split returns a benchmark name without its last element, and that
// element (the client).
func split(name string) (string, string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, ""
	}
	return name[:i], name[i+1:]
}
