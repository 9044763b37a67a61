package conformance

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/internal/harness/tracecheck"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3early"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// runTimeout bounds one run of a case end to end.
const runTimeout = 20 * time.Second

// Settings are the knobs of a whole run of the suite.
type Settings struct {
	// Runs is how many times each case runs against each client.
	Runs int
	// Quick shortens the slow cases: the proxy's idle tunnel cut comes
	// sooner, each peer with a deadline runs once, and
	// each peer of a scenario with PeerRuns runs once within
	// quickPeerDeadline.
	Quick bool
	// OnRun, if set, is called as each run of a case starts, with the
	// client, the run's number from 1 and the client's number of runs.
	// RunAll calls it from several goroutines.
	OnRun func(c Case, client string, run, runs int)
}

// tunnelCut is the proxy's idle cut in the tunnel-cut scenarios: long
// enough for the target request to reach the origin before it, even
// under the race detector, and short enough to keep runs quick.
func (s Settings) tunnelCut() time.Duration {
	if s.Quick {
		return 150 * time.Millisecond
	}
	return 400 * time.Millisecond
}

// quickPeerDeadline bounds, in a quick run, each target call of a peer
// whose scenario caps its runs (PeerRuns).
const quickPeerDeadline = 2 * time.Second

// replaysafeOptions are the option names a scenario's option lines may
// use.
var replaysafeOptions = map[string]func(*replaysafe.Options){
	"disable-resend": func(o *replaysafe.Options) { o.DisableResend = true },
	"retry-policy":   func(o *replaysafe.Options) { o.CallerRetries = true },
}

// Run is the outcome of one run of a case.
type Run struct {
	// Status is the target request's final status, 0 on error.
	Status int
	// Err is the target request's error.
	Err error
	// Rules lists the rule IDs that ended each wire attempt of the target
	// request (replaysafe only), joined by ",".
	Rules string
	// Copies counts the copies of the target the server received (for a
	// burst, the most any one request got); Partial the incomplete ones
	// of an HTTP/1.1 origin.
	Copies, Partial int
	// Identical reports whether all copies carry the same bytes.
	Identical bool
	// Conns is the number of connections the origin accepted.
	Conns int
	// Traces is the number of replaysafe attempt traces tracecheck
	// checked; Trace its failure, if any.
	Traces int
	Trace  error
	// Elapsed is the slowest target call.
	Elapsed time.Duration
	// Setup is an error of the scenario's steps before or around the
	// target: a harness failure, not an outcome.
	Setup error
}

// Outcome is the run's outcome in a table cell: "200" or "error".
func (r Run) Outcome() string {
	switch {
	case r.Setup != nil:
		return "setup-error"
	case r.Err != nil:
		return "error"
	}
	return strconv.Itoa(r.Status)
}

// Matches reports whether the run is what w expects; rules are checked
// when checkRules is set.
func (r Run) Matches(w Want, checkRules bool) bool {
	return r.Setup == nil && r.Trace == nil && (r.Err == nil) == (w.Status != 0) && r.Status == w.Status &&
		r.Copies == w.Copies && r.Partial == 0 && r.Identical && (!checkRules || r.Rules == w.Rules)
}

// Want returns what the run did as an expectation.
func (r Run) Want(client string) Want {
	w := Want{Status: r.Status, Copies: r.Copies}
	if r.Err != nil {
		w.Status = 0
	}
	if client == Replaysafe {
		w.Rules = r.Rules
	}
	return w
}

