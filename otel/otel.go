package otel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	global "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/replaysafe/replaysafe/otel"

// The attributes this package adds where the semantic conventions have
// none (see the package doc).
const (
	// AttemptKey is the attempt's kind: "original", "resend" (the
	// automatic resend), "retry" (a configured retry) or "hedge" (a copy
	// sent while another copy of the call was in flight, Retry.Hedge).
	AttemptKey = attribute.Key("replaysafe.attempt")
	// RuleKey is the ID of the rule that decided how the call went on
	// after the attempt (on a call, the rule that ended it).
	RuleKey = attribute.Key("replaysafe.rule")
	// ResendRuleKey is the ID of the rule that made a repeated attempt.
	ResendRuleKey = attribute.Key("replaysafe.resend_rule")
	// OutcomeKey is how the call went on after an attempt: "deliver",
	// "fail", "resend", "retry", or "continue" (a copy of a hedged call
	// that failed beside another, or lost to another's response: the
	// call went on with the others).
	OutcomeKey = attribute.Key("replaysafe.outcome")
	// ReusedKey says whether the attempt ran on a pooled connection.
	ReusedKey = attribute.Key("replaysafe.connection.reused")
	// AttemptsKey is a call's number of wire attempts.
	AttemptsKey = attribute.Key("replaysafe.attempts")
	// RetryDelayKey is the wait before a configured retry, in seconds.
	RetryDelayKey = attribute.Key("replaysafe.retry.delay")
	// TraceKey is an attempt in the spec trace format.
	TraceKey = attribute.Key("replaysafe.trace")
	// CloseReasonKey is why a connection closed
	// (replaysafe.ConnCloseReason's name).
	CloseReasonKey = attribute.Key("replaysafe.connection.close_reason")
)

// Options configures an Instrumentation. The zero Options uses the
// global providers.
type Options struct {
	// TracerProvider makes the spans; nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments; nil: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Instrumentation turns a Transport's Observer hooks into spans and
// metrics. Make it with New, put its Observer in the Transport's
// Options, and use one Instrumentation per Transport or share it: it is
// safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	m      instruments

	mu    sync.Mutex
	calls map[*http.Request]*call

	connMu     sync.Mutex
	open       map[connKey]int64 // connections open, per route and protocol
	transports []*replaysafe.Transport
	reg        metric.Registration
}

// connKey is a route and protocol of open connections.
type connKey struct {
	addr  string
	proto fsm.Proto
}

type instruments struct {
	duration      metric.Float64Histogram
	attempts      metric.Int64Counter
	resends       metric.Int64Counter
	retries       metric.Int64Counter
	hedges        metric.Int64Counter
	retryDelay    metric.Float64Histogram
	failures      metric.Int64Counter
	budgetRefusal metric.Int64Counter
	dials         metric.Int64Counter
	reuses        metric.Int64Counter
	closes        metric.Int64Counter
	openConns     metric.Int64ObservableGauge
	idleConns     metric.Int64ObservableGauge
}

