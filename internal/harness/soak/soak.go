// Package soak runs many concurrent requests through one Transport
// against an in-process faulty server on 127.0.0.1 and measures what the
// connection layer does under faults: copies of every request at the
// server, duplicate deliveries of non-idempotent requests, success per
// method, error classes by rule, dials, idle connections left, and the
// goroutines, file descriptors and heap before, during and after.
//
// The server (HTTP/1.1 over TCP or TLS and h2/h2c through net/http and
// golang.org/x/net/http2, HTTP/3 through quic-go/http3) injects, at a
// given rate drawn from a seeded random source, the faults of Fault: idle
// FIN and RST of kept-alive connections, closes and resets before the
// response, in the middle of the request body or of the response, stream
// resets and delays.
//
// A soak measures; it does not hide. Run returns every number, and
// Result.Violations names the bounds that are hard guarantees of
// replaysafe (at most two copies of a request, no second delivery of a
// non-idempotent request, copies byte-identical, every attempt trace
// replaying through package tracecheck).
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaysafe/replaysafe"
)

// Protocols are the protocols a soak runs over.
var Protocols = []string{"h1", "h1tls", "h2", "h2c", "h3"}

// Methods is the method mix, one request in four each.
var Methods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete}

// Config is one soak run.
type Config struct {
	// Proto is h1, h1tls, h2, h2c or h3.
	Proto string
	// N is the number of requests.
	N int
	// Concurrency is the number of goroutines sharing the Transport.
	Concurrency int
	// Faults is the probability that the server injects a fault into a
	// request, from 0 to 1.
	Faults float64
	// Seed seeds the server's fault draws and the request mix.
	Seed uint64
	// MaxConns, if positive, is the Transport's MaxConnsPerHost.
	MaxConns int
	// Retry, if above zero, is the replaysafe Transport's
	// Options.Retry.MaxAttempts (configured retries, default statuses,
	// backoff and budget); the copies may then reach it.
	Retry int
	// Peer runs the soak with the reference client instead of replaysafe:
	// net/http's Transport for h1 and h1tls, x/net's http2.Transport for h2
	// and h2c, quic-go's http3.Transport for h3.
	Peer bool
	// RequestTimeout bounds each call; zero means 30s.
	RequestTimeout time.Duration
	// SettleTimeout bounds the wait, after CloseIdleConnections, for the
	// goroutines and file descriptors to come back to where they were
	// before the run; zero means 5s.
	SettleTimeout time.Duration
	// Progress, if set, receives a progress line at most once a second.
	Progress io.Writer
}

// MethodStats counts the calls of one method.
type MethodStats struct {
	// Calls is the number of calls made.
	Calls int
	// OK is the number of calls that returned 200 with the expected body.
	OK int
	// Cut is the number of failed calls whose response the server cut
	// after it started (FaultCloseMidResponse): no transport recovers
	// those by itself.
	Cut int
}

// Rate returns OK/Calls, or 1 with no call.
func (m MethodStats) Rate() float64 {
	if m.Calls == 0 {
		return 1
	}
	return float64(m.OK) / float64(m.Calls)
}

// Resources is a sample of the process's resources.
type Resources struct {
	// Goroutines is runtime.NumGoroutine.
	Goroutines int
	// FDs is the number of open file descriptors (/proc/self/fd), or -1
	// when it cannot be read (also when the process is out of them). The
	// server runs in the same process: a TCP connection counts twice.
	FDs int
	// Heap is the bytes of allocated heap objects.
	Heap uint64
}

