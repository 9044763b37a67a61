package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// This file serves `replaysafe forward -metrics`: the egress Transport's
// attempts, resends, retries, failures and connections, kept from its
// Observer and written in the Prometheus text exposition format (version
// 0.0.4) by hand, so the command, in the library's module, needs neither
// OpenTelemetry nor a Prometheus library. The names are those of the otel
// module's metrics as an OpenTelemetry Prometheus exporter writes them
// (dots to underscores, the unit as a suffix, _total on counters); see
// docs/observability.md.

// label is one label of a series.
type label struct{ name, value string }

// family is one metric: its series by their labels' text.
type family struct {
	name, help, kind string // kind: counter, gauge or histogram
	buckets          []float64
	series           map[string]*series
}

// series is one labelled series of a family.
type series struct {
	labels string       // `a="x",b="y"`, or ""
	value  float64      // counter or gauge
	counts []uint64     // histogram: per bucket, not cumulative
	sum    float64      // histogram
	count  uint64       // histogram
	gauge  func() int64 // a gauge read when written, or nil
}

// promRegistry holds the families in the order they are written.
type promRegistry struct {
	mu       sync.Mutex
	families []*family
}

func (r *promRegistry) family(name, help, kind string, buckets ...float64) *family {
	f := &family{name: name, help: help, kind: kind, buckets: buckets, series: map[string]*series{}}
	r.families = append(r.families, f)
	return f
}