// durationBuckets are the semantic conventions' advice for
// http.client.request.duration.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// New makes the tracer and the instruments.
func New(o Options) (*Instrumentation, error) {
	tp, mp := o.TracerProvider, o.MeterProvider
	if tp == nil {
		tp = global.GetTracerProvider()
	}
	if mp == nil {
		mp = global.GetMeterProvider()
	}
	in := &Instrumentation{
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		calls:  make(map[*http.Request]*call),
		open:   make(map[connKey]int64),
	}
	meter := mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var errs []error
	f64h := func(name, desc string, opts ...metric.Float64HistogramOption) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, append(opts, metric.WithDescription(desc), metric.WithUnit("s"))...)
		errs = append(errs, err)
		return h
	}
	i64c := func(name, desc, unit string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	in.m = instruments{
		duration: f64h("http.client.request.duration", "Duration of HTTP client requests: each wire attempt.",
			metric.WithExplicitBucketBoundaries(durationBuckets...)),
		attempts:      i64c("replaysafe.client.attempts", "Wire attempts, by kind (original, resend, retry, hedge) and the rule that decided how the call went on.", "{attempt}"),
		resends:       i64c("replaysafe.client.resends", "Automatic resends, by the rule that allowed them.", "{resend}"),
		retries:       i64c("replaysafe.client.retries", "Configured retries, by the rule that allowed them.", "{retry}"),
		hedges:        i64c("replaysafe.client.hedges", "Hedges sent: copies started while another copy of the call was in flight (RS29).", "{hedge}"),
		retryDelay:    f64h("replaysafe.client.retry.delay", "The wait before each configured retry."),
		failures:      i64c("replaysafe.client.failures", "Calls that failed, by the rule that decided.", "{call}"),
		budgetRefusal: i64c("replaysafe.client.retry_budget.refusals", "Retries the route's retry budget refused (RS27).", "{retry}"),
		dials:         i64c("replaysafe.client.connection.dials", "Connections dialed.", "{connection}"),
		reuses:        i64c("replaysafe.client.connection.reuses", "Attempts that took a pooled connection.", "{connection}"),
		closes:        i64c("replaysafe.client.connection.closes", "Connections closed, by reason.", "{connection}"),
	}
	var err error
	in.m.openConns, err = meter.Int64ObservableGauge("replaysafe.client.connections.open",
		metric.WithDescription("Connections open now, per route and protocol."), metric.WithUnit("{connection}"))
	errs = append(errs, err)
	in.m.idleConns, err = meter.Int64ObservableGauge("replaysafe.client.connections.idle",
		metric.WithDescription("Idle pooled connections of the Transports given to ObserveTransport."), metric.WithUnit("{connection}"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	in.reg, err = meter.RegisterCallback(in.observeConns, in.m.openConns, in.m.idleConns)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// ObserveTransport adds tr's idle connections (Transport.IdleConns) to
// replaysafe.client.connections.idle. Call it once per Transport that
// runs on the Instrumentation's Observer.
func (in *Instrumentation) ObserveTransport(tr *replaysafe.Transport) {
	in.connMu.Lock()
	in.transports = append(in.transports, tr)
	in.connMu.Unlock()
}

// Close unregisters the observable gauges' callback: the Instrumentation
// then reports them no more. Its Observer hooks go on working.
func (in *Instrumentation) Close() error { return in.reg.Unregister() }

// observeConns reports the connection gauges.
func (in *Instrumentation) observeConns(_ context.Context, o metric.Observer) error {
	in.connMu.Lock()
	open := make(map[connKey]int64, len(in.open))
	for k, n := range in.open {
		open[k] = n
	}
	trs := append([]*replaysafe.Transport(nil), in.transports...)
	in.connMu.Unlock()
	for k, n := range open {
		o.ObserveInt64(in.m.openConns, n, metric.WithAttributes(connAttrs(k.addr, k.proto)...))
	}
	if len(trs) > 0 {
		idle := 0
		for _, tr := range trs {
			idle += tr.IdleConns()
		}
		o.ObserveInt64(in.m.idleConns, int64(idle))
	}
	return nil
}

// connAttrs are a connection's server.address, server.port and
// network.protocol.version.
func connAttrs(addr string, proto fsm.Proto) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if v := protoVersion(proto); v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	return attrs
}

// conn counts a connection event.
func (in *Instrumentation) conn(e replaysafe.ConnEvent) {
	ctx := context.Background()
	attrs := connAttrs(e.Addr, e.Proto)
	k := connKey{e.Addr, e.Proto}
	switch e.Kind {
	case replaysafe.ConnDialed:
		in.connMu.Lock()
		in.open[k]++
		in.connMu.Unlock()
		in.m.dials.Add(ctx, 1, metric.WithAttributes(attrs...))
	case replaysafe.ConnReused:
		in.m.reuses.Add(ctx, 1, metric.WithAttributes(attrs...))
	case replaysafe.ConnClosed:
		in.connMu.Lock()
		// A route's entry stays at zero rather than going: the gauge
		// then reports its return to zero.
		in.open[k]--
		in.connMu.Unlock()
		in.m.closes.Add(ctx, 1, metric.WithAttributes(append(attrs, CloseReasonKey.String(e.Reason.String()))...))
	}
}

// attemptStart notes when a copy of a call started, and its kind, and
// counts a hedge.
func (in *Instrumentation) attemptStart(s replaysafe.AttemptStart) {
	c := in.lookup(s.Request)
	if c == nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return // its call span ended as this copy started (see call)
	}
	kind, cause := attemptKind(s.Number, s.Hedge, c.resent)
	c.started++
	c.copies = append(c.copies, copyStart{number: s.Number, at: now, kind: kind, cause: cause})
	c.mu.Unlock()
	if s.Hedge {
		in.m.hedges.Add(c.ctx, 1, metric.WithAttributes(c.short...))
	}
}

// call is what is known of one call between its hooks.
//
// A hedged call has several copies in flight at once, and a copy that
// lost to another's response may be reported after the winner's final
// report, even after OnResponse. The call span ends, and the call is
// forgotten, once the call is over (delivered: its final report and
// OnResponse; failed: OnError) and every copy that started was reported,
// so that each copy's span is a child of a call span that ends after it.
// A copy the Transport starts after that (a hedge launched just as
// another copy won) gets no span and is not counted.
type call struct {
	ctx   context.Context // the call span's
	span  trace.Span
	route []attribute.KeyValue // method, url.full, server.address, server.port
	short []attribute.KeyValue // method, server.address: the metrics' route

	mu                sync.Mutex
	copies            []copyStart      // the copies started and not yet reported
	started, reported int              // copies, counted apart from copies: a report without its start still counts
	nextStart         time.Time        // an attempt's start when OnAttemptStart was not seen: the previous one's end and wait
	resent            fsm.CallDecision // the last decision that resent the call (ActionResend): the next copy's cause
	attempts          int
	status            int      // the delivered response's status (OnResponse)
	final             bool     // the attempt that ended the call was reported (deliver or fail)
	rule              fsm.Rule // the rule that ended the call
	responded         bool     // OnResponse ran
	failed            bool     // OnError ran
	ended             bool     // the call span ended
}

// copyStart is when one copy of a call started, its replaysafe.attempt
// kind and the rule that made it, decided then: the decision that made
// a copy is the one before it started, not the one before it ended.
type copyStart struct {
	number int
	at     time.Time
	kind   string
	cause  fsm.Rule
}

// take removes and returns the start of copy number; c.mu is held.
func (c *call) take(number int) (copyStart, bool) {
	for i, s := range c.copies {
		if s.number == number {
			c.copies = slices.Delete(c.copies, i, i+1)
			return s, true
		}
	}
	return copyStart{}, false
}

// overLocked reports whether the call span is to end now: the call is
// over and no copy of it is still to be reported. It marks it ended, so
// that only one hook ends it; c.mu is held.
func (c *call) overLocked() bool {
	if c.ended || c.reported < c.started || !(c.failed || c.final && c.responded) {
		return false
	}
	c.ended = true
	return true
}

// Observer returns next with the Instrumentation's hooks added: each of
// them calls next's hook of the same name first, when set.
func (in *Instrumentation) Observer(next replaysafe.Observer) replaysafe.Observer {
	o := next
	o.OnRequest = func(req *http.Request) {
		if next.OnRequest != nil {
			next.OnRequest(req)
		}
		in.request(req)
	}
	o.OnAttempt = func(r replaysafe.AttemptReport) {
		if next.OnAttempt != nil {
			next.OnAttempt(r)
		}
		in.attempt(r)
	}
	o.OnResponse = func(req *http.Request, resp *http.Response) {
		if next.OnResponse != nil {
			next.OnResponse(req, resp)
		}
		in.response(req, resp)
	}
	o.OnError = func(req *http.Request, err error) {
		if next.OnError != nil {
			next.OnError(req, err)
		}
		in.fail(req, err)
	}
	o.OnAttemptStart = func(s replaysafe.AttemptStart) {
		if next.OnAttemptStart != nil {
			next.OnAttemptStart(s)
		}
		in.attemptStart(s)
	}
	o.OnConn = func(e replaysafe.ConnEvent) {
		if next.OnConn != nil {
			next.OnConn(e)
		}
		in.conn(e)
	}
	return o
}

func (in *Instrumentation) request(req *http.Request) {
	route := routeAttrs(req)
	now := time.Now()
	ctx, span := in.tracer.Start(req.Context(), "replaysafe "+req.Method,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(now), trace.WithAttributes(route...))
	c := &call{ctx: ctx, span: span, route: route, short: route[:1:1], nextStart: now}
	if len(route) > 2 {
		c.short = []attribute.KeyValue{route[0], route[2]}
	}
	in.mu.Lock()
	in.calls[req] = c
	in.mu.Unlock()
}

func (in *Instrumentation) lookup(req *http.Request) *call {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.calls[req]
}

func (in *Instrumentation) forget(req *http.Request, c *call) {
	in.mu.Lock()
	if in.calls[req] == c {
		delete(in.calls, req)
	}
	in.mu.Unlock()
}

// attemptKind names a copy as replaysafe.attempt does, and returns the
// rule that made it: a hedge (RS29), the original, or by the decision
// that resent the call before the copy started.
func attemptKind(number int, hedge bool, resent fsm.CallDecision) (string, fsm.Rule) {
	switch {
	case hedge:
		return "hedge", fsm.RuleHedge
	case number <= 1:
		return "original", fsm.RuleNone
	case resent.Retry:
		return "retry", resent.Rule
	}
	return "resend", resent.Rule
}

// outcome names how the call went on after an attempt.
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

// protoVersion is network.protocol.version of an attempt's protocol, or
// "" when it got no connection.
func protoVersion(p fsm.Proto) string {
	switch p {
	case fsm.ProtoH1:
		return "1.1"
	case fsm.ProtoH2:
		return "2"
	case fsm.ProtoH3:
		return "3"
	}
	return ""
}

// attemptProto is the protocol of the connection the attempt acquired.
func attemptProto(events []fsm.Event) fsm.Proto {
	for _, e := range events {
		if e.Kind == fsm.EventConnAcquired {
			return e.Proto
		}
	}
	return fsm.ProtoUnknown
}

func (in *Instrumentation) attempt(r replaysafe.AttemptReport) {
	c := in.lookup(r.Request)
	if c == nil {
		return // a call that began before the hooks were installed
	}
	end := time.Now()
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return // a copy that started as its call span ended (see call)
	}
	s, ok := c.take(r.Number)
	if !ok {
		s.at = c.nextStart
		s.kind, s.cause = attemptKind(r.Number, r.Hedge, c.resent)
	}
	status := r.Status
	c.attempts = max(c.attempts, r.Number)
	c.nextStart = end.Add(max(r.Call.Delay, 0))
	if r.Call.Action == fsm.ActionResend {
		c.resent = r.Call
	}
	if r.Call.Action == fsm.ActionDeliver || r.Call.Action == fsm.ActionFail {
		c.final, c.rule = true, r.Call.Rule
	}
	if status == 0 && r.Call.Action == fsm.ActionDeliver && c.responded {
		status = c.status
	}
	c.mu.Unlock()

	start, kind := s.at, s.kind
	proto := protoVersion(attemptProto(r.Events))
	attrs := make([]attribute.KeyValue, 0, len(c.route)+10)
	attrs = append(attrs, c.route...)
	if proto != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(proto))
	}
	attrs = append(attrs, AttemptKey.String(kind), RuleKey.String(r.Call.Rule.ID()), ReusedKey.Bool(r.Reused))
	if r.Number > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(r.Number-1), ResendRuleKey.String(s.cause.ID()))
	}
	errType := ""
	switch {
	case r.Err != nil:
		errType = r.Decision.Rule.String()
	case status >= 400:
		errType = strconv.Itoa(status)
	}
	if status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	_, span := in.tracer.Start(c.ctx, r.Request.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if r.Err != nil {
		span.SetStatus(codes.Error, r.Err.Error())
	} else if errType != "" {
		span.SetStatus(codes.Error, "")
	}
	if r.Call.Action != fsm.ActionDeliver || r.Number > 1 {
		span.AddEvent("replaysafe.trace", trace.WithTimestamp(end), trace.WithAttributes(TraceKey.String(r.Trace)))
	}
	span.End(trace.WithTimestamp(end))

	ctx := c.ctx
	// Metrics.
	d := []attribute.KeyValue{c.route[0]}
	if len(c.route) > 2 {
		d = append(d, c.route[2:]...)
	}
	if proto != "" {
		d = append(d, semconv.NetworkProtocolVersion(proto))
	}
	if status > 0 {
		d = append(d, semconv.HTTPResponseStatusCode(status))
	}
	if errType != "" {
		d = append(d, semconv.ErrorTypeKey.String(errType))
	}
	d = append(d, AttemptKey.String(kind))
	in.m.duration.Record(ctx, end.Sub(start).Seconds(), metric.WithAttributes(d...))

	base := append([]attribute.KeyValue(nil), c.short...)
	if proto != "" {
		base = append(base, semconv.NetworkProtocolVersion(proto))
	}
	rule := RuleKey.String(r.Call.Rule.ID())
	in.m.attempts.Add(ctx, 1, metric.WithAttributes(append(base, AttemptKey.String(kind), rule, OutcomeKey.String(outcome(r.Call)))...))
	switch {
	case r.Call.Action == fsm.ActionResend && r.Call.Retry:
		in.m.retries.Add(ctx, 1, metric.WithAttributes(append(base, rule)...))
		in.m.retryDelay.Record(ctx, r.Call.Delay.Seconds(), metric.WithAttributes(c.short[len(c.short)-1], rule))
		if r.Call.Delay > 0 {
			c.span.AddEvent("replaysafe.retry_wait", trace.WithTimestamp(end),
				trace.WithAttributes(RetryDelayKey.Float64(r.Call.Delay.Seconds()), rule))
		}
	case r.Call.Action == fsm.ActionResend:
		in.m.resends.Add(ctx, 1, metric.WithAttributes(append(base, rule)...))
	case r.Call.Rule == fsm.RuleRetryBudget:
		in.m.budgetRefusal.Add(ctx, 1, metric.WithAttributes(c.short[len(c.short)-1]))
	}
	// The copy counts as reported once its span ended: the hook that
	// ends the call span, this one or another copy's, does so after it.
	c.mu.Lock()
	c.reported++
	done := c.overLocked()
	c.mu.Unlock()
	if done {
		in.endCall(r.Request, c)
	}
}