func (r Resources) String() string {
	fds := strconv.Itoa(r.FDs)
	if r.FDs < 0 {
		fds = "n/a (cannot read /proc/self/fd: out of fds?)"
	}
	return fmt.Sprintf("goroutines %d, fds %s, heap %s", r.Goroutines, fds, mib(r.Heap))
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Result is what one soak measured.
type Result struct {
	// Config is the run's configuration.
	Config Config
	// Client names the client: replaysafe or the peer.
	Client string
	// Elapsed is the wall time of the requests.
	Elapsed time.Duration

	// MaxCopies is the largest number of whole copies the server received
	// of one request.
	MaxCopies int
	// Copies counts request ids by the number of whole copies received.
	Copies map[int]int
	// DuplicateNonIdempotent is the number of non-idempotent (POST)
	// requests received whole more than once.
	DuplicateNonIdempotent int
	// Differing is the number of requests whose copies were not
	// byte-identical.
	Differing int
	// Partial is the number of copies cut in the request body.
	Partial int

	// Methods counts calls and successes per method.
	Methods map[string]*MethodStats
	// Errors counts failed calls by class: the rule ID and name of a
	// *replaysafe.Error, or a short description of another error.
	Errors map[string]int
	// ForceClosed is the number of failures mentioning "force closed".
	ForceClosed int
	// Attempts is the number of wire attempts the Observer reported
	// (replaysafe only).
	Attempts int

	// Dials is the number of connections the client dialed, or -1 when
	// the client dials none through a hook (QUIC).
	Dials int
	// Accepted is the number of connections the server accepted.
	Accepted int
	// AcceptErrors is the number of failed accepts at the server, such
	// as "too many open files" (EMFILE); the server backs off and goes on.
	AcceptErrors int
	// Injected counts the faults the server drew, by kind.
	Injected map[Fault]int
	// ConnFaults is the number of injected faults that end a connection.
	ConnFaults int
	// BusyIdleCloses is the number of idle closes that fired while the
	// connection still carried requests (HTTP/2, HTTP/3 after 50 ms).
	BusyIdleCloses int
	// IdleAtEnd is the number of idle pooled connections when the last
	// call returned (replaysafe only; -1 for the peer).
	IdleAtEnd int
	// OpenAtEnd is the number of connections open at the server when the
	// last call returned, and OpenAfter after CloseIdleConnections and
	// the settle wait.
	OpenAtEnd, OpenAfter int
	// PeakOpen is the most connections open at the server at once. It
	// may exceed the client's count by connections the client closed that
	// the server has not yet seen close.
	PeakOpen int
	// ClientPeakOpen is the most dialed connections open at once at the
	// client, or -1 when the client dials none through a hook (QUIC).
	ClientPeakOpen int

	// Before is sampled with the server up, before the client exists;
	// Peak is the largest of every sample during the run (its heap
	// includes tracecheck's table of the calls it checked, up to 65536
	// requests with their bodies); End when the last call returned and
	// tracecheck is released; After after CloseIdleConnections and the
	// settle wait, after a collection, its heap read again once the
	// server's record of every request id (its ledger, about 150 bytes a
	// request) has been tallied and released, so that After.Heap is what
	// the client still holds beside an empty server, as Before's is.
	Before, Peak, End, After Resources
	// Settled reports whether the goroutines and fds came back to Before
	// within the settle wait.
	Settled bool

	// TracesChecked is the number of attempt traces tracecheck replayed
	// (replaysafe only), and TraceErr its verdict.
	TracesChecked int
	// TraceErr is tracecheck's error, nil when every trace checked out.
	TraceErr error
}

// ReqPerSec returns the throughput.
func (r *Result) ReqPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Config.N) / r.Elapsed.Seconds()
}

// IdempotentRate returns the success rate of the idempotent methods.
func (r *Result) IdempotentRate() float64 {
	var calls, ok int
	for m, s := range r.Methods {
		if m != http.MethodPost {
			calls += s.Calls
			ok += s.OK
		}
	}
	if calls == 0 {
		return 1
	}
	return float64(ok) / float64(calls)
}

// RecoverableIdempotentRate returns the success rate of the idempotent
// methods over the calls whose response the server did not cut after it
// started: the calls a transport could have carried through.
func (r *Result) RecoverableIdempotentRate() float64 {
	var calls, ok int
	for m, s := range r.Methods {
		if m != http.MethodPost {
			calls += s.Calls - s.Cut
			ok += s.OK
		}
	}
	if calls == 0 {
		return 1
	}
	return float64(ok) / float64(calls)
}