// RunOnce runs c once against client with a fresh server, proxy and
// client, and counts what the server received.
func RunOnce(c Case, client string, set Settings) Run {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	env := &Env{Network: c.Network, Signal: make(chan struct{}), ctx: ctx}
	spec, err := c.serverConfig(c.Network, env.Signal)
	if err != nil {
		return Run{Setup: err}
	}
	var tlsCfg *tls.Config
	switch {
	case spec.h1 != nil:
		srv, err := replaysafetest.Start(*spec.h1)
		if err != nil {
			return Run{Setup: err}
		}
		env.Server, env.h1, tlsCfg = srv, srv, srv.ClientTLSConfig()
		env.Dialer = NewDialer()
	case spec.h2 != nil:
		srv, err := h2server.New(*spec.h2)
		if err != nil {
			return Run{Setup: err}
		}
		env.Server, tlsCfg = srv, srv.ClientTLSConfig()
	case spec.early != nil:
		srv, err := h3early.New(h3early.Config{})
		if err != nil {
			return Run{Setup: err}
		}
		// The priming connection's ticket must allow early data: the
		// server's behaviour applies from the next connection on.
		env.primed = func() {
			srv.Reject(spec.early.reject)
			srv.TooEarly(spec.early.tooEarly)
		}
		env.Server, tlsCfg, env.early = srv, srv.ClientTLSConfig(), true
	default:
		srv, err := h3server.New(*spec.h3)
		if err != nil {
			return Run{Setup: err}
		}
		env.Server, tlsCfg = srv, srv.ClientTLSConfig()
	}
	if err := env.startProxy(c.Proxy, set); err != nil {
		env.Server.Close()
		return Run{Setup: err}
	}
	defer env.stopProxy()

	var (
		rules   targetRules
		checker tracecheck.Checker
	)
	closeIdle, err := env.newClient(c, client, tlsCfg, replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
		rules.observe(a)
		checker.Observe(a)
	}})
	if err != nil {
		env.Server.Close()
		return Run{Setup: err}
	}
	if env.closeIdle == nil {
		env.closeIdle = closeIdle
	}
	if client != Replaysafe {
		env.deadline = c.PeerDeadline
		if set.Quick && c.PeerRuns > 0 {
			env.deadline = min(cmp.Or(env.deadline, quickPeerDeadline), quickPeerDeadline)
		}
	}

	res, setup := env.runSteps(c.Steps)
	closeIdle()
	env.closeSignal()
	if env.Dialer != nil {
		env.Dialer.CloseAll()
	}
	env.Server.Close()

	r := Run{Status: res.Status, Err: res.Err, Setup: setup, Rules: rules.String(),
		Conns: env.Server.Accepted(), Traces: checker.Checked(), Trace: checker.Err(), Elapsed: env.elapsed}
	r.count(env.Server.Receipts(), c.Proto == ProtoH1)
	return r
}

// count sets the copies from what the server received at TargetPath
// (with any query: one request of a burst). Over HTTP/1.1 only complete
// requests are copies, and copies must be byte-identical; over HTTP/2 and
// HTTP/3 every stream is, and a stream refused on its headers may carry
// less of the body than its copies.
func (r *Run) count(got []replaysafetest.Receipt, h1 bool) {
	r.Identical = true
	first := map[string]string{}
	copies := map[string]int{}
	for _, q := range got {
		p, _, _ := strings.Cut(q.Path, "?")
		if p != TargetPath {
			continue
		}
		if h1 && !q.Complete {
			r.Partial++
			continue
		}
		sig := q.Method + " " + string(q.Body)
		if h1 {
			sig = string(q.Raw)
		}
		if f, ok := first[q.Path]; !ok {
			first[q.Path] = sig
		} else if h1 && f != sig || !h1 && !strings.HasPrefix(f, sig) && !strings.HasPrefix(sig, f) {
			r.Identical = false
		}
		copies[q.Path]++
		r.Copies = max(r.Copies, copies[q.Path])
	}
}

