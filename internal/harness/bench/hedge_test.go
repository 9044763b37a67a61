package bench_test

// The hedging benchmark (issue 36): tail latency against a server whose
// responses stall one time in twenty, with and without Retry.Hedge,
// beside failsafe-go's Hedge policy over net/http. failsafe-go is a peer
// here only: this _test file is the one place the module imports it, so
// it is in no library package's import graph (TestNoPeerInLibraryGraph
// at the module root checks the library's).

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/replaysafe/replaysafe"
)

const (
	// hedgeStallShare is the share of requests the server stalls.
	hedgeStallShare = 0.05
	// hedgeStall is how long a stalled request waits before its answer
	// (or until the client gives up on it).
	hedgeStall = 50 * time.Millisecond
	// hedgeAfter is the hedge delay of both hedging clients.
	hedgeAfter = 5 * time.Millisecond
	// hedgeSeed seeds which arrivals stall: the same sequence for every
	// client.
	hedgeSeed = 36
)

// stallServer answers GET / with "ok" on 127.0.0.1, stalling each
// arriving request with probability hedgeStallShare, drawn from a PCG
// seeded with hedgeSeed; it counts the requests it received.
type stallServer struct {
	*httptest.Server
	mu       sync.Mutex
	rnd      *rand.Rand
	received atomic.Int64
}

func newStallServer() *stallServer {
	s := &stallServer{rnd: rand.New(rand.NewPCG(hedgeSeed, hedgeSeed))}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.received.Add(1)
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		stall := s.rnd.Float64() < hedgeStallShare
		s.mu.Unlock()
		if stall {
			t := time.NewTimer(hedgeStall)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Write([]byte("ok"))
	}))
	s.Listener.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s.Listener = ln
	s.Start()
	return s
}

// hedgeClient is one client of the benchmark.
type hedgeClient struct {
	name string
	new  func() (http.RoundTripper, func())
}

var hedgeClients = []hedgeClient{
	{"replaysafe", func() (http.RoundTripper, func()) {
		tr := replaysafe.New(replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 2}})
		return tr, tr.CloseIdleConnections
	}},
	{"replaysafe-hedge", func() (http.RoundTripper, func()) {
		tr := replaysafe.New(replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 2, Hedge: hedgeAfter, MaxHedges: 1}})
		return tr, tr.CloseIdleConnections
	}},
	{"net-http", func() (http.RoundTripper, func()) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		return tr, tr.CloseIdleConnections
	}},
	{"failsafe-hedge", func() (http.RoundTripper, func()) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		hp := hedgepolicy.NewBuilderWithDelay[*http.Response](hedgeAfter).WithMaxHedges(1).Build()
		return failsafehttp.NewRoundTripper(tr, hp), tr.CloseIdleConnections
	}},
}

// BenchmarkHedgeTail measures one call's latency, sequential calls of
// GET / against a stallServer: p50-ms and p99-ms over the b.N calls,
// and copies/call, the requests the server received per call. Run with
// a fixed count of calls so that every client sees the same stalls:
//
//	go test ./internal/harness/bench/ -run '^$' -bench HedgeTail -benchtime 2000x
func BenchmarkHedgeTail(b *testing.B) {
	for _, c := range hedgeClients {
		b.Run(c.name, func(b *testing.B) {
			srv := newStallServer()
			defer srv.Close()
			rt, closeIdle := c.new()
			defer closeIdle()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/", nil)
				if err != nil {
					b.Fatal(err)
				}
				began := time.Now()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(began))
				if err != nil || string(body) != "ok" {
					b.Fatalf("%q %v", body, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(q float64) float64 {
				return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			b.ReportMetric(float64(srv.received.Load())/float64(b.N), "copies/call")
			b.ReportMetric(0, "ns/op")
			b.Logf("seed %d: %d calls, %d requests received", hedgeSeed, b.N, srv.received.Load())
		})
	}
}
