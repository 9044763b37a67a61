package main

import (
	"slices"
	"strings"
	"testing"
)

func TestPairedRatiosMatchRounds(t *testing.T) {
	rs := []float64{100, 200, 50}
	peer := []float64{90, 220, 50}
	if got, want := pairedRatios(rs, peer, false), []float64{0.9, 1.1, 1}; !slices.Equal(got, want) {
		t.Errorf("costs: %v, want %v", got, want)
	}
	if got, want := pairedRatios(rs, peer, true), []float64{100.0 / 90, 200.0 / 220, 1}; !slices.Equal(got, want) {
		t.Errorf("req/s: %v, want %v", got, want)
	}
}

func TestPairedReadsRoundsInOrder(t *testing.T) {
	const run = `BenchmarkRoundTrip/h1/GET/c1/replaysafe-2 100 100 ns/op
BenchmarkRoundTrip/h1/GET/c1/net-http-2 100 50 ns/op
BenchmarkRoundTrip/h1/GET/c1/replaysafe-2 100 200 ns/op
BenchmarkRoundTrip/h1/GET/c1/net-http-2 100 300 ns/op
BenchmarkRoundTrip/h1/GET/c1/replaysafe-2 100 100 ns/op
BenchmarkRoundTrip/h1/GET/c1/net-http-2 100 100 ns/op
`
	samples, names, err := read(strings.NewReader(run), "run")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	write(&b, samples, names) // the medians first, as main does: they must not reorder the rounds
	b.Reset()
	writePaired(&b, samples, names)
	out := b.String()
	// Rounds 0.50, 1.50, 1.00, printed in that order: median 1.00,
	// although the medians of the two rows (100 and 100) agree by chance.
	for _, want := range []string{"RoundTrip/h1/GET/c1", "net-http", "ns/op", "1.00 [", "0.50 1.50 1.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("paired table lacks %q:\n%s", want, out)
		}
	}
}