// newClient makes env's client and returns how to close its idle
// connections.
func (e *Env) newClient(c Case, client string, tlsCfg *tls.Config, obs replaysafe.Observer) (func(), error) {
	o := replaysafe.Options{TLSClientConfig: tlsCfg, Observer: obs}
	switch c.Proto {
	case ProtoH1:
		o.Protocol = replaysafe.ProtocolHTTP1
		o.DialContext, o.Proxy = e.Dialer.DialContext, e.proxyFunc()
	case ProtoH2:
		o.Protocol = replaysafe.ProtocolHTTP2
	case ProtoH3:
		o.Protocol = replaysafe.ProtocolHTTP3
	}
	for _, name := range c.Options {
		replaysafeOptions[name](&o)
	}
	if e.early {
		// An early-data origin: replaysafe with EarlyData; quic-go's
		// Transport with a session cache, the target sent with its 0-RTT
		// method (Env.method).
		o.EarlyData = true
		tlsCfg = tlsCfg.Clone()
		tlsCfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		e.zeroRTT = client == QuicGoHTTP3
	}
	switch client {
	case Replaysafe:
		tr := replaysafe.New(o)
		e.Client = tr
		return tr.CloseIdleConnections, nil
	case NetHTTP:
		tr := &http.Transport{DialContext: e.Dialer.DialContext, TLSClientConfig: tlsCfg, Proxy: e.proxyFunc()}
		e.Client = tr
		return tr.CloseIdleConnections, nil
	case XNetHTTP2:
		tr := &http2.Transport{TLSClientConfig: tlsCfg}
		if !c.Network.TLS {
			tr.AllowHTTP = true
			tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
		}
		e.Client = tr
		return tr.CloseIdleConnections, nil
	case NetHTTPH2:
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
		if !c.Network.TLS {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr.Protocols = &p
		}
		e.Client = tr
		return tr.CloseIdleConnections, nil
	case QuicGoHTTP3:
		tr := &http3.Transport{TLSClientConfig: tlsCfg}
		e.Client = tr
		// The prime step closes only the connections (Close would end
		// the Transport's UDP socket too); the run's end closes it all.
		e.closeIdle = tr.CloseIdleConnections
		return func() { tr.Close() }, nil
	}
	return nil, fmt.Errorf("conformance: unknown client %q", client)
}

// startProxy starts the scenario's proxy, if it has one. Proxy scenarios
// run both clients through one scripted CONNECT proxy, started fresh for
// every run, both dialing through the run's Dialer. They run over TLS
// only: both clients tunnel with CONNECT to https origins, and send
// requests for an http origin to the proxy in absolute form, which this
// CONNECT proxy refuses.
func (e *Env) startProxy(kind string, set Settings) error {
	var cfg connectproxy.Config
	switch kind {
	case "":
		return nil
	case "idle-cut":
		cfg.IdleCut = set.tunnelCut()
	case "auth":
		cfg.RequireAuth = &connectproxy.Credentials{Username: "u", Password: "p"}
	}
	p, err := connectproxy.Start(cfg)
	if err != nil {
		return err
	}
	e.Proxy = p
	return nil
}

// stopProxy closes the run's proxy, if any.
func (e *Env) stopProxy() {
	if e.Proxy != nil {
		e.Proxy.Close()
	}
}

// proxyFunc returns the Proxy setting both clients get: http.ProxyURL of
// the run's proxy, or nil without one.
func (e *Env) proxyFunc() func(*http.Request) (*url.URL, error) {
	if e.Proxy == nil {
		return nil
	}
	return http.ProxyURL(&url.URL{Scheme: "http", Host: e.Proxy.Addr()})
}

// targetRules records the rule IDs that ended replaysafe's attempts at
// TargetPath.
type targetRules struct {
	mu  sync.Mutex
	ids []string
}

func (r *targetRules) observe(a replaysafe.AttemptReport) {
	if a.Request.URL.Path == TargetPath && a.Request.URL.RawQuery == "" {
		r.mu.Lock()
		r.ids = append(r.ids, a.Decision.Rule.ID())
		r.mu.Unlock()
	}
}

// String joins the IDs with commas, in attempt order.
func (r *targetRules) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ids, ",")
}

// Count is a value and how many runs had it.
type Count struct {
	// Value is the value; N how many runs had it.
	Value string `json:"value"`
	N     int    `json:"n"`
}

