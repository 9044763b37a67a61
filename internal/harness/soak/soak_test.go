package soak

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

const testSeed = 20261203

// tiny runs a short soak and fails the test if it could not run.
func tiny(t *testing.T, cfg Config) Result {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testSeed
	}
	t.Logf("soak %s model=%s n=%d c=%d faults=%.2f conn-life=%d restarts=%v seed=%d peer=%v",
		cfg.Proto, cfg.Model, cfg.N, cfg.Concurrency, cfg.Faults, cfg.ConnLife, cfg.Restarts, cfg.Seed, cfg.Peer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var b bytes.Buffer
	res.Print(&b)
	t.Log("\n" + b.String())
	return res
}

// calls returns the number of calls made and of calls that succeeded.
func calls(r Result) (n, ok int) {
	for _, s := range r.Methods {
		n += s.Calls
		ok += s.OK
	}
	return n, ok
}

// delivered returns the number of request ids received whole at least
// once.
func delivered(r Result) int {
	n := 0
	for copies, ids := range r.Copies {
		if copies > 0 {
			n += ids
		}
	}
	return n
}

// TestSoakSafetyBounds runs a few hundred requests with faults over every
// protocol, under both models (prod with connections living 50 requests
// on average), and asserts the hard bounds: at most two copies of a
// request at the server, no second delivery of a POST, byte-identical
// copies, every attempt trace clean under tracecheck, and the goroutines
// and fds back to where they were after CloseIdleConnections. Dials,
// success rates and "force closed" errors are measured and logged, not
// asserted.
func TestSoakSafetyBounds(t *testing.T) {
	for _, model := range []Model{ModelProd, ModelHarsh} {
		for _, proto := range Protocols {
			t.Run(model.String()+"/"+proto, func(t *testing.T) {
				testSafetyBounds(t, Config{Proto: proto, Model: model, N: 400, Concurrency: 16, Faults: 0.1, ConnLife: 50})
			})
		}
	}
}

// TestSoakRestarts: the prod model's restarts (every 50 ms here) reset
// every connection and refuse the port for 100 ms; the hard bounds hold
// through them. HTTP/3 is left out: a QUIC client whose connection the
// restart closed may wait for its idle timeout (issue 33, item 4).
func TestSoakRestarts(t *testing.T) {
	for _, proto := range []string{"h1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			res := testSafetyBounds(t, Config{Proto: proto, N: 400, Concurrency: 16, Faults: 0.05,
				Restarts: 50 * time.Millisecond, RequestTimeout: 10 * time.Second})
			if res.Restarts == 0 && res.Elapsed > 60*time.Millisecond {
				t.Errorf("no restart in a run of %v with restarts every 50ms", res.Elapsed)
			}
		})
	}
}

// testSafetyBounds runs cfg and asserts the hard bounds.
func testSafetyBounds(t *testing.T, cfg Config) Result {
	t.Helper()
	n := cfg.N
	res := tiny(t, cfg)
	if got, _ := calls(res); got != n {
		t.Fatalf("%d calls made, want %d", got, n)
	}
	if len(res.Injected) == 0 {
		t.Fatalf("no fault injected at rate %.2f over %d requests", cfg.Faults, n)
	}
	if res.MaxCopies > 2 {
		t.Errorf("max copies %d at the server, want ≤ 2", res.MaxCopies)
	}
	if res.DuplicateNonIdempotent != 0 {
		t.Errorf("%d POST requests delivered more than once, want 0", res.DuplicateNonIdempotent)
	}
	if res.Differing != 0 {
		t.Errorf("%d requests whose copies differ, want 0", res.Differing)
	}
	if res.TraceErr != nil {
		t.Errorf("tracecheck: %v", res.TraceErr)
	}
	if res.TracesChecked < n || res.TracesChecked != res.Attempts {
		t.Errorf("tracecheck checked %d traces of %d attempts, want every attempt and ≥ %d", res.TracesChecked, res.Attempts, n)
	}
	if _, ok := calls(res); delivered(res) < ok {
		t.Errorf("%d calls succeeded but the server received only %d requests whole", ok, delivered(res))
	}
	if !res.Settled {
		t.Errorf("after CloseIdleConnections: %v, before: %v; want back to before within the settle wait", res.After, res.Before)
	}
	if res.OpenAfter != 0 {
		t.Errorf("%d connections still open at the server after CloseIdleConnections, want 0", res.OpenAfter)
	}
	if v := res.Violations(); len(v) != 0 {
		t.Errorf("violations %q", v)
	}
	return res
}

// TestSoakFaultFree checks the harness itself: with no fault every call
// succeeds and the server counts exactly one copy of every request.
func TestSoakFaultFree(t *testing.T) {
	for _, proto := range Protocols {
		t.Run(proto, func(t *testing.T) {
			const n = 200
			res := tiny(t, Config{Proto: proto, N: n, Concurrency: 8, ConnLife: -1})
			if _, ok := calls(res); ok != n {
				t.Errorf("%d of %d calls succeeded without faults, errors %v", ok, n, res.Errors)
			}
			if res.Copies[1] != n || len(res.Copies) != 1 {
				t.Errorf("ids by copies %v, want %d×1", res.Copies, n)
			}
			if len(res.Injected) != 0 {
				t.Errorf("faults injected at rate 0: %v", res.Injected)
			}
			if res.Accepted == 0 {
				t.Errorf("the server accepted no connection")
			}
			if res.Dials >= 0 && res.Dials != res.Accepted {
				t.Errorf("client dialed %d, server accepted %d: the counts disagree", res.Dials, res.Accepted)
			}
		})
	}
}

