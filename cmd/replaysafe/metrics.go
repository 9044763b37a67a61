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
// attempts, resends, retries, hedges, failures and connections, kept from its
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

	duration, attempts, resends, retries, hedges, retryDelay, failures, budget *family
	dials, reuses, closes, open, idle                                          *family

	mu    sync.Mutex
	calls map[*http.Request]*callState // the calls with a copy started, until each is over and reported
	conns map[label]int64              // open connections per protocol
}

// callState is what the metrics keep of one call between its hooks. A
// hedged call has several copies in flight at once, and a copy that lost
// to another's response is reported after the call's final decision, so
// the state goes only once the call is over (a final decision, or
// OnError) and every copy that started was reported.
type callState struct {
	copies            []copyStart      // the copies started and not yet reported
	started, reported int              // copies, counted apart from copies: a report without its start still counts
	resent            fsm.CallDecision // the last decision that resent the call (ActionResend): the next copy's cause
	over              bool             // the call delivered or failed
}

// copyStart is when one copy started, and its replaysafe_attempt kind,
// decided then: the decision that made it is the one before it started,
// not the one before it ended.
type copyStart struct {
	number int
	at     time.Time
	kind   string
}

// take removes and returns the start of copy number.
func (st *callState) take(number int) (copyStart, bool) {
	for i, c := range st.copies {
		if c.number == number {
			st.copies = slices.Delete(st.copies, i, i+1)
			return c, true
		}
	}
	return copyStart{}, false
}

// settled reports whether the call is over and no copy of it is still
// to be reported: its state can go.
func (st *callState) settled() bool { return st.over && st.reported >= st.started }

func newEgressMetrics() *egressMetrics {
	m := &egressMetrics{calls: map[*http.Request]*callState{}, conns: map[label]int64{}}
	r := &m.reg
	m.duration = r.family("http_client_request_duration_seconds", "Duration of HTTP client requests: each wire attempt.", "histogram", durationBuckets...)
	m.attempts = r.family("replaysafe_client_attempts_total", "Wire attempts, by kind (original, resend, retry, hedge) and the rule that decided how the call went on.", "counter")
	m.resends = r.family("replaysafe_client_resends_total", "Automatic resends, by the rule that allowed them.", "counter")
	m.retries = r.family("replaysafe_client_retries_total", "Configured retries, by the rule that allowed them.", "counter")
	m.hedges = r.family("replaysafe_client_hedges_total", "Hedges sent: copies started while another copy of the call was in flight (RS29).", "counter")
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
		m.attemptStart(s)
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
		m.over(req)
	}
	o.OnConn = func(e replaysafe.ConnEvent) {
		if next.OnConn != nil {
			next.OnConn(e)
		}
		m.conn(e)
	}
	return o
}

// attemptKind names a copy as replaysafe_attempt does: a hedge, the
// original, or by the decision that resent the call before it started.
func attemptKind(number int, hedge bool, resent fsm.CallDecision) string {
	switch {
	case hedge:
		return "hedge"
	case number <= 1:
		return "original"
	case resent.Retry:
		return "retry"
	}
	return "resend"
}

// outcome names how the call went on after an attempt, as
// replaysafe_outcome does.
func outcome(d fsm.CallDecision) string {
	switch {
	case d.Action == fsm.ActionResend && d.Retry:
		return "retry"
	case d.Action == fsm.ActionResend:
		return "resend"
	case d.Action == fsm.ActionDeliver:
		return "deliver"
	case d.Action == fsm.ActionContinue:
		return "continue" // a hedged copy that failed or lost beside another
	}
	return "fail"
}

// attemptStart notes a copy's start and its kind, and counts a hedge.
func (m *egressMetrics) attemptStart(s replaysafe.AttemptStart) {
	now := time.Now()
	m.mu.Lock()
	st := m.calls[s.Request]
	switch {
	case st == nil:
		// A call's first copy (number 1) starts before any other. A
		// later one with no state is of a call that is over and fully
		// reported: a hedge the driver launched just as another copy
		// won, which will be reported as lost.
		st = &callState{over: s.Number > 1}
		m.calls[s.Request] = st
	case s.Number == 1 && !s.Hedge && st.over:
		// The request reused for a new call (net/http allows it once the
		// body is closed) while a loser of the old one is still to be
		// reported: the new call is not over.
		st.over, st.resent = false, fsm.CallDecision{}
	}
	st.started++
	st.copies = append(st.copies, copyStart{number: s.Number, at: now, kind: attemptKind(s.Number, s.Hedge, st.resent)})
	m.mu.Unlock()
	if s.Hedge {
		m.reg.add(m.hedges, 1, label{"http_request_method", s.Request.Method})
	}
}

// over marks req's call over (OnError): its state goes now, or with the
// report of the last copy still in flight (a hedged try's loser, when a
// later try failed the call).
func (m *egressMetrics) over(req *http.Request) {
	m.mu.Lock()
	if st := m.calls[req]; st != nil {
		st.over = true
		if st.settled() {
			delete(m.calls, req)
		}
	}
	m.mu.Unlock()
}

func (m *egressMetrics) attempt(r replaysafe.AttemptReport) {
	now := time.Now()
	m.mu.Lock()
	start, ok := copyStart{}, false
	kind := attemptKind(r.Number, r.Hedge, fsm.CallDecision{})
	if st := m.calls[r.Request]; st != nil {
		kind = attemptKind(r.Number, r.Hedge, st.resent)
		if start, ok = st.take(r.Number); ok {
			kind = start.kind
		}
		st.reported++
		if r.Call.Action == fsm.ActionResend {
			st.resent = r.Call
		}
		if r.Call.Action == fsm.ActionDeliver || r.Call.Action == fsm.ActionFail {
			st.over = true
		}
		if st.settled() {
			delete(m.calls, r.Request)
		}
	}
	m.mu.Unlock()
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
		m.reg.observe(m.duration, now.Sub(start.at).Seconds(), labels...)
	}
	switch {
	case r.Call.Action == fsm.ActionResend && r.Call.Retry:
		m.reg.add(m.retries, 1, method, pl, rule)
		m.reg.observe(m.retryDelay, r.Call.Delay.Seconds(), rule)
	case r.Call.Action == fsm.ActionResend:
		m.reg.add(m.resends, 1, method, pl, rule)
	}
	if r.Call.Rule == fsm.RuleRetryBudget {
		m.reg.add(m.budget, 1)
	}
	m.reg.add(m.attempts, 1, method, pl, label{"replaysafe_attempt", kind}, label{"replaysafe_outcome", outcome(r.Call)}, rule)
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