// Report sums up the runs of one case against one client.
type Report struct {
	// Case, Title, Network and Client name the case and the client.
	Case    string `json:"case"`
	Title   string `json:"title"`
	Network string `json:"network"`
	Client  string `json:"client"`
	// Skipped is set when the client has no setting for the scenario
	// (the peers, for scenarios with replaysafe options).
	Skipped bool `json:"skipped,omitempty"`
	// Runs is the number of runs.
	Runs int `json:"runs"`
	// Outcomes and Rules count the distinct values over the runs, in the
	// order first seen.
	Outcomes []Count `json:"outcomes"`
	Rules    []Count `json:"rules,omitempty"`
	// Copies is the copies count of each run; Conns the connections the
	// origin accepted in each.
	Copies []int `json:"copies"`
	Conns  []int `json:"conns"`
	// Identical is set when every run's copies were identical.
	Identical bool `json:"identical"`
	// Want is the expected outcome; OK says whether every run matched it.
	Want Want `json:"want"`
	OK   bool `json:"ok"`
	// Measured is set for a peer with no expectation: its row shows
	// what it did, and OK means nothing.
	Measured bool `json:"measured,omitempty"`
	// Errors lists the distinct error texts seen (errors, setup errors
	// and trace failures), at most a few.
	Errors []string `json:"errors,omitempty"`
	// Traces is the number of attempt traces tracecheck checked; Trace
	// holds its first failure, with the trace.
	Traces int    `json:"traces"`
	Trace  string `json:"trace,omitempty"`
	// Elapsed is the slowest run's target call.
	Elapsed string `json:"elapsed,omitempty"`
	// Observed is the outcome of every run, when all runs agreed; nil
	// otherwise (used to rewrite expectations).
	Observed *Want `json:"-"`
}

// maxErrors bounds Report.Errors.
const maxErrors = 3

// RunCase runs c against client set.Runs times (a peer at most PeerRuns
// times, or once in a quick run of a scenario with a peer deadline).
func RunCase(c Case, client string, set Settings) Report {
	exp, _ := c.Expectation(client)
	rep := Report{Case: c.Name(), Title: c.Title, Network: c.Network.Name, Client: client, Identical: true, OK: true,
		Want: exp.Want, Measured: exp.Measured && client != Replaysafe}
	if client != Replaysafe && len(c.Options) > 0 {
		rep.Skipped = true
		return rep
	}
	n := set.Runs
	if client != Replaysafe && c.PeerRuns > 0 {
		n = min(n, c.PeerRuns)
	}
	if client != Replaysafe && set.Quick && (c.PeerDeadline > 0 || c.PeerRuns > 0) {
		n = 1
		// The quick deadline changes what the peer can do: show it.
		rep.Measured = rep.Measured || c.PeerDeadline == 0
	}
	var slowest time.Duration
	same := true
	for i := range n {
		if set.OnRun != nil {
			set.OnRun(c, client, i+1, n)
		}
		r := RunOnce(c, client, set)
		slowest = max(slowest, r.Elapsed)
		w := r.Want(client)
		if i == 0 {
			rep.Observed = &w
		} else if *rep.Observed != w {
			same = false
		}
		if r.Setup != nil || !r.Identical || r.Partial > 0 {
			same = false
		}
		rep.add(r, !rep.Measured)
	}
	if !same {
		rep.Observed = nil
	}
	rep.Elapsed = slowest.Round(100 * time.Microsecond).String()
	return rep
}

// add counts run r into the report, checking it against rep.Want when
// checked is set.
func (rep *Report) add(r Run, checked bool) {
	rep.Runs++
	rep.Outcomes = addCount(rep.Outcomes, r.Outcome())
	if rep.Client == Replaysafe {
		rep.Rules = addCount(rep.Rules, r.Rules)
	}
	rep.Copies = append(rep.Copies, r.Copies)
	rep.Conns = append(rep.Conns, r.Conns)
	rep.Identical = rep.Identical && r.Identical
	rep.Traces += r.Traces
	if r.Trace != nil {
		rep.OK = false
		if rep.Trace == "" {
			rep.Trace = r.Trace.Error()
		}
	}
	if checked {
		rep.OK = rep.OK && r.Matches(rep.Want, rep.Client == Replaysafe)
	}
	for _, err := range []error{r.Setup, r.Err} {
		if err != nil && len(rep.Errors) < maxErrors && !slices.Contains(rep.Errors, err.Error()) {
			rep.Errors = append(rep.Errors, err.Error())
		}
	}
}

func addCount(cs []Count, v string) []Count {
	for i := range cs {
		if cs[i].Value == v {
			cs[i].N++
			return cs
		}
	}
	return append(cs, Count{Value: v, N: 1})
}

// ErrReplaysafeRunsDiffer is returned by Report.Expectation for a
// replaysafe row whose runs did not all do the same: such a row is never
// written as measured, and -rewrite keeps the file's line.
var ErrReplaysafeRunsDiffer = errors.New("conformance: replaysafe's runs differ: its row cannot be rewritten as measured")