func (in *Instrumentation) response(req *http.Request, resp *http.Response) {
	c := in.lookup(req)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.status = resp.StatusCode
	c.responded = true
	done := c.overLocked()
	c.mu.Unlock()
	c.span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		c.span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		c.span.SetStatus(codes.Error, "")
	}
	if done {
		in.endCall(req, c)
	}
}

func (in *Instrumentation) fail(req *http.Request, err error) {
	c := in.lookup(req)
	if c == nil {
		return
	}
	rule := fsm.RuleNone
	var e *replaysafe.Error
	if errors.As(err, &e) {
		rule = e.Rule
	}
	errType := rule.String()
	if e == nil {
		errType = "_OTHER"
	}
	attrs := append([]attribute.KeyValue(nil), c.short...)
	attrs = append(attrs, RuleKey.String(ruleID(rule)), semconv.ErrorTypeKey.String(errType))
	in.m.failures.Add(c.ctx, 1, metric.WithAttributes(attrs...))
	c.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	c.span.SetStatus(codes.Error, err.Error())
	// A copy of an earlier try (a hedge's loser) may still be in flight:
	// the span then ends with its report.
	c.mu.Lock()
	c.failed, c.rule = true, rule
	done := c.overLocked()
	c.mu.Unlock()
	if done {
		in.endCall(req, c)
	}
}