// Violations returns the hard bounds the run broke: more than two copies
// of a request, a non-idempotent request delivered twice, copies that
// differ, a tracecheck failure. Empty means none. For a peer run only the
// copy counts are judged.
//
// "force closed" errors are counted and printed, not judged: the pool
// closes an HTTP/2 connection gracefully while x/net still runs a stream
// on it, so none of them comes from replaysafe; x/net closes a connection
// itself once a write on it failed (cleanupWriteRequest), which fails
// every other stream on it with that text, with its own Transport as
// well.
func (r *Result) Violations() []string {
	var v []string
	if bound := max(2, r.Config.Retry); r.MaxCopies > bound {
		v = append(v, fmt.Sprintf("max copies %d > %d", r.MaxCopies, bound))
	}
	if r.DuplicateNonIdempotent > 0 {
		v = append(v, fmt.Sprintf("%d non-idempotent requests delivered more than once", r.DuplicateNonIdempotent))
	}
	if r.Differing > 0 {
		v = append(v, fmt.Sprintf("%d requests whose copies differ", r.Differing))
	}
	if r.Config.Peer {
		return v
	}
	if r.TraceErr != nil {
		v = append(v, r.TraceErr.Error())
	}
	return v
}

// Target is one goal of the connection layer that a soak measures but
// does not enforce: the numbers replaysafe aims at under faults.
type Target struct {
	// Name states the goal with the measured numbers.
	Name string
	// Met reports whether the run met it.
	Met bool
}

// Targets returns the goals measured by one run: idempotent success of
// at least 99.5%, idle connections at the end within the idle cap, and
// over HTTP/2, h2c and HTTP/3 at most one dial per connection-ending
// fault plus 8. The comparisons that need a second run (throughput
// against a fault-free run, HTTP/1.1 dials against net/http's) are
// printed by the soak command.
func (r *Result) Targets() []Target {
	rate := r.IdempotentRate()
	rec := r.RecoverableIdempotentRate()
	ts := []Target{
		{fmt.Sprintf("idempotent success %.2f%% ≥ 99.5%%", 100*rate), rate >= 0.995},
		{fmt.Sprintf("idempotent success %.2f%% ≥ 99.5%% without the calls whose response the server cut after it started", 100*rec), rec >= 0.995},
		{fmt.Sprintf("idle connections at end %d ≤ idle cap %d", r.IdleAtEnd, replaysafe.DefaultMaxIdleConnsPerHost),
			r.IdleAtEnd <= replaysafe.DefaultMaxIdleConnsPerHost},
	}
	switch r.Config.Proto {
	case "h2", "h2c", "h3":
		conns := r.Accepted
		ts = append(ts, Target{fmt.Sprintf("connections %d ≤ connection faults %d + 8", conns, r.ConnFaults), conns <= r.ConnFaults+8})
	}
	if r.Config.MaxConns > 0 {
		peak, where := r.ClientPeakOpen, "at the client"
		if peak < 0 {
			peak, where = r.PeakOpen, "at the server"
		}
		ts = append(ts, Target{fmt.Sprintf("peak connections open %s %d ≤ MaxConnsPerHost %d", where, peak, r.Config.MaxConns),
			peak <= r.Config.MaxConns})
	}
	ts = append(ts, Target{fmt.Sprintf("goroutines and fds back to before after CloseIdleConnections (%d/%d → %d/%d)",
		r.Before.Goroutines, r.Before.FDs, r.After.Goroutines, r.After.FDs), r.Settled})
	return ts
}

