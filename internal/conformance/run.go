package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// Clients under test.
const (
	// Replaysafe is replaysafe.Transport, configured for the scenario.
	Replaysafe = "replaysafe"
	// NetHTTP is a fresh, zero-valued net/http Transport (HTTP/1.1: the
	// server offers nothing else) trusting the server's certificate.
	NetHTTP = "net/http"
)

// Clients lists the clients in table order.
var Clients = []string{Replaysafe, NetHTTP}

// Run is the outcome of one run of a case.
type Run struct {
	// Status is the target request's final status, 0 on error.
	Status int
	// Err is the target request's error.
	Err error
	// Rules lists the rule IDs that ended each wire attempt of the target
	// request (replaysafe only), joined by ",".
	Rules string
	// Copies counts the complete copies of the target the server
	// received; Partial the incomplete ones.
	Copies, Partial int
	// Identical reports whether all complete copies are byte-identical.
	Identical bool
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
	return r.Setup == nil && (r.Err == nil) == (w.Status != 0) && r.Status == w.Status &&
		r.Copies == w.Copies && r.Partial == 0 && r.Identical && (!checkRules || r.Rules == w.Rules)
}

// RunOnce runs c once against client with a fresh server and a fresh
// client, and counts what the server received.
func RunOnce(c Case, client string) Run {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	env := &Env{Network: c.Network, Dialer: NewDialer(), Signal: make(chan struct{}), ctx: ctx}
	srv, err := replaysafetest.Start(replaysafetest.Config{TLS: c.Network.TLS, Conns: c.Script(env)})
	if err != nil {
		return Run{Setup: err}
	}
	env.Server = srv
	if err := env.startProxy(c.Scenario); err != nil {
		srv.Close()
		return Run{Setup: err}
	}
	defer env.stopProxy()

	var (
		mu    sync.Mutex
		rules []string
	)
	var closeIdle func()
	switch client {
	case Replaysafe:
		o := replaysafe.Options{
			DialContext:     env.Dialer.DialContext,
			TLSClientConfig: srv.ClientTLSConfig(),
			Proxy:           env.proxyFunc(),
			Observer: replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
				if a.Request.URL.Path == TargetPath {
					mu.Lock()
					rules = append(rules, a.Decision.Rule.ID())
					mu.Unlock()
				}
			}},
		}
		if c.Options != nil {
			c.Options(&o)
		}
		tr := replaysafe.New(o)
		env.Client, closeIdle = tr, tr.CloseIdleConnections
	case NetHTTP:
		tr := &http.Transport{DialContext: env.Dialer.DialContext, TLSClientConfig: srv.ClientTLSConfig(), Proxy: env.proxyFunc()}
		env.Client, closeIdle = tr, tr.CloseIdleConnections
	default:
		srv.Close()
		return Run{Setup: fmt.Errorf("conformance: unknown client %q", client)}
	}

	res, setup := c.Run(env)
	closeIdle()
	env.closeSignal()
	env.Dialer.CloseAll()
	srv.Close()

	r := Run{Status: res.Status, Err: res.Err, Setup: setup, Identical: true}
	var first []byte
	for _, q := range srv.Requests() {
		if q.Target != TargetPath {
			continue
		}
		if r.Copies == 0 {
			first = q.Raw
		} else if !bytes.Equal(first, q.Raw) {
			r.Identical = false
		}
		r.Copies++
	}
	for _, q := range srv.Partial() {
		if q.Target == TargetPath {
			r.Partial++
		}
	}
	mu.Lock()
	r.Rules = strings.Join(rules, ",")
	mu.Unlock()
	return r
}

// Count is a value and how many runs had it.
type Count struct {
	Value string `json:"value"`
	N     int    `json:"n"`
}

// Report sums up the runs of one case against one client.
type Report struct {
	Case    string `json:"case"`
	Title   string `json:"title"`
	Network string `json:"network"`
	Client  string `json:"client"`
	// Skipped is set when the client has no setting for the scenario
	// (net/http for scenarios with replaysafe Options).
	Skipped bool `json:"skipped,omitempty"`
	Runs    int  `json:"runs"`
	// Outcomes and Rules count the distinct values over the runs, in the
	// order first seen.
	Outcomes []Count `json:"outcomes"`
	Rules    []Count `json:"rules,omitempty"`
	// Copies is the copies count of each run.
	Copies []int `json:"copies"`
	// Identical is set when every run's copies were byte-identical.
	Identical bool `json:"identical"`
	// Want is the expected outcome; OK says whether every run matched it.
	Want Want `json:"want"`
	OK   bool `json:"ok"`
	// Errors lists the distinct error texts seen (errors and setup
	// errors), at most a few.
	Errors []string `json:"errors,omitempty"`
	// Measured is set for a peer with no expectation: its row shows
	// what it did, and OK means nothing (HTTP/2 cases).
	Measured bool `json:"measured,omitempty"`
	// Elapsed is the slowest run's target call, for HTTP/2 cases.
	Elapsed string `json:"elapsed,omitempty"`
}

// maxErrors bounds Report.Errors.
const maxErrors = 3

// RunCase runs c n times against client.
func RunCase(c Case, client string, n int) Report {
	wantRS, wantStd := c.Want(c.Network)
	rep := Report{Case: c.Name(), Title: c.Title, Network: c.Network.Name, Client: client, Identical: true, OK: true}
	rep.Want = wantRS
	if client == NetHTTP {
		rep.Want = wantStd
		if c.Options != nil {
			rep.Skipped = true
			return rep
		}
	}
	for range n {
		rep.add(RunOnce(c, client), true)
	}
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
	rep.Identical = rep.Identical && r.Identical
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

// RunAll runs every case against every client n times, several cases at
// once, and returns the reports in table order.
func RunAll(cases []Case, n int) []Report {
	var jobs []func() Report
	for _, c := range cases {
		for _, cl := range Clients {
			jobs = append(jobs, func() Report { return RunCase(c, cl, n) })
		}
	}
	return runJobs(jobs)
}

// CopiesCell prints copy counts: "2", or "1-2" when runs differed.
func (r Report) CopiesCell() string {
	if len(r.Copies) == 0 {
		return "-"
	}
	lo, hi := slices.Min(r.Copies), slices.Max(r.Copies)
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
		return r.Rules[0].Value
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
