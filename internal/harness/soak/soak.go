// Package soak runs many concurrent requests through one Transport
// against an in-process faulty server on 127.0.0.1 and measures what the
// connection layer does under faults: copies of every request at the
// server, duplicate deliveries of non-idempotent requests, success per
// method, error classes by rule, dials, idle connections left, and the
// goroutines, file descriptors and heap before, during and after.
//
// The server (HTTP/1.1 over TCP or TLS and h2/h2c through net/http and
// golang.org/x/net/http2, HTTP/3 through quic-go/http3) injects the
// faults of a Model, every draw from the seed. ModelProd, the default,
// makes the faults of production: stream-level faults per request
// (resets with INTERNAL_ERROR or CANCEL, refused streams, responses cut
// after half their body, delays, 503 with Retry-After, 425), an end per
// connection after a drawn number of requests (half graceful, half
// abrupt) and periodic server restarts. ModelHarsh stresses the hard
// bounds: most of its faults kill the whole connection.
//
// A soak measures; it does not hide. The server records, per request id
// and copy, whether a response byte left it before the copy died; each
// failed call is judged against that record (Outcome), so the success
// rate counts the calls a rule-abiding client could have carried through
// and prints the rest apart. Run returns every number, and
// Result.Violations names the bounds that are hard guarantees of
// replaysafe (at most two copies of a request, no second delivery of a
// non-idempotent request, copies byte-identical, every attempt trace
// replaying through package tracecheck, resources back after
// CloseIdleConnections).
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
	// Model is the fault model; the zero value is ModelProd.
	Model Model
	// Faults is the probability that the server injects a fault into a
	// request (a copy, under ModelProd), from 0 to 1.
	Faults float64
	// ConnLife is the prod model's mean connection life in requests;
	// zero means DefaultConnLife, negative that connections never end.
	ConnLife int
	// Restarts is the period of the prod model's server restarts; zero
	// means none.
	Restarts time.Duration
	// Seed seeds the server's fault draws and the request mix.
	Seed uint64
	// MaxConns, if positive, is the Transport's MaxConnsPerHost.
	MaxConns int
	// Retry, if above zero, is the replaysafe Transport's
	// Options.Retry.MaxAttempts (configured retries, default statuses,
	// backoff and budget); the copies may then reach it.
	Retry int
	// RetryAfterMax, if above zero, is that policy's MaxRetryAfter: a
	// 503 whose Retry-After asks for longer (the prod model's asks for
	// RetryAfterAsked) is delivered instead of waited for, and then set
	// apart as the server's answer, as without a policy.
	RetryAfterMax time.Duration
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

// Outcome is how one call ended, for the accounting.
type Outcome uint8

// Outcomes, in the order they are judged.
const (
	// OutcomeOK: 200 with the digest of the body sent. The zero value.
	OutcomeOK Outcome = iota
	// OutcomeCut: the call failed after a response byte of one of its
	// copies left the server (by any cause, a neighbour's fault
	// included): no rule-abiding client resends it.
	OutcomeCut
	// OutcomeRefused: the call failed by a rule that judges the request
	// or its connection rather than the copy count (RS05 canceled, RS06
	// timeout, RS17 ambiguous on a fresh connection, RS19 body not
	// reproducible). The peer's errors carry no rule: its timeouts and
	// cancellations count here, and its failures of a copy that arrived
	// on a connection that had completed no response yet (RS17 as the
	// server saw it).
	OutcomeRefused
	// OutcomeRetryAfter: the server's 503 with Retry-After was delivered
	// whole, as the server answered: a retry policy's business, so set
	// apart when the run has none (-retry 0) or its policy does not wait
	// as long as the 503 asks (Config.RetryAfterMax).
	OutcomeRetryAfter
	// OutcomeFailed: any other failure: a call a rule-abiding client
	// could have carried through.
	OutcomeFailed

	outcomeCount // number of outcomes; keep last
)

var outcomeNames = [outcomeCount]string{"ok", "cut after the response started",
	"refused by a rule on the request or its connection", "503 delivered", "failed"}