// Run runs one soak: it starts the faulty server, sends cfg.N requests
// from cfg.Concurrency goroutines through one client, closes the client's
// idle connections, waits for the resources to settle and stops the
// server. An error means the soak could not run, not that a bound broke
// (see Result.Violations).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.N <= 0 {
		return Result{}, errors.New("soak: N must be positive")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 5 * time.Second
	}
	srv, err := startServer(cfg.Proto, cfg.Faults, cfg.Seed)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Config:    cfg,
		Copies:    map[int]int{},
		Methods:   map[string]*MethodStats{},
		Errors:    map[string]int{},
		Injected:  map[Fault]int{},
		IdleAtEnd: -1,
	}
	for _, m := range Methods {
		res.Methods[m] = &MethodStats{}
	}
	res.Before = sample(true)
	cl, err := newClient(cfg, srv)
	if err != nil {
		srv.Close()
		return Result{}, err
	}
	res.Client = cl.name

	var (
		next, done, okCount atomic.Int64
		mu                  sync.Mutex
		peakMu              sync.Mutex
		peak                = res.Before
	)
	observe := func() Resources {
		r := sample(false)
		peakMu.Lock()
		peak.Goroutines = max(peak.Goroutines, r.Goroutines)
		peak.FDs = max(peak.FDs, r.FDs)
		peak.Heap = max(peak.Heap, r.Heap)
		peakMu.Unlock()
		return r
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				r := observe()
				if cfg.Progress != nil {
					d, ok := done.Load(), okCount.Load()
					el := time.Since(start).Seconds()
					fmt.Fprintf(cfg.Progress, "soak %s %s: %d/%d done, %.0f req/s, ok %.2f%%, server conns accepted %d open %d, %s\n",
						cfg.Proto, cl.name, d, cfg.N, float64(d)/el, 100*float64(ok)/float64(max(d, 1)),
						srv.accepted.Load(), srv.openConns(), r)
				}
			}
		}
	}()

	base := srv.URL()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(cfg.N) {
					return
				}
				method, ok, class, force := call(ctx, cl.rt, base, cfg, i)
				cut := !ok && srv.wasCut(strconv.FormatInt(i, 10))
				mu.Lock()
				res.Methods[method].Calls++
				if cut {
					res.Methods[method].Cut++
				}
				if ok {
					res.Methods[method].OK++
				} else {
					res.Errors[class]++
					if force {
						res.ForceClosed++
					}
				}
				mu.Unlock()
				if ok {
					okCount.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	close(stopProgress)
	<-progressDone
	// Every body is closed: every attempt is reported. Take tracecheck's
	// verdict and release the requests it remembers before measuring.
	res.TracesChecked, res.Attempts, res.TraceErr = cl.traces()
	cl.dropChecker()
	res.End = observe()
	res.IdleAtEnd = cl.idle()
	res.OpenAtEnd = srv.openConns()
	res.Peak = peak

	cl.closeIdle()
	deadline := time.Now().Add(cfg.SettleTimeout)
	for {
		res.After = sample(true)
		if res.After.Goroutines <= res.Before.Goroutines && res.After.FDs <= res.Before.FDs {
			res.Settled = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
		cl.closeIdle()
	}
	res.OpenAfter = srv.openConns()
	res.PeakOpen = srv.peak()
	res.Dials = cl.dials()
	res.ClientPeakOpen = cl.peakOpen()
	cl.close()

	res.Accepted = int(srv.accepted.Load())
	res.AcceptErrors = int(srv.acceptErrs.Load())
	for f := range faultCount {
		if n := int(srv.injected[f].Load()); n > 0 && f != FaultNone {
			res.Injected[f] = n
			if f.endsConn(cfg.Proto) {
				res.ConnFaults += n
			}
		}
	}
	res.BusyIdleCloses = int(srv.busyIdle.Load())
	for _, d := range srv.deliveries() {
		res.Copies[d.copies]++
		res.MaxCopies = max(res.MaxCopies, d.copies)
		if d.copies > 1 && d.method == http.MethodPost {
			res.DuplicateNonIdempotent++
		}
		if d.differ {
			res.Differing++
		}
		res.Partial += d.partial
	}
	if err := srv.Close(); err != nil {
		return res, err
	}
	srv.forget()
	res.After.Heap = sample(true).Heap
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("soak: interrupted after %d of %d requests: %w", done.Load(), cfg.N, err)
	}
	return res, nil
}

