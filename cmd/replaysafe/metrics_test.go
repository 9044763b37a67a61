package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// TestPromWriter: the exposition format as written: HELP and TYPE lines,
// series sorted by their labels, escaped label values, cumulative
// histogram buckets with +Inf, _sum and _count, gauges read when
// written, families without series left out.
func TestPromWriter(t *testing.T) {
	var r promRegistry
	c := r.family("x_total", "Things.", "counter")
	h := r.family("d_seconds", "Durations.", "histogram", 0.1, 1)
	g := r.family("open", "Open now.", "gauge")
	r.family("unused_total", "Never counted.", "counter")
	r.add(c, 1, label{"rule", "RS20"}, label{"path", `a"b\c` + "\n"})
	r.add(c, 2, label{"rule", "RS13"}, label{"path", "p"})
	r.add(c, 1, label{"rule", "RS20"}, label{"path", `a"b\c` + "\n"})
	r.observe(h, 0.05)
	r.observe(h, 0.1)
	r.observe(h, 3)
	n := int64(4)
	r.gauge(g, func() int64 { return n })
	n = 5
	var b strings.Builder
	if err := r.write(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP x_total Things.
# TYPE x_total counter
x_total{rule="RS13",path="p"} 2
x_total{rule="RS20",path="a\"b\\c\n"} 2
# HELP d_seconds Durations.
# TYPE d_seconds histogram
d_seconds_bucket{le="0.1"} 2
d_seconds_bucket{le="1"} 2
d_seconds_bucket{le="+Inf"} 3
d_seconds_sum 3.15
d_seconds_count 3
# HELP open Open now.
# TYPE open gauge
open 5
`
	if b.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", b.String(), want)
	}
}

// scrape fetches url and returns the sum of the samples of name whose
// labels contain every one of match (`key="value"`).
func scrape(t *testing.T, url, name string, match ...string) (float64, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("scrape: %d %q %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	return sumSamples(t, string(body), name, match...), string(body)
}

// sumSamples returns the sum of the samples of name in the exposition
// body whose labels contain every one of match (`key="value"`).
func sumSamples(t *testing.T, body, name string, match ...string) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		metric, labels, _ := strings.Cut(series, "{")
		if !ok || metric != name {
			continue
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(labels, m)
		}
		if all {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("sample %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// TestForwardMetrics: `replaysafe forward -metrics` serves the egress
// Transport's counters while requests run through it against an origin
// that closes every pooled connection as the next request arrives: the
// resend counter equals the resends counted at the origin (its copies
// beyond one per request), every attempt is counted, and the open
// connections are those the origin holds.
func TestForwardMetrics(t *testing.T) {
	cross := replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN))
	up, err := replaysafetest.Start(replaysafetest.Config{Default: &cross})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	addr, logs := startForward(t, "-to", up.URL(), "-metrics", "127.0.0.1:0")
	m := regexp.MustCompile(`metrics at (http://\S+/metrics)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs)
	}
	metricsURL := m[1]
	const calls = 12
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range calls {
		resp, err := client.Get(fmt.Sprintf("http://%s/r%d", addr, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /r%d: %d", i, resp.StatusCode)
		}
		if i == calls/2 { // a scrape while traffic runs
			if _, body := scrape(t, metricsURL, "replaysafe_client_attempts_total"); !strings.Contains(body, "# TYPE replaysafe_client_resends_total counter") {
				t.Errorf("mid-run scrape lacks the resend counter:\n%s", body)
			}
		}
	}
	receipts := len(up.Requests())
	originResends := receipts - calls
	if originResends < calls/2 {
		t.Fatalf("the origin received %d copies for %d calls: the faults did not cross requests", receipts, calls)
	}
	resends, body := scrape(t, metricsURL, "replaysafe_client_resends_total", `replaysafe_rule="RS20"`)
	if int(resends) != originResends {
		t.Errorf("resend counter %v, the origin counted %d resends:\n%s", resends, originResends, body)
	}
	if all, _ := scrape(t, metricsURL, "replaysafe_client_resends_total"); all != resends {
		t.Errorf("resends by other rules: %v in all, %v by RS20", all, resends)
	}
	if n, _ := scrape(t, metricsURL, "replaysafe_client_attempts_total"); int(n) != receipts {
		t.Errorf("attempt counter %v, the origin received %d copies", n, receipts)
	}
	if n, _ := scrape(t, metricsURL, "http_client_request_duration_seconds_count", `replaysafe_attempt="resend"`); int(n) != originResends {
		t.Errorf("%v resend durations, want %d", n, originResends)
	}
	if n, _ := scrape(t, metricsURL, "replaysafe_client_connection_dials_total", `network_protocol_version="1.1"`); int(n) != up.Conns() {
		t.Errorf("dial counter %v, the origin accepted %d connections", n, up.Conns())
	}
	dials, _ := scrape(t, metricsURL, "replaysafe_client_connection_dials_total")
	closes, _ := scrape(t, metricsURL, "replaysafe_client_connection_closes_total")
	open, _ := scrape(t, metricsURL, "replaysafe_client_connections_open")
	if open != dials-closes || open != 1 {
		t.Errorf("%v open, %v dialed, %v closed: want the one pooled connection open", open, dials, closes)
	}
}

// TestEgressMetricsForget: the per-call state is gone once a call's last
// attempt is reported, whether it delivered, failed, or failed while its
// body was read.
func TestEgressMetricsForget(t *testing.T) {
	m := newEgressMetrics()
	o := m.observer(replaysafe.Observer{})
	for i, last := range []fsm.CallDecision{
		{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse},
		{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent},
		{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse},
	} {
		req, _ := http.NewRequest("GET", "http://example.test/", nil)
		o.OnAttemptStart(replaysafe.AttemptStart{Request: req, Number: 1})
		o.OnAttempt(replaysafe.AttemptReport{Request: req, Number: 1, Call: fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend}})
		o.OnAttemptStart(replaysafe.AttemptStart{Request: req, Number: 2})
		var err error
		if i > 0 {
			err = io.ErrUnexpectedEOF
		}
		o.OnAttempt(replaysafe.AttemptReport{Request: req, Number: 2, Call: last, Err: err})
	}
	if len(m.calls) != 0 {
		t.Errorf("%d calls kept after they ended", len(m.calls))
	}
}

// hook is one Observer call of a scripted hedged call: a copy's start
// (report false) or its report with Call, or OnError (fail).
type hook struct {
	number int
	hedge  bool
	report bool
	call   fsm.CallDecision
	fail   bool
}

var (
	delivered   = fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}
	besideOther = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed} // failed beside, or lost to, another copy
)