// String returns the outcome's name.
func (o Outcome) String() string {
	if o < outcomeCount {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// RetryAfterAsked is the wait the prod model's 503 asks for
// (Retry-After: 1).
const RetryAfterAsked = time.Second

// waits503 reports whether the replaysafe client of cfg retries a 503 of
// the prod model after its Retry-After: with a retry policy
// (cfg.Retry) whose MaxRetryAfter is at least RetryAfterAsked.
func (cfg Config) waits503() bool {
	return !cfg.Peer && cfg.Retry > 0 && (cfg.RetryAfterMax <= 0 || cfg.RetryAfterMax >= RetryAfterAsked)
}

// refusingRules are the rules that judge the request or its connection
// rather than the copy count.
var refusingRules = map[string]bool{"RS05": true, "RS06": true, "RS17": true, "RS19": true}

// judge returns the outcome of call c given the server's record of its
// copies; peer is set for the reference client, whose errors carry no
// rule; waits503 is set when the client retries a 503 after its
// Retry-After (Config.waits503).
func judge(c callResult, copies []copyRecord, peer bool, waits503 bool) Outcome {
	if c.ok {
		return OutcomeOK
	}
	if c.status == http.StatusServiceUnavailable && !waits503 {
		return OutcomeRetryAfter
	}
	if c.status != 0 {
		return OutcomeFailed // a whole response of another status: a 425 left unretried
	}
	for _, cp := range copies {
		if cp.started {
			return OutcomeCut
		}
	}
	if !peer {
		if refusingRules[ruleOf(c.err)] {
			return OutcomeRefused
		}
		return OutcomeFailed
	}
	if errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, context.Canceled) {
		return OutcomeRefused
	}
	if n := len(copies); n > 0 && copies[n-1].fresh {
		return OutcomeRefused
	}
	return OutcomeFailed
}

// MethodStats counts the calls of one method.
type MethodStats struct {
	// Calls is the number of calls made.
	Calls int
	// OK is the number of calls that returned 200 with the expected body.
	OK int
	// Cut is the number of failed calls a response byte of which had
	// left the server (OutcomeCut): no transport recovers those by
	// itself.
	Cut int
	// Refused is the number of calls refused by a rule that judges the
	// request or its connection (OutcomeRefused).
	Refused int
	// RetryAfter is the number of 503 answers delivered without a retry
	// policy (OutcomeRetryAfter).
	RetryAfter int
}

// Rate returns OK/Calls, or 1 with no call.
func (m MethodStats) Rate() float64 {
	if m.Calls == 0 {
		return 1
	}
	return float64(m.OK) / float64(m.Calls)
}

// Recoverable returns the calls a rule-abiding client could carry
// through: all but the cut, the refused and the 503s set apart.
func (m MethodStats) Recoverable() int { return m.Calls - m.Cut - m.Refused - m.RetryAfter }

// Failed returns the recoverable calls that failed.
func (m MethodStats) Failed() int { return m.Recoverable() - m.OK }

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
	// Errors counts failed calls by outcome and class: the rule ID and
	// name of a *replaysafe.Error, or a short description of another
	// error, with addresses and numbers blanked.
	Errors map[Outcome]map[string]int
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
	// ConnEnds is the number of connections the fault model ended (prod),
	// once each, restarts apart.
	ConnEnds int
	// Restarts is the number of server restarts made.
	Restarts int
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

// Idempotent sums the stats of the idempotent methods (GET, PUT,
// DELETE).
func (r *Result) Idempotent() MethodStats {
	var t MethodStats
	for m, s := range r.Methods {
		if m != http.MethodPost {
			t.Calls += s.Calls
			t.OK += s.OK
			t.Cut += s.Cut
			t.Refused += s.Refused
			t.RetryAfter += s.RetryAfter
		}
	}
	return t
}

// RecoverableIdempotentRate returns the success rate of the idempotent
// methods over the calls a rule-abiding client could carry through: not
// cut after their response started, not refused by a rule that judges
// the request or its connection, not a 503 delivered without a retry
// policy.
func (r *Result) RecoverableIdempotentRate() float64 {
	t := r.Idempotent()
	if t.Recoverable() <= 0 {
		return 1
	}
	return float64(t.OK) / float64(t.Recoverable())
}

// DialCount returns the connections the client opened: its dials, or
// the connections the server accepted when it dials none through a hook
// (QUIC).
func (r *Result) DialCount() int {
	if r.Dials >= 0 {
		return r.Dials
	}
	return r.Accepted
}

// DialBound returns the prod model's bound of the multiplexed protocols'
// dials: connection ends + restarts × ⌈in-flight ÷ stream limit⌉ + 8.
func (r *Result) DialBound() int {
	perRestart := (r.Config.Concurrency + StreamLimit - 1) / StreamLimit
	return r.ConnEnds + r.Restarts*perRestart + 8
}

// Violations returns the hard bounds the run broke: more than two copies
// of a request (N with Config.Retry N), a non-idempotent request
// delivered twice, copies that differ, a tracecheck failure, goroutines
// or file descriptors not back to before after CloseIdleConnections.
// Empty means none. For a peer run only the copy counts are judged.
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
	if !r.Settled {
		v = append(v, fmt.Sprintf("resources not back after CloseIdleConnections: goroutines %d → %d, fds %d → %d",
			r.Before.Goroutines, r.After.Goroutines, r.Before.FDs, r.After.FDs))
	}
	return v
}