// labelText renders labels in the exposition format, escaping values.
func labelText(labels []label) string {
	var b strings.Builder
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.name)
		b.WriteString(`="`)
		for _, c := range l.value {
			switch c {
			case '\\':
				b.WriteString(`\\`)
			case '"':
				b.WriteString(`\"`)
			case '\n':
				b.WriteString(`\n`)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	return b.String()
}

// at returns f's series for labels, made on first use; r.mu is held.
func (f *family) at(labels []label) *series {
	key := labelText(labels)
	s := f.series[key]
	if s == nil {
		s = &series{labels: key}
		if f.kind == "histogram" {
			s.counts = make([]uint64, len(f.buckets)+1)
		}
		f.series[key] = s
	}
	return s
}

// add adds v to a counter's or gauge's series.
func (r *promRegistry) add(f *family, v float64, labels ...label) {
	r.mu.Lock()
	f.at(labels).value += v
	r.mu.Unlock()
}

// observe records v in a histogram's series.
func (r *promRegistry) observe(f *family, v float64, labels ...label) {
	r.mu.Lock()
	s := f.at(labels)
	i, _ := slices.BinarySearch(f.buckets, v) // the first bound >= v
	s.counts[i]++
	s.sum += v
	s.count++
	r.mu.Unlock()
}

// gauge makes a series of f read from read whenever it is written.
func (r *promRegistry) gauge(f *family, read func() int64, labels ...label) {
	r.mu.Lock()
	f.at(labels).gauge = read
	r.mu.Unlock()
}

// formatFloat writes a sample value as the exposition format does.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// write writes every family with at least one series, series sorted by
// their labels.
func (r *promRegistry) write(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, f := range r.families {
		if len(f.series) == 0 {
			continue
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := f.series[k]
			switch f.kind {
			case "histogram":
				var cum uint64
				for i, bound := range f.buckets {
					cum += s.counts[i]
					fmt.Fprintf(&b, "%s_bucket{%s} %d\n", f.name, joinLabels(s.labels, `le="`+formatFloat(bound)+`"`), cum)
				}
				fmt.Fprintf(&b, "%s_bucket{%s} %d\n", f.name, joinLabels(s.labels, `le="+Inf"`), s.count)
				fmt.Fprintf(&b, "%s_sum%s %s\n", f.name, braces(s.labels), formatFloat(s.sum))
				fmt.Fprintf(&b, "%s_count%s %d\n", f.name, braces(s.labels), s.count)
			default:
				v := s.value
				if s.gauge != nil {
					v = float64(s.gauge())
				}
				fmt.Fprintf(&b, "%s%s %s\n", f.name, braces(s.labels), formatFloat(v))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func joinLabels(labels, more string) string {
	if labels == "" {
		return more
	}
	return labels + "," + more
}

func braces(labels string) string {
	if labels == "" {
		return ""
	}
	return "{" + labels + "}"
}

// durationBuckets are the OpenTelemetry semantic conventions' advice
// for http.client.request.duration, in seconds.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// egressMetrics counts what a Transport's Observer reports.
type egressMetrics struct {
	reg promRegistry

	duration, attempts, resends, retries, retryDelay, failures, budget *family
	dials, reuses, closes, open, idle                                  *family

	mu     sync.Mutex
	starts map[*http.Request]time.Time // the running attempt's start, per call
	prev   map[*http.Request]fsm.CallDecision
	conns  map[label]int64 // open connections per protocol
}

func newEgressMetrics() *egressMetrics {
	m := &egressMetrics{starts: map[*http.Request]time.Time{}, prev: map[*http.Request]fsm.CallDecision{}, conns: map[label]int64{}}
	r := &m.reg
	m.duration = r.family("http_client_request_duration_seconds", "Duration of HTTP client requests: each wire attempt.", "histogram", durationBuckets...)
	m.attempts = r.family("replaysafe_client_attempts_total", "Wire attempts, by kind and the rule that decided how the call went on.", "counter")
	m.resends = r.family("replaysafe_client_resends_total", "Automatic resends, by the rule that allowed them.", "counter")
	m.retries = r.family("replaysafe_client_retries_total", "Configured retries, by the rule that allowed them.", "counter")
	m.retryDelay = r.family("replaysafe_client_retry_delay_seconds", "The wait before each configured retry.", "histogram", durationBuckets...)
	m.failures = r.family("replaysafe_client_failures_total", "Calls that failed, by the rule that decided.", "counter")
	m.budget = r.family("replaysafe_client_retry_budget_refusals_total", "Retries the route's retry budget refused (RS27).", "counter")
	m.dials = r.family("replaysafe_client_connection_dials_total", "Connections dialed.", "counter")
	m.reuses = r.family("replaysafe_client_connection_reuses_total", "Attempts that took a pooled connection.", "counter")
	m.closes = r.family("replaysafe_client_connection_closes_total", "Connections closed, by reason.", "counter")
	m.open = r.family("replaysafe_client_connections_open", "Connections open now, per protocol.", "gauge")
	m.idle = r.family("replaysafe_client_connections_idle", "Idle pooled connections.", "gauge")
	return m
}

// protoLabel is network_protocol_version: "1.1", "2", "3", or "" when
// the attempt got no connection.
func protoLabel(p fsm.Proto) label {
	v := ""
	switch p {
	case fsm.ProtoH1:
		v = "1.1"
	case fsm.ProtoH2:
		v = "2"
	case fsm.ProtoH3:
		v = "3"
	}
	return label{"network_protocol_version", v}
}

func ruleLabel(r fsm.Rule) label {
	id := r.ID()
	if id == "" || r == fsm.RuleNone {
		id = "none"
	}
	return label{"replaysafe_rule", id}
}

// observer returns next with the metrics' hooks added after its own.
func (m *egressMetrics) observer(next replaysafe.Observer) replaysafe.Observer {
	o := next
	o.OnAttemptStart = func(s replaysafe.AttemptStart) {
		if next.OnAttemptStart != nil {
			next.OnAttemptStart(s)
		}
		m.mu.Lock()
		m.starts[s.Request] = time.Now()
		m.mu.Unlock()
	}
	o.OnAttempt = func(r replaysafe.AttemptReport) {
		if next.OnAttempt != nil {
			next.OnAttempt(r)
		}
		m.attempt(r)
	}
	o.OnError = func(req *http.Request, err error) {
		if next.OnError != nil {
			next.OnError(req, err)
		}
		rule := fsm.RuleNone
		var e *replaysafe.Error
		if errors.As(err, &e) {
			rule = e.Rule
		}
		m.reg.add(m.failures, 1, label{"http_request_method", req.Method}, ruleLabel(rule))
		m.forget(req)
	}
	o.OnConn = func(e replaysafe.ConnEvent) {
		if next.OnConn != nil {
			next.OnConn(e)
		}
		m.conn(e)
	}
	return o
}

func (m *egressMetrics) forget(req *http.Request) {
	m.mu.Lock()
	delete(m.starts, req)
	delete(m.prev, req)
	m.mu.Unlock()
}

func (m *egressMetrics) attempt(r replaysafe.AttemptReport) {
	now := time.Now()
	m.mu.Lock()
	start, ok := m.starts[r.Request]
	prev := m.prev[r.Request]
	m.prev[r.Request] = r.Call
	m.mu.Unlock()
	if r.Call.Action != fsm.ActionResend {
		m.forget(r.Request) // the call's last attempt
	}
	kind := "original"
	switch {
	case r.Number > 1 && prev.Retry:
		kind = "retry"
	case r.Number > 1:
		kind = "resend"
	}
	var proto fsm.Proto
	for _, e := range r.Events {
		if e.Kind == fsm.EventConnAcquired {
			proto = e.Proto
			break
		}
	}
	method := label{"http_request_method", r.Request.Method}
	pl, rule := protoLabel(proto), ruleLabel(r.Call.Rule)
	if ok {
		labels := []label{method, pl, label{"replaysafe_attempt", kind}}
		if r.Status > 0 {
			labels = append(labels, label{"http_response_status_code", strconv.Itoa(r.Status)})
		}
		m.reg.observe(m.duration, now.Sub(start).Seconds(), labels...)
	}
	outcome := "fail"
	switch {
	case r.Call.Action == fsm.ActionResend && r.Call.Retry:
		outcome = "retry"
		m.reg.add(m.retries, 1, method, pl, rule)
		m.reg.observe(m.retryDelay, r.Call.Delay.Seconds(), rule)
	case r.Call.Action == fsm.ActionResend:
		outcome = "resend"
		m.reg.add(m.resends, 1, method, pl, rule)
	case r.Call.Action == fsm.ActionDeliver:
		outcome = "deliver"
	}
	if r.Call.Rule == fsm.RuleRetryBudget {
		m.reg.add(m.budget, 1)
	}
	m.reg.add(m.attempts, 1, method, pl, label{"replaysafe_attempt", kind}, label{"replaysafe_outcome", outcome}, rule)
}

func (m *egressMetrics) conn(e replaysafe.ConnEvent) {
	pl := protoLabel(e.Proto)
	switch e.Kind {
	case replaysafe.ConnDialed:
		m.mu.Lock()
		m.conns[pl]++
		first := m.conns[pl] == 1
		m.mu.Unlock()
		if first {
			m.reg.gauge(m.open, func() int64 { m.mu.Lock(); defer m.mu.Unlock(); return m.conns[pl] }, pl)
		}
		m.reg.add(m.dials, 1, pl)
	case replaysafe.ConnReused:
		m.reg.add(m.reuses, 1, pl)
	case replaysafe.ConnClosed:
		m.mu.Lock()
		m.conns[pl]--
		m.mu.Unlock()
		m.reg.add(m.closes, 1, pl, label{"replaysafe_connection_close_reason", e.Reason.String()})
	}
}

// serveMetrics serves GET /metrics on ln until it is closed.
func serveMetrics(ln net.Listener, m *egressMetrics, idle func() int) *http.Server {
	m.reg.gauge(m.idle, func() int64 { return int64(idle()) })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.reg.write(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv
}