func started(n int, hedge bool) hook { return hook{number: n, hedge: hedge} }
func reported(n int, hedge bool, cd fsm.CallDecision) hook {
	return hook{number: n, hedge: hedge, report: true, call: cd}
}

// hedgedOrders are the orders in which a hedged call's hooks can come
// (internal/driver/hedge.go): a copy that fails beside another is
// reported before the call's end, a copy that lost to another's
// response may be reported after the winner's final report, a loser of
// a try that a later try's failure ended after OnError, and a hedge
// launched as another copy won may even start after the call's end. Each
// has the kinds and outcomes its attempts count, and whether the call's
// state must be kept up to its last hook.
var hedgedOrders = []struct {
	name   string
	hooks  []hook
	counts map[[2]string]int // by kind and outcome
	kept   bool              // the state is there until the last hook
}{
	{"the hedge fails, the original delivers", []hook{
		started(1, false), started(2, true), reported(2, true, besideOther), reported(1, false, delivered),
	}, map[[2]string]int{{"hedge", "continue"}: 1, {"original", "deliver"}: 1}, true},
	{"the hedge delivers, the original lost after", []hook{
		started(1, false), started(2, true), reported(2, true, delivered), reported(1, false, besideOther),
	}, map[[2]string]int{{"hedge", "deliver"}: 1, {"original", "continue"}: 1}, true},
	{"the original delivers, the hedge lost after", []hook{
		started(1, false), started(2, true), reported(1, false, delivered), reported(2, true, besideOther),
	}, map[[2]string]int{{"original", "deliver"}: 1, {"hedge", "continue"}: 1}, true},
	{"the hedge's 503 is retried, the retry fails, the original lost after OnError", []hook{
		started(1, false), started(2, true),
		reported(2, true, fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true}),
		started(3, false), reported(3, false, fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent}),
		{fail: true}, reported(1, false, besideOther),
	}, map[[2]string]int{{"hedge", "retry"}: 1, {"retry", "fail"}: 1, {"original", "continue"}: 1}, true},
	{"a hedge launched as the original won starts after the call's end", []hook{
		started(1, false), reported(1, false, delivered), started(3, true), reported(3, true, besideOther),
	}, map[[2]string]int{{"original", "deliver"}: 1, {"hedge", "continue"}: 1}, false},
}

