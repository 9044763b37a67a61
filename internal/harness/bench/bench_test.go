package bench_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replaysafe/replaysafe/internal/harness/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// BenchmarkRoundTrip measures keep-alive round trips over loopback:
// protocol / workload / concurrency / client. ns/op is wall time per
// request (all callers together); p50-ns and p99-ns are one call's
// latency; req/s is the throughput.
func BenchmarkRoundTrip(b *testing.B) {
	for _, p := range bench.Protocols {
		for _, w := range bench.Workloads {
			for _, conc := range bench.Concurrencies {
				for _, c := range p.RoundTripClients() {
					b.Run(fmt.Sprintf("%s/%s/c%d/%s", p.Name, w.Name, conc, c.Name), func(b *testing.B) {
						benchRoundTrip(b, p, w, conc, c)
					})
				}
			}
		}
	}
}

func benchRoundTrip(b *testing.B, p bench.Protocol, w bench.Workload, conc int, c bench.Client) {
	srv, err := p.Start(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	rt := c.New(bench.Env{TLS: srv.ClientTLS(), MaxIdle: conc})
	defer bench.Release(rt)
	u, err := url.Parse(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	// Open the connections before the clock starts.
	lat := make([]time.Duration, max(b.N, 4*conc))
	if err := bench.RoundTrips(rt, u, w, conc, 4*conc, lat); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	err = bench.RoundTrips(rt, u, w, conc, b.N, lat)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat[:b.N])
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(bench.Percentile(lat, 50)), "p50-ns")
	b.ReportMetric(float64(bench.Percentile(lat, 99)), "p99-ns")
}

// BenchmarkRecovery measures a call whose first attempt meets a stale
// connection: scenario / client. Each call is preceded, off the clock, by
// a warm-up request on a new connection; the server must count the
// scenario's copies per call. A client that cannot recover from a
// scenario (Recovery.Failing) is not measured in it.
func BenchmarkRecovery(b *testing.B) {
	for _, r := range bench.Recoveries {
		p, ok := bench.ProtocolNamed(r.Protocol)
		if !ok {
			b.Fatalf("recovery %s: no protocol %q", r.Name, r.Protocol)
		}
		for _, c := range p.Clients {
			if _, fails := r.Fails(c.Name); fails {
				continue
			}
			b.Run(r.Name+"/"+c.Name, func(b *testing.B) { benchRecovery(b, r, c) })
		}
	}
}

func benchRecovery(b *testing.B, r bench.Recovery, c bench.Client) {
	run, err := bench.StartRecovery(r, c)
	if err != nil {
		b.Fatal(err)
	}
	defer run.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := run.Warm(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		err := run.Call()
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := run.Check(r.Copies); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat)
}

// memoryUnits is how many connections or requests a memory measurement
// spreads over.
const memoryUnits = 64

// BenchmarkMemory measures what a client holds per idle pooled
// connection (the server's share subtracted) and per request in flight
// (beyond its connection): protocol / state / client. B/idle-conn and
// B/inflight-req are live heap bytes (the median over the iterations), goroutines/... the goroutines the
// client keeps (each with a stack of 8 KiB or more). ns/op is the time
// one measurement takes, not a result.
func BenchmarkMemory(b *testing.B) {
	for _, p := range bench.Protocols {
		var (
			share    bench.Held
			measured bool
		)
		b.Run(p.Name+"/idle-conn", func(b *testing.B) {
			for _, c := range p.Clients {
				b.Run(c.Name, func(b *testing.B) {
					if !measured {
						// Twice, the second kept: the first also pays for
						// what the process sets up on first use (the
						// stack's tables and buffer pools), which no
						// client's reading after it pays again.
						for range 2 {
							s, err := bench.ServerPerConn(p, memoryUnits)
							if err != nil {
								b.Fatal(err)
							}
							share = s
						}
						measured = true
					}
					var all []bench.Held
					for range b.N {
						v, _, err := bench.IdleConn(p, c, memoryUnits, share)
						if err != nil {
							b.Fatal(err)
						}
						all = append(all, v)
					}
					m := bench.MedianHeld(all)
					b.ReportMetric(m.Heap, "B/idle-conn")
					b.ReportMetric(m.Goroutines, "goroutines/idle-conn")
				})
			}
		})
		b.Run(p.Name+"/inflight", func(b *testing.B) {
			for _, c := range p.Clients {
				b.Run(c.Name, func(b *testing.B) {
					var all []bench.Held
					for range b.N {
						v, err := bench.InFlight(p, c, memoryUnits, bench.Workloads[0])
						if err != nil {
							b.Fatal(err)
						}
						all = append(all, v)
					}
					m := bench.MedianHeld(all)
					b.ReportMetric(m.Heap, "B/inflight-req")
					b.ReportMetric(m.Goroutines, "goroutines/inflight-req")
				})
			}
		})
	}
}