// TestSoakPeer runs the reference clients through the same harness: the
// server sees every request and the peer's dials are counted.
func TestSoakPeer(t *testing.T) {
	for _, proto := range Protocols {
		t.Run(proto, func(t *testing.T) {
			const n = 200
			res := tiny(t, Config{Proto: proto, N: n, Concurrency: 8, ConnLife: -1, Peer: true})
			if res.Client == "replaysafe" || res.Client == "" {
				t.Fatalf("client %q, want the peer", res.Client)
			}
			if _, ok := calls(res); ok != n {
				t.Errorf("%d of %d peer calls succeeded without faults, errors %v", ok, n, res.Errors)
			}
			if res.Copies[1] != n {
				t.Errorf("ids by copies %v, want %d×1", res.Copies, n)
			}
			if res.Dials >= 0 && res.Dials != res.Accepted {
				t.Errorf("peer dialed %d, server accepted %d", res.Dials, res.Accepted)
			}
		})
	}
}

// TestViolations checks which numbers break the hard bounds.
func TestViolations(t *testing.T) {
	ok := Result{MaxCopies: 2, Settled: true}
	if v := ok.Violations(); len(v) != 0 {
		t.Errorf("two copies, nothing else: %v, want none", v)
	}
	leak := Result{MaxCopies: 1}
	if v := leak.Violations(); len(v) != 1 || !strings.Contains(v[0], "resources not back") {
		t.Errorf("resources not back: %q, want that violation", v)
	}
	bad := Result{MaxCopies: 3, DuplicateNonIdempotent: 1, Differing: 1, ForceClosed: 2, Settled: true}
	if v := bad.Violations(); len(v) != 3 || strings.Contains(strings.Join(v, "\n"), "force closed") {
		t.Errorf("violations %q, want copies, duplicate and differing (force closed is x/net's, counted only)", v)
	}
	bad.Config.Peer = true
	if v := bad.Violations(); len(v) != 3 {
		t.Errorf("peer violations %q, want the three copy bounds only", v)
	}
}

// TestRequestMix checks that the request mix is a function of the seed
// and the index, covers every method, and gives bodies to PUT and POST
// only.
func TestRequestMix(t *testing.T) {
	seen := map[string]int{}
	for i := range int64(400) {
		m, b := request(testSeed, i)
		m2, b2 := request(testSeed, i)
		if m != m2 || !bytes.Equal(b, b2) {
			t.Fatalf("request %d differs between two draws", i)
		}
		if (m == http.MethodGet || m == http.MethodDelete) && b != nil {
			t.Fatalf("request %d: %s with a body", i, m)
		}
		seen[m]++
	}
	for _, m := range Methods {
		if seen[m] < 50 {
			t.Errorf("%s drawn %d times in 400, want about 100", m, seen[m])
		}
	}
}

// TestFaultString checks the fault names, valid and invalid.
func TestFaultString(t *testing.T) {
	if s := FaultIdleRST.String(); s != "idle-rst" {
		t.Errorf("FaultIdleRST = %q", s)
	}
	if s := Fault(200).String(); s != "Fault(200)" {
		t.Errorf("Fault(200) = %q", s)
	}
}

// TestMainExitStatus checks that the command exits 2 on bad flags.
func TestMainExitStatus(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"-faults", "2"}, &out, &errb); code != 2 {
		t.Errorf("-faults 2: exit %d, want 2", code)
	}
	if code := Main([]string{"-model", "gentle"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown fault model") {
		t.Errorf("-model gentle: exit %d, stderr %q; want 2 and unknown fault model", code, errb.String())
	}
	if code := Main([]string{"-proto", "h9", "-n", "1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown protocol") {
		t.Errorf("-proto h9: exit %d, stderr %q; want 2 and unknown protocol", code, errb.String())
	}
}

// TestSoakMaxConns checks that -maxconns reaches the Transport: without
// faults over HTTP/1.1, 16 goroutines never hold more than 4 dialed
// connections open at once.
func TestSoakMaxConns(t *testing.T) {
	const n, limit = 200, 4
	res := tiny(t, Config{Proto: "h1", N: n, Concurrency: 16, MaxConns: limit, ConnLife: -1})
	if _, ok := calls(res); ok != n || res.Copies[1] != n {
		t.Errorf("MaxConns %d without faults: %d of %d calls succeeded, ids by copies %v", limit, ok, n, res.Copies)
	}
	if res.ClientPeakOpen < 1 || res.ClientPeakOpen > limit {
		t.Errorf("peak of dialed connections open at the client %d, want 1..%d", res.ClientPeakOpen, limit)
	}
}