// Expectation returns the report as an expectation line for -rewrite:
// what every run did, or, for a peer, measured when runs differed. A
// replaysafe row whose runs differed is an error.
func (r Report) Expectation() (Expectation, error) {
	e := Expectation{Net: r.Network, Client: r.Client}
	switch {
	case r.Skipped:
		e.NA = true
	case r.Observed == nil && r.Client == Replaysafe:
		return e, fmt.Errorf("%s: %w (outcomes %s, copies %s, rules %s)", r.Case, ErrReplaysafeRunsDiffer, r.OutcomeCell(), r.CopiesCell(), r.RulesCell())
	case r.Observed == nil:
		e.Measured = true
	default:
		e.Want = *r.Observed
	}
	return e, nil
}

// Workers is how many cases run at once: most of a case's time is spent
// waiting on loopback I/O and timers, so more than the CPUs.
func Workers() int { return max(2*runtime.GOMAXPROCS(0), 4) }

// RunAll runs every case against each of its clients, Workers cases at
// once, and calls done (from one goroutine at a time, in completion
// order) with each case's index and reports as the case finishes. It
// returns every report in table order.
func RunAll(cases []Case, set Settings, done func(i int, reps []Report)) []Report {
	out := make([][]Report, len(cases))
	// The slow cases (timers: a peer deadline, a proxy's idle cut, a
	// peer's backoff) start first so that they overlap the others; one
	// worker takes the quick ones first, so that rows keep coming.
	var slow, quick []int
	for i, c := range cases {
		if cost(c) > 0 {
			slow = append(slow, i)
		} else {
			quick = append(quick, i)
		}
	}
	slices.SortStableFunc(slow, func(a, b int) int { return cost(cases[b]) - cost(cases[a]) })
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	// next pops the next case for a worker, from its preferred queue
	// first; it returns -1 when both are empty.
	next := func(quickFirst bool) int {
		mu.Lock()
		defer mu.Unlock()
		qs := [][]int{slow, quick}
		if quickFirst {
			qs[0], qs[1] = quick, slow
		}
		for _, q := range qs {
			if len(q) > 0 {
				i := q[0]
				if len(slow) > 0 && slow[0] == i {
					slow = slow[1:]
				} else {
					quick = quick[1:]
				}
				return i
			}
		}
		return -1
	}
	for w := range Workers() {
		wg.Go(func() {
			for i := next(w == 0); i >= 0; i = next(w == 0) {
				var reps []Report
				for _, cl := range cases[i].Clients {
					reps = append(reps, RunCase(cases[i], cl, set))
				}
				mu.Lock()
				out[i] = reps
				if done != nil {
					done(i, reps)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return slices.Concat(out...)
}

// cost ranks a case by how long it waits on timers.
func cost(c Case) int {
	switch {
	case c.PeerDeadline > 0:
		return 3
	case c.Proxy == "idle-cut":
		return 2
	case slices.ContainsFunc(c.Steps, func(s []string) bool { return s[0] == "burst" }):
		return 1
	}
	return 0
}

// CopiesCell prints copy counts: "2", or "1-2" when runs differed.
func (r Report) CopiesCell() string { return rangeCell(r.Copies) }

// ConnsCell prints the connections the origin accepted like CopiesCell.
func (r Report) ConnsCell() string { return rangeCell(r.Conns) }

func rangeCell(v []int) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return strconv.Itoa(lo) + "-" + strconv.Itoa(hi)
}

// OutcomeCell prints the outcomes: "200 30/30", or each value and its
// count when runs differed.
func (r Report) OutcomeCell() string { return countsCell(r.Outcomes, r.Runs) }

// RulesCell prints the rule sequences like OutcomeCell, without counts
// when every run agreed.
func (r Report) RulesCell() string {
	if len(r.Rules) == 0 {
		return "-"
	}
	if len(r.Rules) == 1 {
		return cmp.Or(r.Rules[0].Value, "-")
	}
	return countsCell(r.Rules, r.Runs)
}

func countsCell(cs []Count, runs int) string {
	if len(cs) == 0 {
		return "-"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d/%d", c.Value, c.N, runs)
	}
	return strings.Join(parts, ", ")
}
