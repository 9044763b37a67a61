package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Result is one benchmark's measurements: the median of its samples when
// it ran more than once (-count).
type Result struct {
	// Name is the benchmark's name without "Benchmark" and without the
	// GOMAXPROCS suffix: "RoundTrip/h1/GET/c1/replaysafe".
	Name string
	// Package is the import path it ran in.
	Package string
	// Runs is the number of samples.
	Runs int
	// Metrics maps a unit ("ns/op", "allocs/op", "p99-ns") to its value.
	Metrics map[string]float64
}

// Group is the name without its last element (the client), and Client
// that element; a name without "/" is its own group with no client.
func (r Result) Group() (group, client string) {
	i := strings.LastIndexByte(r.Name, '/')
	if i < 0 {
		return r.Name, ""
	}
	return r.Name[:i], r.Name[i+1:]
}

// Output is what a benchmark run printed, parsed.
type Output struct {
	// Env holds the header lines: goos, goarch, cpu.
	Env     map[string]string
	Results []Result
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads go test -bench output. Lines that are not benchmark results
// or the goos/goarch/cpu/pkg headers are skipped.
func Parse(r io.Reader) (*Output, error) {
	out := &Output{Env: map[string]string{}}
	samples := map[string]map[string][]float64{} // name → unit → values
	pkgOf := map[string]string{}
	var order []string
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, key := range []string{"goos", "goarch", "cpu", "pkg"} {
			if v, ok := strings.CutPrefix(line, key+": "); ok {
				if key == "pkg" {
					pkg = v
				} else {
					out.Env[key] = v
				}
			}
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		m := samples[name]
		if m == nil {
			m = map[string][]float64{}
			samples[name] = m
			order = append(order, name)
			pkgOf[name] = pkg
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("bench: %q: value %q: %w", line, f[i], err)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, name := range order {
		res := Result{Name: name, Package: pkgOf[name], Metrics: map[string]float64{}}
		for unit, vs := range samples[name] {
			res.Metrics[unit] = median(vs)
			res.Runs = max(res.Runs, len(vs))
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Pair is a replaysafe result beside one peer's.
type Pair struct {
	Group      string
	Peer       string
	Replaysafe Result
	Other      Result
	// Ratios maps every unit both measured to peer ÷ replaysafe: 1.0 or
	// more means replaysafe is at least as good (for req/s, the one
	// higher-is-better unit, the ratio is replaysafe ÷ peer instead).
	Ratios map[string]float64
}

// higherIsBetter lists the units where more is better.
var higherIsBetter = map[string]bool{"req/s": true}

// Pairs pairs every replaysafe result with each peer in its group, in the
// order the results came.
func (o *Output) Pairs() []Pair {
	var pairs []Pair
	for _, rs := range o.Results {
		group, client := rs.Group()
		if client != Replaysafe {
			continue
		}
		for _, other := range o.Results {
			g, c := other.Group()
			if g != group || c == Replaysafe {
				continue
			}
			p := Pair{Group: group, Peer: c, Replaysafe: rs, Other: other, Ratios: map[string]float64{}}
			for unit, v := range rs.Metrics {
				w, ok := other.Metrics[unit]
				if !ok {
					continue
				}
				if higherIsBetter[unit] {
					v, w = w, v
				}
				p.Ratios[unit] = ratio(w, v)
			}
			pairs = append(pairs, p)
		}
	}
	return pairs
}

// ratio is a ÷ b, with 0 ÷ 0 = 1 and a ÷ 0 = +Inf.
func ratio(a, b float64) float64 {
	switch {
	case b == 0 && a == 0:
		return 1
	case b == 0:
		return math.Inf(1)
	}
	return a / b
}

// Singles returns the results without a peer (the fsm benchmarks).
func (o *Output) Singles() []Result {
	var rs []Result
	for _, r := range o.Results {
		group, client := r.Group()
		paired := false
		for _, other := range o.Results {
			if g, c := other.Group(); client != "" && g == group && c != client {
				paired = true
				break
			}
		}
		if !paired {
			rs = append(rs, r)
		}
	}
	return rs
}

// primaryUnit is the unit a pair is judged on: its memory metric if it
// has one, else its time.
func primaryUnit(r Result) string {
	var custom []string
	for unit := range r.Metrics {
		if strings.HasPrefix(unit, "B/") && unit != "B/op" {
			custom = append(custom, unit)
		}
	}
	if len(custom) > 0 {
		sort.Strings(custom)
		return custom[0]
	}
	return "ns/op"
}

// tableUnits are the units WriteTable has columns for; the others go to
// its last column.
var tableUnits = map[string]bool{"ns/op": true, "p50-ns": true, "p99-ns": true, "allocs/op": true, "B/op": true, "req/s": true}

// WriteTable prints the pairs side by side, then the results without a
// peer.
func (o *Output) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BENCHMARK\tPEER\tUNIT\tREPLAYSAFE\tPEER\tRATIO\tP50 RATIO\tP99 RATIO\tALLOCS RS\tALLOCS PEER\tALLOCS RATIO\tOTHER (RS/PEER)\t")
	for _, p := range o.Pairs() {
		unit := primaryUnit(p.Replaysafe)
		var other []string
		for u := range p.Ratios {
			if u != unit && !tableUnits[u] {
				other = append(other, u+" "+num(p.Replaysafe.Metrics, u)+"/"+num(p.Other.Metrics, u))
			}
		}
		sort.Strings(other)
		allocs := []string{num(p.Replaysafe.Metrics, "allocs/op"), num(p.Other.Metrics, "allocs/op"), rat(p.Ratios, "allocs/op")}
		if unit != "ns/op" {
			allocs = []string{"-", "-", "-"} // a memory measurement's allocations are its setup's
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Group, p.Peer, unit,
			num(p.Replaysafe.Metrics, unit), num(p.Other.Metrics, unit), rat(p.Ratios, unit),
			rat(p.Ratios, "p50-ns"), rat(p.Ratios, "p99-ns"),
			allocs[0], allocs[1], allocs[2],
			strings.Join(other, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	singles := o.Singles()
	if len(singles) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BENCHMARK\tNS/OP\tALLOCS/OP\tOTHER\t")
	for _, r := range singles {
		var other []string
		for unit, v := range r.Metrics {
			if unit != "ns/op" && unit != "allocs/op" && unit != "B/op" {
				other = append(other, strconv.FormatFloat(v, 'f', -1, 64)+" "+unit)
			}
		}
		sort.Strings(other)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.Name, num(r.Metrics, "ns/op"), num(r.Metrics, "allocs/op"), strings.Join(other, ", "))
	}
	return tw.Flush()
}

func num(m map[string]float64, unit string) string {
	v, ok := m[unit]
	if !ok {
		return "-"
	}
	if v >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func rat(m map[string]float64, unit string) string {
	v, ok := m[unit]
	if !ok {
		return "-"
	}
	if math.IsInf(v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