// TestEgressMetricsHedged: the hooks of a hedged call, in each order
// they can come, leave no per-call state behind (a loser reported after
// the winner does not make it again), count each copy once under its
// own kind (a hedge is not a resend) and outcome (continue, not fail),
// give each copy its own duration, count the hedge, and count no resend.
func TestEgressMetricsHedged(t *testing.T) {
	for _, c := range hedgedOrders {
		t.Run(c.name, func(t *testing.T) {
			m := newEgressMetrics()
			o := m.observer(replaysafe.Observer{})
			req, _ := http.NewRequest("GET", "http://example.test/", nil)
			for i, h := range c.hooks {
				switch {
				case h.fail:
					o.OnError(req, io.ErrUnexpectedEOF)
				case h.report:
					o.OnAttempt(replaysafe.AttemptReport{Request: req, Number: h.number, Hedge: h.hedge, Call: h.call})
				default:
					o.OnAttemptStart(replaysafe.AttemptStart{Request: req, Number: h.number, Hedge: h.hedge})
				}
				if last := i == len(c.hooks)-1; c.kept && !last && m.calls[req] == nil {
					t.Fatalf("the call's state went after hook %d of %d", i+1, len(c.hooks))
				}
			}
			if len(m.calls) != 0 {
				t.Errorf("%d calls kept after the last copy was reported", len(m.calls))
			}
			var b strings.Builder
			if err := m.reg.write(&b); err != nil {
				t.Fatal(err)
			}
			body := b.String()
			total := 0
			for ko, want := range c.counts {
				total += want
				kind, outcome := `replaysafe_attempt="`+ko[0]+`"`, `replaysafe_outcome="`+ko[1]+`"`
				if got := sumSamples(t, body, "replaysafe_client_attempts_total", kind, outcome); int(got) != want {
					t.Errorf("attempts %s %s: %v, want %d", kind, outcome, got, want)
				}
				if got := sumSamples(t, body, "http_client_request_duration_seconds_count", kind); int(got) != want {
					t.Errorf("durations %s: %v, want %d", kind, got, want)
				}
			}
			for name, want := range map[string]int{
				"replaysafe_client_attempts_total":           total,
				"http_client_request_duration_seconds_count": total,
				"replaysafe_client_hedges_total":             1,
				"replaysafe_client_resends_total":            0,
			} {
				if got := sumSamples(t, body, name); int(got) != want {
					t.Errorf("%s: %v, want %d\n%s", name, got, want, body)
				}
			}
		})
	}
}

// stallFirst is an origin whose first copy of each path stalls until
// its client goes (at most 10 s) and whose later copies answer at once,
// so that each call is answered by a hedge of it whatever the machine's
// speed. It counts the copies it received.
type stallFirst struct {
	mu   sync.Mutex
	seen map[string]int
}

func (s *stallFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := s.seen[r.URL.Path]
	s.seen[r.URL.Path]++
	s.mu.Unlock()
	if n == 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
	io.WriteString(w, "ok")
}

func (s *stallFirst) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.seen {
		n += c
	}
	return n
}

// TestEgressMetricsHedgeNetwork: GETs through a hedging Transport to an
// origin on 127.0.0.1 that stalls each request's first copy: the
// attempts counted equal the copies the origin received, the attempts
// and durations of kind hedge and the hedges counter equal the copies
// beyond one per call, every loser is counted as continue, no resend is
// counted, and no call's state is left once the losers are reported.
func TestEgressMetricsHedgeNetwork(t *testing.T) {
	origin := &stallFirst{seen: map[string]int{}}
	srv := httptest.NewServer(origin)
	defer srv.Close()
	m := newEgressMetrics()
	tr := replaysafe.New(replaysafe.Options{
		Observer: m.observer(replaysafe.Observer{}),
		Retry:    replaysafe.Retry{MaxAttempts: 3, Hedge: 20 * time.Millisecond, MaxHedges: 1},
	})
	defer tr.CloseIdleConnections()
	const calls = 4
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range calls {
		resp, err := client.Get(fmt.Sprintf("%s/h%d", srv.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /h%d: %d", i, resp.StatusCode)
		}
	}
	// The losers are reported once their connections are closed, maybe
	// after the calls returned.
	kept := -1
	for range 500 {
		m.mu.Lock()
		kept = len(m.calls)
		m.mu.Unlock()
		if kept == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if kept != 0 {
		t.Fatalf("%d calls' state kept 5 s after the calls", kept)
	}
	received := origin.received()
	hedges := received - calls
	if hedges != calls {
		t.Fatalf("the origin received %d copies of %d calls, want a hedge of each", received, calls)
	}
	var b strings.Builder
	if err := m.reg.write(&b); err != nil {
		t.Fatal(err)
	}
	body := b.String()
	for _, c := range []struct {
		name  string
		match []string
		want  int
	}{
		{"replaysafe_client_attempts_total", nil, received},
		{"replaysafe_client_attempts_total", []string{`replaysafe_attempt="hedge"`}, hedges},
		{"replaysafe_client_attempts_total", []string{`replaysafe_outcome="continue"`, `replaysafe_rule="RS31"`}, calls},
		{"replaysafe_client_attempts_total", []string{`replaysafe_outcome="deliver"`}, calls},
		{"replaysafe_client_attempts_total", []string{`replaysafe_attempt="resend"`}, 0},
		{"replaysafe_client_hedges_total", nil, hedges},
		{"http_client_request_duration_seconds_count", nil, received},
		{"http_client_request_duration_seconds_count", []string{`replaysafe_attempt="hedge"`}, hedges},
		{"replaysafe_client_resends_total", nil, 0},
		{"replaysafe_client_retries_total", nil, 0},
		{"replaysafe_client_failures_total", nil, 0},
	} {
		if got := sumSamples(t, body, c.name, c.match...); int(got) != c.want {
			t.Errorf("%s %v: %v, want %d", c.name, c.match, got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}
