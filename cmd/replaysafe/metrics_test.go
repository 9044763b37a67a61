package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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
