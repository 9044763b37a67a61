package bench_test

import (
	"bytes"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/internal/harness/bench"
)

func parseSample(t *testing.T) *bench.Output {
	t.Helper()
	f, err := os.Open("testdata/sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := bench.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseCapturedOutput(t *testing.T) {
	out := parseSample(t)
	if out.Env["cpu"] != "AMD EPYC" || out.Env["goos"] != "linux" {
		t.Errorf("env %v", out.Env)
	}
	var names []string
	for _, r := range out.Results {
		names = append(names, r.Name)
	}
	want := "Step Exchange RoundTrip/h1/GET/c1/replaysafe RoundTrip/h1/GET/c1/net-http " +
		"Recovery/h2-refused-stream/replaysafe Recovery/h2-refused-stream/x-net-http2 " +
		"Memory/h2/idle-conn/replaysafe Memory/h2/idle-conn/x-net-http2 " +
		"RoundTrip/h3/GET/c1/replaysafe RoundTrip/h3/GET/c1/quic-go-http3 Recovery/h3-close-crossing/replaysafe"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("results\n%s\nwant\n%s", got, want)
	}
	rs := out.Results[2]
	if rs.Runs != 3 || rs.Metrics["ns/op"] != 75945 || rs.Metrics["allocs/op"] != 67 || rs.Package != "github.com/replaysafe/replaysafe/internal/harness/bench" {
		t.Errorf("median of three runs: %+v", rs)
	}
	if out.Results[1].Metrics["ns/event"] != 18.36 || out.Results[1].Package != "github.com/replaysafe/replaysafe/fsm" {
		t.Errorf("Exchange: %+v", out.Results[1])
	}
}

func TestPairsRatios(t *testing.T) {
	out := parseSample(t)
	pairs := out.Pairs()
	if len(pairs) != 4 {
		t.Fatalf("%d pairs, want 4", len(pairs))
	}
	p := pairs[0]
	if p.Group != "RoundTrip/h1/GET/c1" || p.Peer != "net-http" {
		t.Fatalf("pair %s vs %s", p.Group, p.Peer)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if r := p.Ratios["ns/op"]; !near(r, 70912.0/75945) {
		t.Errorf("time ratio %v, want peer ÷ replaysafe", r)
	}
	if r := p.Ratios["req/s"]; !near(r, 13324.0/14102) {
		t.Errorf("req/s ratio %v, want replaysafe ÷ peer", r)
	}
	if r := p.Ratios["allocs/op"]; !near(r, 39.0/67) {
		t.Errorf("allocs ratio %v", r)
	}
	if r := pairs[2].Ratios["B/idle-conn"]; !near(r, 16819.0/9251) {
		t.Errorf("memory ratio %v", r)
	}
	if p := pairs[3]; p.Group != "RoundTrip/h3/GET/c1" || p.Peer != "quic-go-http3" || !near(p.Ratios["ns/op"], 269249.0/288349) {
		t.Errorf("HTTP/3 pair %s vs %s: %v", p.Group, p.Peer, p.Ratios)
	}
	// A recovery row whose peer cannot recover has no peer: it is a single.
	if s := out.Singles(); len(s) != 3 || s[0].Name != "Step" || s[2].Name != "Recovery/h3-close-crossing/replaysafe" {
		t.Errorf("singles %v", s)
	}
}

func TestTableAndSVG(t *testing.T) {
	out := parseSample(t)
	var table bytes.Buffer
	if err := out.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RoundTrip/h1/GET/c1", "net-http", "0.93", "B/idle-conn", "1.82", "ns/event",
		"RoundTrip/h3/GET/c1", "quic-go-http3", "Recovery/h3-close-crossing/replaysafe"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var svg bytes.Buffer
	if err := out.WriteSVG(&svg, "title <&>"); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	if !strings.HasPrefix(s, "<svg ") || !strings.HasSuffix(s, "</svg>\n") || !strings.Contains(s, "title &lt;&amp;&gt;") ||
		strings.Count(s, "<rect") != 1+3+3+3+1+3 || !strings.Contains(s, "RoundTrip/h3/GET/c1 vs quic-go-http3") {
		t.Errorf("unexpected SVG:\n%s", s)
	}
}

func TestMainReadsSavedRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := bench.Main([]string{"-in", "testdata/sample.txt", "-json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"Peer": "x-net-http2"`) {
		t.Errorf("JSON output:\n%s", stdout.String())
	}
}

func TestRoundsInterleaveSamples(t *testing.T) {
	for _, tc := range []struct {
		count            int
		interleave       bool
		rounds, perRound int
	}{
		{5, true, 5, 1},  // five runs of the whole suite, one sample each
		{5, false, 1, 5}, // go test -count 5: five samples of a row in a row
		{1, true, 1, 1},
		{1, false, 1, 1},
	} {
		rounds, perRound := bench.Rounds(tc.count, tc.interleave)
		if rounds != tc.rounds || perRound != tc.perRound {
			t.Errorf("Rounds(%d, %v) = %d, %d; want %d, %d", tc.count, tc.interleave, rounds, perRound, tc.rounds, tc.perRound)
		}
		if rounds*perRound != tc.count {
			t.Errorf("Rounds(%d, %v) gives %d samples", tc.count, tc.interleave, rounds*perRound)
		}
	}
}

func TestMemoryLeavesFollowTheFilter(t *testing.T) {
	all := bench.MemoryLeaves(".")
	if len(all) == 0 {
		t.Fatal("no memory benchmark for the filter .")
	}
	perProtocol := 0
	for _, p := range bench.Protocols {
		perProtocol += len(bench.MemoryStates) * len(p.Clients)
	}
	if len(all) != perProtocol {
		t.Errorf("%d leaves for the filter ., want %d", len(all), perProtocol)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"RoundTrip", nil},
		{"Memory/h2/inflight", []string{
			"^BenchmarkMemory$/^h2$/^inflight$/^replaysafe$",
			"^BenchmarkMemory$/^h2$/^inflight$/^x-net-http2$",
		}},
		{"Memory/h1/idle-conn/net-http", []string{"^BenchmarkMemory$/^h1$/^idle-conn$/^net-http$"}},
		{"Memory/(", nil}, // does not compile: nothing
	} {
		got := bench.MemoryLeaves(tc.filter)
		if !slices.Equal(got, tc.want) {
			t.Errorf("MemoryLeaves(%q) = %q, want %q", tc.filter, got, tc.want)
		}
	}
}