// Target is one goal of the connection layer that a soak measures but
// does not enforce: the numbers replaysafe aims at under faults.
type Target struct {
	// Name states the goal with the measured numbers.
	Name string
	// Means says what meeting it shows.
	Means string
	// Met reports whether the run met it.
	Met bool
	// Measured is false when the run could not judge it (it needs -peer).
	Measured bool
}

// Targets returns the goals of the run's model, judged against the
// peer's run when peer is not nil.
//
// prod: idempotent success ≥ 99.9% of the calls a rule-abiding client
// could carry through; over h2, h2c and h3 dials ≤ connection ends +
// restarts × ⌈in-flight ÷ stream limit⌉ + 8; over h1 and h1tls dials ≤
// the peer's. harsh: every hard bound held, idempotent success ≥ the
// peer's.
func (r *Result) Targets(peer *Result) []Target {
	rec := r.RecoverableIdempotentRate()
	var ts []Target
	if r.Config.Model == ModelHarsh {
		ts = append(ts, Target{Name: fmt.Sprintf("every hard bound held (%d broken)", len(r.Violations())),
			Means: "the stress test found no extra copy, duplicate POST, differing copy, bad trace or leak",
			Met:   len(r.Violations()) == 0, Measured: true})
		t := Target{Name: "idempotent success ≥ the peer's (run with -peer)",
			Means: "under faults that kill whole connections, replaysafe recovers at least what the reference client does"}
		if peer != nil {
			prate := peer.RecoverableIdempotentRate()
			t.Name = fmt.Sprintf("idempotent success %.2f%% ≥ %s's %.2f%% (of recoverable calls)", 100*rec, peer.Client, 100*prate)
			t.Met, t.Measured = rec >= prate, true
		}
		return append(ts, t)
	}
	ts = append(ts, Target{Name: fmt.Sprintf("idempotent success %.2f%% ≥ 99.9%% of recoverable calls", 100*rec),
		Means: "nearly every GET, PUT and DELETE that a rule-abiding client could carry through succeeds",
		Met:   rec >= 0.999, Measured: true})
	switch r.Config.Proto {
	case "h2", "h2c", "h3":
		per := (r.Config.Concurrency + StreamLimit - 1) / StreamLimit
		ts = append(ts, Target{
			Name: fmt.Sprintf("dials %d ≤ connection ends %d + restarts %d × ⌈in-flight %d ÷ stream limit %d⌉ (%d) + 8 = %d",
				r.DialCount(), r.ConnEnds, r.Restarts, r.Config.Concurrency, StreamLimit, per, r.DialBound()),
			Means: "one new connection per lost one: displaced requests share a redial instead of dialing each",
			Met:   r.DialCount() <= r.DialBound(), Measured: true})
	default:
		t := Target{Name: "HTTP/1.1 dials ≤ the peer's (run with -peer)",
			Means: "no more connections than net/http opens for the same faults"}
		if peer != nil {
			t.Name = fmt.Sprintf("HTTP/1.1 dials %d ≤ %s's %d", r.DialCount(), peer.Client, peer.DialCount())
			t.Met, t.Measured = r.DialCount() <= peer.DialCount(), true
		}
		ts = append(ts, t)
	}
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
	if cfg.Model == ModelProd && cfg.ConnLife == 0 {
		cfg.ConnLife = DefaultConnLife
	}
	srv, err := startServer(cfg)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Config:    cfg,
		Copies:    map[int]int{},
		Methods:   map[string]*MethodStats{},
		Errors:    map[Outcome]map[string]int{},
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
		// Peaks are sampled every 10 ms, so that they are true for runs
		// under a second; progress is printed once a second.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		lastProgress := start
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				r := observe()
				if cfg.Progress != nil && time.Since(lastProgress) >= time.Second {
					lastProgress = time.Now()
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
				c := call(ctx, cl.rt, base, cfg, i)
				var copies []copyRecord
				if !c.ok {
					copies = srv.copiesOf(strconv.FormatInt(i, 10))
				}
				o := judge(c, copies, cfg.Peer, cfg.waits503())
				mu.Lock()
				st := res.Methods[c.method]
				st.Calls++
				switch o {
				case OutcomeOK:
					st.OK++
				case OutcomeCut:
					st.Cut++
				case OutcomeRefused:
					st.Refused++
				case OutcomeRetryAfter:
					st.RetryAfter++
				}
				if !c.ok {
					if res.Errors[o] == nil {
						res.Errors[o] = map[string]int{}
					}
					res.Errors[o][c.class]++
					if c.forceClosed {
						res.ForceClosed++
					}
				}
				mu.Unlock()
				if c.ok {
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
	res.ConnEnds = int(srv.connEnds.Load())
	res.Restarts = int(srv.restarts.Load())
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

// Header returns the first line of the soak command's output: the
// protocol and the model, each marked when it is the default, and the
// parameters of the run.
func Header(c Config, protoDefault, modelDefault bool) string {
	def := func(b bool) string {
		if b {
			return " (default)"
		}
		return ""
	}
	line := fmt.Sprintf("soak -proto %s%s -model %s%s: %d requests, -c %d, -faults %.3f",
		c.Proto, def(protoDefault), c.Model, def(modelDefault), c.N, c.Concurrency, c.Faults)
	if c.Model == ModelProd {
		restarts := "off"
		if c.Restarts > 0 {
			restarts = c.Restarts.String()
		}
		line += fmt.Sprintf(", -conn-life %d, -restarts %s", c.ConnLife, restarts)
	}
	if c.Retry > 0 {
		line += fmt.Sprintf(", -retry %d", c.Retry)
	}
	if c.RetryAfterMax > 0 {
		line += fmt.Sprintf(", -retry-after-max %v", c.RetryAfterMax)
	}
	return line + fmt.Sprintf(", seed %d", c.Seed)
}

// Print writes the result as the soak command shows it.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "%s, model %s: %s, %d requests, %d goroutines, faults %.3f, seed %d, maxconns %d\n",
		r.Client, c.Model, c.Proto, c.N, c.Concurrency, c.Faults, c.Seed, c.MaxConns)
	fmt.Fprintf(w, "  elapsed %v, %.0f req/s\n", r.Elapsed.Round(time.Millisecond), r.ReqPerSec())
	fmt.Fprintf(w, "  max copies %d (ids by copies:%s), duplicate non-idempotent deliveries %d, differing copies %d, cut uploads %d\n",
		r.MaxCopies, histogram(r.Copies), r.DuplicateNonIdempotent, r.Differing, r.Partial)
	idem := r.Idempotent()
	fmt.Fprintf(w, "  idempotent success %.2f%% of recoverable calls (%d/%d); %.2f%% of all %d\n",
		100*r.RecoverableIdempotentRate(), idem.OK, idem.Recoverable(), 100*r.IdempotentRate(), idem.Calls)
	printStats := func(name string, s MethodStats) {
		fmt.Fprintf(w, "    %-10s %6d calls: ok %d, failed %d; set apart: cut after the response started %d, refused by a rule on the request or its connection %d, 503 delivered %d\n",
			name, s.Calls, s.OK, s.Failed(), s.Cut, s.Refused, s.RetryAfter)
	}
	printStats("idempotent", idem)
	printStats("POST", *r.Methods[http.MethodPost])
	fmt.Fprintf(w, "  success per method:")
	for _, m := range Methods {
		s := r.Methods[m]
		fmt.Fprintf(w, " %s %.2f%% (%d/%d)", m, 100*s.Rate(), s.OK, s.Calls)
	}
	fmt.Fprintln(w)
	if len(r.Errors) == 0 {
		fmt.Fprintf(w, "  failures: none\n")
	} else {
		fmt.Fprintf(w, "  failures by outcome and rule:\n")
		for _, o := range []Outcome{OutcomeFailed, OutcomeCut, OutcomeRefused, OutcomeRetryAfter} {
			classes := r.Errors[o]
			if len(classes) == 0 {
				continue
			}
			fmt.Fprintf(w, "    %s:\n", o)
			for _, k := range sortedKeys(classes) {
				fmt.Fprintf(w, "      %6d  %s\n", classes[k], k)
			}
		}
	}
	fmt.Fprintf(w, "  force closed %d\n", r.ForceClosed)
	var inj []string
	for f := FaultNone + 1; f < faultCount; f++ {
		if n := r.Injected[f]; n > 0 {
			inj = append(inj, fmt.Sprintf("%s %d", f, n))
		}
	}
	if c.Model == ModelProd {
		fmt.Fprintf(w, "  injected: %s (connections ended by the model %d, restarts %d)\n",
			orNone(strings.Join(inj, ", ")), r.ConnEnds, r.Restarts)
	} else {
		fmt.Fprintf(w, "  injected: %s (connection-ending %d; idle closes that found the connection busy %d)\n",
			orNone(strings.Join(inj, ", ")), r.ConnFaults, r.BusyIdleCloses)
	}
	dials := strconv.Itoa(r.Dials)
	if r.Dials < 0 {
		dials = "n/a (QUIC)"
	}
	fmt.Fprintf(w, "  dials %s, server accepted %d, failed accepts (too many open files) %d\n",
		dials, r.Accepted, r.AcceptErrors)
	idle := strconv.Itoa(r.IdleAtEnd)
	if r.IdleAtEnd < 0 {
		idle = "n/a"
	}
	clientPeak := strconv.Itoa(r.ClientPeakOpen)
	if r.ClientPeakOpen < 0 {
		clientPeak = "n/a"
	}
	fmt.Fprintf(w, "  idle connections at end %s (idle cap %d); peak open at the client %s; open at the server: peak %d, at end %d, after CloseIdleConnections %d\n",
		idle, replaysafe.DefaultMaxIdleConnsPerHost, clientPeak, r.PeakOpen, r.OpenAtEnd, r.OpenAfter)
	fmt.Fprintf(w, "  before: %s\n  peak:   %s (sampled every 10 ms)\n  end:    %s\n  after:  %s (back to before: %v)\n",
		r.Before, r.Peak, r.End, r.After, r.Settled)
	if !c.Peer {
		verdict := "clean"
		if r.TraceErr != nil {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "  tracecheck: %d attempt traces checked (%d calls), %s\n", r.TracesChecked, c.N, verdict)
	}
	if v := r.Violations(); len(v) > 0 && c.Peer {
		fmt.Fprintf(w, "  beyond replaysafe's bounds (the peer is not judged):\n")
		for _, s := range v {
			fmt.Fprintf(w, "    %s\n", s)
		}
	} else if len(v) > 0 {
		fmt.Fprintf(w, "  HARD BOUNDS BROKEN (exit status 1):\n")
		for _, s := range v {
			fmt.Fprintf(w, "    %s\n", s)
		}
	} else if !c.Peer {
		fmt.Fprintf(w, "  hard bounds: held (max copies ≤ %d, no duplicate POST, identical copies, tracecheck clean, resources back)\n", max(2, c.Retry))
	}
}

// PrintTargets writes the targets of the run's model as met or not met,
// with what each means; peer is the peer's run or nil.
func (r *Result) PrintTargets(w io.Writer, peer *Result) {
	fmt.Fprintf(w, "targets of -model %s (measured, not enforced: the exit status is 1 only on a broken hard bound):\n", r.Config.Model)
	for _, t := range r.Targets(peer) {
		mark := "met"
		switch {
		case !t.Measured:
			mark = "n/a"
		case !t.Met:
			mark = "NOT met"
		}
		fmt.Fprintf(w, "  %-7s %s\n          (%s)\n", mark, t.Name, t.Means)
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
