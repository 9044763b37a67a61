package bench_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/harness/bench"
)

// TestEveryClientAgainstItsServer checks the harness the benchmarks run:
// every client, floors included, completes every workload against its
// protocol's server.
func TestEveryClientAgainstItsServer(t *testing.T) {
	for _, p := range bench.Protocols {
		for _, c := range p.RoundTripClients() {
			t.Run(p.Name+"/"+c.Name, func(t *testing.T) {
				srv, err := p.Start(0)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				rt := c.New(bench.Env{TLS: srv.ClientTLS(), MaxIdle: 4})
				defer bench.Release(rt)
				u, err := url.Parse(srv.URL())
				if err != nil {
					t.Fatal(err)
				}
				lat := make([]time.Duration, 20)
				for _, w := range bench.Workloads {
					if err := bench.RoundTrips(rt, u, w, 4, len(lat), lat); err != nil {
						t.Fatalf("%s: %v", w.Name, err)
					}
				}
			})
		}
	}
}

// TestRecoveriesCountCopies checks that every client recovers from every
// scenario and that the server counts the copies the benchmark expects;
// and that a client the scenario lists as failing fails, after exactly
// the copies listed.
func TestRecoveriesCountCopies(t *testing.T) {
	for _, r := range bench.Recoveries {
		p, ok := bench.ProtocolNamed(r.Protocol)
		if !ok {
			t.Fatalf("%s: no protocol %q", r.Name, r.Protocol)
		}
		for _, c := range p.Clients {
			t.Run(r.Name+"/"+c.Name, func(t *testing.T) {
				run, err := bench.StartRecovery(r, c)
				if err != nil {
					t.Fatal(err)
				}
				defer run.Close()
				copies, fails := r.Fails(c.Name)
				if !fails {
					copies = r.Copies
				}
				for range 3 {
					if err := run.Warm(); err != nil {
						t.Fatal(err)
					}
					err := run.Call()
					if !fails && err != nil {
						t.Fatal(err)
					}
					if fails && err == nil {
						t.Fatal("the call recovered; the scenario lists this client as failing")
					}
				}
				if err := run.Check(copies); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestFloorsGatherWhatTheyPrice checks that every protocol's floors do
// the work they price: every request, sent on the dialing connection and
// on kept-alive ones, from one goroutine and from several, is tied by its
// evidence to its place on the wire (its connection's bytes, its stream
// ID); and every request of a deciding floor has its machine see the
// whole exchange and decide to deliver it.
func TestFloorsGatherWhatTheyPrice(t *testing.T) {
	floors := 0
	for _, p := range bench.Protocols {
		for _, c := range p.Floors {
			floors++
			t.Run(p.Name+"/"+c.Name, func(t *testing.T) {
				srv, err := p.Start(0)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				f, ok := c.New(bench.Env{TLS: srv.ClientTLS(), MaxIdle: 4}).(bench.Floor)
				if !ok {
					t.Fatalf("%s is not a bench.Floor", c.Name)
				}
				defer bench.Release(f)
				if f.Decides() != strings.HasSuffix(c.Name, bench.DecisionSuffix) {
					t.Errorf("Decides() = %v for %s", f.Decides(), c.Name)
				}
				u, err := url.Parse(srv.URL())
				if err != nil {
					t.Fatal(err)
				}
				sent, uploads := 0, 0
				for _, conc := range []int{1, 4} {
					for _, w := range bench.Workloads {
						lat := make([]time.Duration, 40)
						if err := bench.RoundTrips(f, u, w, conc, len(lat), lat); err != nil {
							t.Fatalf("%s c%d: %v", w.Name, conc, err)
						}
						sent += len(lat)
						if w.Body > 0 {
							uploads += len(lat)
						}
					}
				}
				if uploads == 0 {
					t.Fatal("no workload has a request body")
				}
				if got := f.Claimed(); got != int64(sent) {
					t.Errorf("%d of %d requests claimed their place on the wire", got, sent)
				}
				want := 0
				if f.Decides() {
					want = sent
				}
				if got := f.Completed(); got != int64(want) {
					t.Errorf("%d machines saw a whole exchange, want %d", got, want)
				}
				if !f.Decides() {
					uploads = 0
				}
				if got := f.Uploads(); got != int64(uploads) {
					t.Errorf("%d uploads seen to their end, want %d", got, uploads)
				}
			})
		}
	}
	if floors != 2*len(bench.Protocols) {
		t.Errorf("%d floors, want an evidence and a decision floor per protocol (%d)", floors, 2*len(bench.Protocols))
	}
}

func TestPercentile(t *testing.T) {
	lat := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if p := bench.Percentile(lat, 50); p != 5 {
		t.Errorf("p50 %v", p)
	}
	if p := bench.Percentile(lat, 99); p != 10 {
		t.Errorf("p99 %v", p)
	}
}

// TestMemoryMeasurements runs each memory measurement once, small.
func TestMemoryMeasurements(t *testing.T) {
	for _, p := range bench.Protocols {
		share, err := bench.ServerPerConn(p, 4)
		if err != nil {
			t.Fatalf("%s: server share: %v", p.Name, err)
		}
		for _, c := range p.Clients {
			if _, n, err := bench.IdleConn(p, c, 4, share); err != nil || n == 0 {
				t.Errorf("%s/%s: idle: %d conns, %v", p.Name, c.Name, n, err)
			}
			if _, err := bench.InFlight(p, c, 4, bench.Workloads[1]); err != nil {
				t.Errorf("%s/%s: in flight: %v", p.Name, c.Name, err)
			}
		}
	}
}