// ruleID is r's ID, or "none" for RuleNone and an invalid rule.
func ruleID(r fsm.Rule) string {
	if id := r.ID(); id != "" && r != fsm.RuleNone {
		return id
	}
	return "none"
}

// endCall ends the call span of c, which overLocked said is over: now,
// after every span of its copies.
func (in *Instrumentation) endCall(req *http.Request, c *call) {
	in.forget(req, c)
	c.mu.Lock()
	n, rule := c.attempts, c.rule
	c.mu.Unlock()
	c.span.SetAttributes(AttemptsKey.Int(n), RuleKey.String(ruleID(rule)))
	c.span.End()
}

// routeAttrs returns http.request.method, url.full and, when the URL
// names them, server.address and server.port.
func routeAttrs(req *http.Request) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method(req.Method))}
	u := req.URL
	if u == nil {
		return attrs
	}
	attrs = append(attrs, semconv.URLFull(redacted(u)))
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return attrs
	}
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}

// method is http.request.method: the known methods as they are, "GET"
// for an empty one (net/http's meaning), "_OTHER" for the rest.
func method(m string) string {
	switch m {
	case "":
		return http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// redacted is u as url.full: its user information replaced.
func redacted(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	v := *u
	v.User = url.UserPassword("REDACTED", "REDACTED")
	return v.String()
}