// sample reads the process's resources, after two collections when gc
// (the second empties the sync.Pool victim caches the first left).
func sample(gc bool) Resources {
	if gc {
		runtime.GC()
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return Resources{Goroutines: runtime.NumGoroutine(), FDs: fds, Heap: ms.HeapAlloc}
}

// Print writes the result as the soak command shows it.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "soak %s, client %s: %d requests, %d goroutines, faults %.3f, seed %d, maxconns %d\n",
		c.Proto, r.Client, c.N, c.Concurrency, c.Faults, c.Seed, c.MaxConns)
	fmt.Fprintf(w, "  elapsed %v, %.0f req/s\n", r.Elapsed.Round(time.Millisecond), r.ReqPerSec())
	fmt.Fprintf(w, "  max copies %d (ids by copies:%s), duplicate non-idempotent deliveries %d, differing copies %d, cut uploads %d\n",
		r.MaxCopies, histogram(r.Copies), r.DuplicateNonIdempotent, r.Differing, r.Partial)
	fmt.Fprintf(w, "  success:")
	for _, m := range Methods {
		s := r.Methods[m]
		fmt.Fprintf(w, " %s %.2f%% (%d/%d)", m, 100*s.Rate(), s.OK, s.Calls)
	}
	fmt.Fprintf(w, "; idempotent %.2f%%, %.2f%% without the calls whose response the server cut after it started\n",
		100*r.IdempotentRate(), 100*r.RecoverableIdempotentRate())
	if len(r.Errors) == 0 {
		fmt.Fprintf(w, "  errors: none\n")
	} else {
		fmt.Fprintf(w, "  errors:\n")
		for _, k := range sortedKeys(r.Errors) {
			fmt.Fprintf(w, "    %6d  %s\n", r.Errors[k], k)
		}
	}
	fmt.Fprintf(w, "  force closed %d\n", r.ForceClosed)
	var inj []string
	for f := FaultNone + 1; f < faultCount; f++ {
		if n := r.Injected[f]; n > 0 {
			inj = append(inj, fmt.Sprintf("%s %d", f, n))
		}
	}
	fmt.Fprintf(w, "  injected: %s (connection-ending %d; idle closes that found the connection busy %d)\n",
		orNone(strings.Join(inj, ", ")), r.ConnFaults, r.BusyIdleCloses)
	dials := strconv.Itoa(r.Dials)
	if r.Dials < 0 {
		dials = "n/a (QUIC)"
	}
	fmt.Fprintf(w, "  dials %s, server accepted %d (multiplexed bound: connection faults + 8 = %d), failed accepts (too many open files) %d\n",
		dials, r.Accepted, r.ConnFaults+8, r.AcceptErrors)
	idle := strconv.Itoa(r.IdleAtEnd)
	if r.IdleAtEnd < 0 {
		idle = "n/a"
	}
	clientPeak := strconv.Itoa(r.ClientPeakOpen)
	if r.ClientPeakOpen < 0 {
		clientPeak = "n/a"
	}
	fmt.Fprintf(w, "  idle connections at end %s; peak open at the client %s; open at the server: peak %d, at end %d, after CloseIdleConnections %d\n",
		idle, clientPeak, r.PeakOpen, r.OpenAtEnd, r.OpenAfter)
	fmt.Fprintf(w, "  before: %s\n  peak:   %s\n  end:    %s\n  after:  %s (back to before: %v)\n",
		r.Before, r.Peak, r.End, r.After, r.Settled)
	if !c.Peer {
		verdict := "clean"
		if r.TraceErr != nil {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "  tracecheck: %d attempt traces checked (%d calls), %s\n", r.TracesChecked, c.N, verdict)
	}
	if !c.Peer {
		fmt.Fprintf(w, "  targets (measured, not enforced):\n")
		for _, t := range r.Targets() {
			mark := "met"
			if !t.Met {
				mark = "NOT met"
			}
			fmt.Fprintf(w, "    %-7s %s\n", mark, t.Name)
		}
	}
	if v := r.Violations(); len(v) > 0 && c.Peer {
		fmt.Fprintf(w, "  beyond replaysafe's bounds (the peer is not judged):\n")
		for _, s := range v {
			fmt.Fprintf(w, "    %s\n", s)
		}
	} else if len(v) > 0 {
		fmt.Fprintf(w, "  BOUNDS BROKEN:\n")
		for _, s := range v {
			fmt.Fprintf(w, "    %s\n", s)
		}
	} else {
		fmt.Fprintf(w, "  bounds: held\n")
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func histogram(m map[int]int) string {
	var b strings.Builder
	for k := 0; k <= 8; k++ {
		if n := m[k]; n > 0 {
			fmt.Fprintf(&b, " %d×%d", n, k)
		}
	}
	for k, n := range m {
		if k > 8 {
			fmt.Fprintf(&b, " %d×%d", n, k)
		}
	}
	return b.String()
}
