package otel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	rsotel "github.com/replaysafe/replaysafe/otel"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// recorded is an Instrumentation on an in-memory span recorder and a
// manual metric reader.
type recorded struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	in     *rsotel.Instrumentation
}

func record(t *testing.T) *recorded {
	t.Helper()
	r := &recorded{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	in, err := rsotel.New(rsotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	r.in = in
	return r
}

// transport returns a Transport observed by r, closed at the end.
func (r *recorded) transport(t *testing.T, o replaysafe.Options) *replaysafe.Transport {
	t.Helper()
	o.Observer = r.in.Observer(o.Observer)
	tr := replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// ended returns the ended spans whose url.full ends in path, calls
// (kind internal) and attempts (kind client) apart, in the order they
// ended.
func (r *recorded) ended(path string) (calls, attempts []sdktrace.ReadOnlySpan) {
	for _, s := range r.spans.Ended() {
		if !strings.HasSuffix(attr(s.Attributes(), "url.full").AsString(), path) {
			continue
		}
		if strings.HasPrefix(s.Name(), "replaysafe ") {
			calls = append(calls, s)
		} else {
			attempts = append(attempts, s)
		}
	}
	return calls, attempts
}

func attr(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// wantAttrs checks the span's attributes; a value of nil wants the
// attribute absent.
func wantAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got := attr(s.Attributes(), k)
		if w == nil {
			if got.Type() != attribute.EMPTY {
				t.Errorf("%s: %s = %v, want it absent", what, k, got.String())
			}
			continue
		}
		if got.AsInterface() != w {
			t.Errorf("%s: %s = %v (%T), want %v", what, k, got.AsInterface(), got.AsInterface(), w)
		}
	}
}

// sum adds up the data points of the named counter (or the counts of
// the named histogram) whose attributes include every one of match.
func (r *recorded) sum(t *testing.T, name string, match ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	has := func(set attribute.Set) bool {
		for _, kv := range match {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						n += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						n += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						n += int64(p.Count)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return n
}

func wantSum(t *testing.T, r *recorded, want int64, name string, match ...attribute.KeyValue) {
	t.Helper()
	if got := r.sum(t, name, match...); got != want {
		t.Errorf("%s %v = %d, want %d", name, match, got, want)
	}
}

func start(t *testing.T, cfg replaysafetest.Config) *replaysafetest.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := replaysafetest.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func startH2(t *testing.T, cfg h2server.Config) *h2server.Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := h2server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func roundTrip(t *testing.T, tr http.RoundTripper, method, url, body string) (int, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return resp.StatusCode, err
}

// copies counts the complete requests for path the server received.
func copies(s *replaysafetest.Server, path string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Target == path {
			n++
		}
	}
	return n
}

// crossing scripts a close crossing the second request on connection 0,
// then a connection that answers.
func crossing() replaysafetest.Config {
	return replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}}
}

var (
	resend   = attribute.String("replaysafe.attempt", "resend")
	retry    = attribute.String("replaysafe.attempt", "retry")
	original = attribute.String("replaysafe.attempt", "original")
	hedge    = attribute.String("replaysafe.attempt", "hedge")
)

func rule(r fsm.Rule) attribute.KeyValue { return attribute.String("replaysafe.rule", r.ID()) }

// TestStaleConnectionResend: a GET crossing the close of its pooled
// connection is resent (RS20) on a new one: two attempt spans under one
// call span, the second with http.request.resend_count=1, and the
// counters match the copies the origin received.
func TestStaleConnectionResend(t *testing.T) {
	s := start(t, crossing())
	r := record(t)
	tr := r.transport(t, replaysafe.Options{})
	for _, path := range []string{"/warm", "/target"} {
		if code, err := roundTrip(t, tr, "GET", s.URL()+path, ""); err != nil || code != 200 {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
	}
	if n := copies(s, "/target"); n != 2 {
		t.Fatalf("the origin received %d copies of /target, want 2", n)
	}
	calls, attempts := r.ended("/target")
	if len(calls) != 1 || len(attempts) != 2 {
		t.Fatalf("%d call spans and %d attempt spans, want 1 and 2", len(calls), len(attempts))
	}
	call := calls[0]
	for i, a := range attempts {
		if a.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("attempt %d is not a child of the call span", i+1)
		}
		if a.StartTime().Before(call.StartTime()) || a.EndTime().After(call.EndTime()) {
			t.Errorf("attempt %d [%v, %v] outside the call [%v, %v]", i+1, a.StartTime(), a.EndTime(), call.StartTime(), call.EndTime())
		}
	}
	wantAttrs(t, "attempt 1", attempts[0], map[string]any{
		"http.request.method": "GET", "server.address": "127.0.0.1", "network.protocol.version": "1.1",
		"replaysafe.attempt": "original", "replaysafe.rule": "RS20", "replaysafe.connection.reused": true,
		"http.request.resend_count": nil, "error.type": "ambiguous-idempotent-resend", "http.response.status_code": nil,
	})
	wantAttrs(t, "attempt 2", attempts[1], map[string]any{
		"http.request.resend_count": int64(1), "replaysafe.attempt": "resend", "replaysafe.resend_rule": "RS20",
		"replaysafe.rule": "RS02", "replaysafe.connection.reused": false, "http.response.status_code": int64(200),
		"error.type": nil, "network.protocol.version": "1.1",
	})
	wantAttrs(t, "call", call, map[string]any{"replaysafe.attempts": int64(2), "replaysafe.rule": "RS02",
		"http.response.status_code": int64(200)})
	if attempts[0].Status().Code != codes.Error || call.Status().Code == codes.Error {
		t.Errorf("statuses: attempt 1 %v, call %v; want the attempt's error and the call's success", attempts[0].Status(), call.Status())
	}
	ev := attempts[0].Events()
	if len(ev) != 1 || ev[0].Name != "replaysafe.trace" || !strings.Contains(attr(ev[0].Attributes, "replaysafe.trace").AsString(), "conn-acquired") {
		t.Errorf("attempt 1 events %+v, want its trace", ev)
	}

	wantSum(t, r, 1, "replaysafe.client.resends", rule(fsm.RuleAmbiguousIdempotentResend))
	wantSum(t, r, 1, "replaysafe.client.resends")
	wantSum(t, r, 0, "replaysafe.client.retries")
	wantSum(t, r, 3, "replaysafe.client.attempts") // /warm and the two of /target
	wantSum(t, r, 1, "replaysafe.client.attempts", resend, rule(fsm.RuleDeliverFinalResponse))
	wantSum(t, r, 3, "http.client.request.duration")
	wantSum(t, r, 0, "replaysafe.client.failures")
}

// TestRefusedStreamResend: an HTTP/2 stream refused with REFUSED_STREAM
// is resent (RS13) on the same connection, a POST included.
func TestRefusedStreamResend(t *testing.T) {
	s := startH2(t, h2server.Config{Conns: []h2server.ConnScript{{Streams: []h2server.Action{h2server.Refuse()}}}})
	r := record(t)
	tr := r.transport(t, replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig()})
	if code, err := roundTrip(t, tr, "POST", s.URL()+"/p", "payload"); err != nil || code != 200 {
		t.Fatalf("POST: %d %v", code, err)
	}
	_, attempts := r.ended("/p")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	wantAttrs(t, "attempt 1", attempts[0], map[string]any{"network.protocol.version": "2", "replaysafe.rule": "RS13",
		"error.type": "evidence-refused-stream", "replaysafe.attempt": "original"})
	wantAttrs(t, "attempt 2", attempts[1], map[string]any{"network.protocol.version": "2", "http.request.resend_count": int64(1),
		"replaysafe.resend_rule": "RS13", "replaysafe.attempt": "resend",
		"http.response.status_code": int64(200)})
	wantSum(t, r, 1, "replaysafe.client.resends", rule(fsm.RuleEvidenceRefusedStream), attribute.String("network.protocol.version", "2"))
	wantSum(t, r, 2, "replaysafe.client.attempts", attribute.String("http.request.method", "POST"))
}

// TestRetryAfter503: a configured retry after a 503 asking for a second
// in Retry-After: the retry's span starts after the wait, the call span
// has the wait as an event, and the retry counters count it.
func TestRetryAfter503(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
		replaysafetest.Respond(503, "later").WithHeader("Retry-After", "1"), replaysafetest.OK())}})
	r := record(t)
	tr := r.transport(t, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}})
	if code, err := roundTrip(t, tr, "GET", s.URL()+"/r", ""); err != nil || code != 200 {
		t.Fatalf("GET: %d %v", code, err)
	}
	if n := copies(s, "/r"); n != 2 {
		t.Fatalf("the origin received %d copies, want 2", n)
	}
	calls, attempts := r.ended("/r")
	if len(calls) != 1 || len(attempts) != 2 {
		t.Fatalf("%d call spans and %d attempt spans, want 1 and 2", len(calls), len(attempts))
	}
	wantAttrs(t, "attempt 1", attempts[0], map[string]any{"replaysafe.rule": "RS23", "replaysafe.attempt": "original",
		"http.response.status_code": int64(503), "error.type": "503"})
	wantAttrs(t, "attempt 2", attempts[1], map[string]any{"replaysafe.attempt": "retry", "http.request.resend_count": int64(1),
		"replaysafe.resend_rule": "RS23", "http.response.status_code": int64(200)})
	if gap := attempts[1].StartTime().Sub(attempts[0].EndTime()); gap < time.Second {
		t.Errorf("the retry's span starts %v after the first attempt's end, want the 1s wait", gap)
	}
	var wait []attribute.KeyValue
	for _, e := range calls[0].Events() {
		if e.Name == "replaysafe.retry_wait" {
			wait = e.Attributes
		}
	}
	if attr(wait, "replaysafe.retry.delay").AsFloat64() != 1 || attr(wait, "replaysafe.rule").AsString() != "RS23" {
		t.Errorf("call span events %+v, want a retry wait of 1s by RS23", calls[0].Events())
	}
	wantSum(t, r, 1, "replaysafe.client.retries", rule(fsm.RuleRetryStatus))
	wantSum(t, r, 0, "replaysafe.client.resends")
	wantSum(t, r, 1, "replaysafe.client.retry.delay", rule(fsm.RuleRetryStatus))
	wantSum(t, r, 1, "http.client.request.duration", attribute.Int("http.response.status_code", 503), retry.Key.String("original"))
	wantSum(t, r, 1, "replaysafe.client.attempts", retry, rule(fsm.RuleDeliverFinalResponse))
	wantSum(t, r, 1, "replaysafe.client.attempts", original, rule(fsm.RuleRetryStatus), attribute.String("replaysafe.outcome", "retry"))
}

// TestRefusedPOST: a POST crossing the close of its pooled connection may
// have been processed, so it is not resent (RS18): one attempt span, a
// failed call, and the failure counted by its rule.
func TestRefusedPOST(t *testing.T) {
	s := start(t, crossing())
	r := record(t)
	tr := r.transport(t, replaysafe.Options{})
	if code, err := roundTrip(t, tr, "GET", s.URL()+"/warm", ""); err != nil || code != 200 {
		t.Fatalf("GET: %d %v", code, err)
	}
	_, err := roundTrip(t, tr, "POST", s.URL()+"/pay", "pay 10")
	var e *replaysafe.Error
	if !errors.As(err, &e) || e.Rule != fsm.RuleAmbiguousNotIdempotent {
		t.Fatalf("POST: %v, want RS18", err)
	}
	if n := copies(s, "/pay"); n != 1 {
		t.Fatalf("the origin received %d copies, want 1", n)
	}
	calls, attempts := r.ended("/pay")
	if len(calls) != 1 || len(attempts) != 1 {
		t.Fatalf("%d call spans and %d attempt spans, want 1 and 1", len(calls), len(attempts))
	}
	wantAttrs(t, "attempt", attempts[0], map[string]any{"replaysafe.rule": "RS18", "error.type": "ambiguous-not-idempotent",
		"replaysafe.connection.reused": true, "http.request.resend_count": nil})
	wantAttrs(t, "call", calls[0], map[string]any{"replaysafe.rule": "RS18", "error.type": "ambiguous-not-idempotent", "replaysafe.attempts": int64(1)})
	if calls[0].Status().Code != codes.Error {
		t.Errorf("call status %v, want an error", calls[0].Status())
	}
	wantSum(t, r, 1, "replaysafe.client.failures", rule(fsm.RuleAmbiguousNotIdempotent), attribute.String("http.request.method", "POST"))
	wantSum(t, r, 0, "replaysafe.client.resends")
	wantSum(t, r, 1, "replaysafe.client.attempts", rule(fsm.RuleAmbiguousNotIdempotent), attribute.String("replaysafe.outcome", "fail"))
}

// TestRetryBudgetRefusal: a route whose retry budget is empty (no floor,
// a tiny ratio) delivers the 503 instead of retrying it (RS27), and the
// refusal is counted.
func TestRetryBudgetRefusal(t *testing.T) {
	s := start(t, replaysafetest.Config{Default: &replaysafetest.ConnScript{Default: ptr(replaysafetest.Respond(503, "down"))}})
	r := record(t)
	tr := r.transport(t, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond,
		Budget: replaysafe.RetryBudget{Ratio: 0.0001, MinPerSecond: -1, Window: 10 * time.Second}}})
	if code, err := roundTrip(t, tr, "GET", s.URL()+"/b", ""); err != nil || code != 503 {
		t.Fatalf("GET: %d %v, want the 503 delivered", code, err)
	}
	if n := copies(s, "/b"); n != 1 {
		t.Fatalf("the origin received %d copies, want 1", n)
	}
	calls, attempts := r.ended("/b")
	if len(calls) != 1 || len(attempts) != 1 {
		t.Fatalf("%d call spans and %d attempt spans, want 1 and 1", len(calls), len(attempts))
	}
	wantAttrs(t, "attempt", attempts[0], map[string]any{"replaysafe.rule": "RS27", "http.response.status_code": int64(503), "error.type": "503"})
	wantAttrs(t, "call", calls[0], map[string]any{"replaysafe.rule": "RS27", "http.response.status_code": int64(503)})
	wantSum(t, r, 1, "replaysafe.client.retry_budget.refusals", attribute.String("server.address", "127.0.0.1"))
	wantSum(t, r, 0, "replaysafe.client.retries")
	wantSum(t, r, 0, "replaysafe.client.failures")
}

func ptr[T any](v T) *T { return &v }

// TestConnectionGauges: the connections dialed, reused and closed are
// counted, and the open and idle gauges return to zero after
// CloseIdleConnections, over HTTP/1.1 (with a stale connection
// discarded) and HTTP/2.
func TestConnectionGauges(t *testing.T) {
	addr := func(a string) attribute.KeyValue { return attribute.String("server.address", a) }
	closes := "replaysafe.client.connection.closes"
	reason := func(r string) attribute.KeyValue { return attribute.String("replaysafe.connection.close_reason", r) }
	waitOpen := func(t *testing.T, r *recorded, want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for r.sum(t, "replaysafe.client.connections.open") != want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // HTTP/2 closes in the background
		}
		wantSum(t, r, want, "replaysafe.client.connections.open")
	}
	t.Run("h1", func(t *testing.T) {
		s := start(t, crossing())
		r := record(t)
		tr := r.transport(t, replaysafe.Options{})
		r.in.ObserveTransport(tr)
		for _, path := range []string{"/warm", "/target"} {
			if code, err := roundTrip(t, tr, "GET", s.URL()+path, ""); err != nil || code != 200 {
				t.Fatalf("GET %s: %d %v", path, code, err)
			}
		}
		wantSum(t, r, 2, "replaysafe.client.connection.dials", addr("127.0.0.1"), attribute.String("network.protocol.version", "1.1"))
		wantSum(t, r, 1, "replaysafe.client.connection.reuses")
		wantSum(t, r, 1, closes, reason("discarded"))
		wantSum(t, r, 1, "replaysafe.client.connections.open", addr("127.0.0.1"))
		wantSum(t, r, 1, "replaysafe.client.connections.idle")
		tr.CloseIdleConnections()
		waitOpen(t, r, 0)
		wantSum(t, r, 0, "replaysafe.client.connections.idle")
		wantSum(t, r, 1, closes, reason("idle"))
		wantSum(t, r, 2, closes)
	})
	t.Run("h2", func(t *testing.T) {
		s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
		r := record(t)
		tr := r.transport(t, replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig()})
		r.in.ObserveTransport(tr)
		for range 3 {
			if code, err := roundTrip(t, tr, "GET", s.URL()+"/x", ""); err != nil || code != 200 {
				t.Fatalf("GET: %d %v", code, err)
			}
		}
		wantSum(t, r, 1, "replaysafe.client.connection.dials", attribute.String("network.protocol.version", "2"))
		wantSum(t, r, 2, "replaysafe.client.connection.reuses")
		wantSum(t, r, 1, "replaysafe.client.connections.open", attribute.String("network.protocol.version", "2"))
		tr.CloseIdleConnections()
		waitOpen(t, r, 0)
		wantSum(t, r, 1, closes, reason("idle"))
		wantSum(t, r, 0, "replaysafe.client.connections.idle")
	})
}

// TestCallSpanUnderCallerSpan: the call span is a child of the span in
// the request's context (an otelhttp span around the Transport, say),
// and concurrent calls on one Transport each get their own call span
// with their attempts under it.
func TestCallSpanUnderCallerSpan(t *testing.T) {
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
	r := record(t)
	tr := r.transport(t, replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig()})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	ctx, parent := tp.Tracer("caller").Start(t.Context(), "caller")
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/c%d", s.URL(), i), nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := tr.RoundTrip(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				err = resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	parent.End()
	for i := range n {
		calls, attempts := r.ended(fmt.Sprintf("/c%d", i))
		if len(calls) != 1 || len(attempts) != 1 {
			t.Fatalf("/c%d: %d call spans, %d attempt spans; want 1 and 1", i, len(calls), len(attempts))
		}
		if calls[0].Parent().SpanID() != parent.SpanContext().SpanID() || calls[0].SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("/c%d: the call span is not a child of the caller's span", i)
		}
		if attempts[0].Parent().SpanID() != calls[0].SpanContext().SpanID() {
			t.Errorf("/c%d: the attempt span is not a child of its call span", i)
		}
	}
	wantSum(t, r, n, "replaysafe.client.attempts", original, rule(fsm.RuleDeliverFinalResponse), attribute.String("network.protocol.version", "2"))
}

// hook is one Observer call of a scripted hedged call: a copy's start,
// its report with call, OnResponse or OnError.
type hook struct {
	what   byte // 's' start, 'r' report, 'R' OnResponse, 'E' OnError
	number int
	hedge  bool
	call   fsm.CallDecision
}

var (
	delivered   = fsm.CallDecision{Action: fsm.ActionDeliver, Rule: fsm.RuleDeliverFinalResponse}
	besideOther = fsm.CallDecision{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeCopyFailed} // failed beside, or lost to, another copy
	retried503  = fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleRetryStatus, Retry: true}
	failed      = fsm.CallDecision{Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousNotIdempotent}
)

func started(n int, hedge bool) hook { return hook{what: 's', number: n, hedge: hedge} }

func reported(n int, hedge bool, cd fsm.CallDecision) hook {
	return hook{what: 'r', number: n, hedge: hedge, call: cd}
}

// TestHedgedCallSpans: the hooks of a hedged call, in each order they
// can come (internal/driver/hedge.go: a copy failing beside another is
// reported before the call's end, a loser after the winner's final
// report and after OnResponse, a loser of a try that a later try's
// failure ended after OnError): the call span ends at the last hook and
// not before, after a span of each copy under it; each copy's span has
// its own kind (a hedge "hedge", made by RS29) and outcome ("continue"
// for a copy beside another); each copy has one duration, the hedge is
// counted, no resend is; and the call is forgotten at its end: a further
// report of its request records nothing.
func TestHedgedCallSpans(t *testing.T) {
	for _, c := range []struct {
		name     string
		hooks    []hook
		kinds    map[int]string // by attempt number
		outcomes map[string]int64
		rule     fsm.Rule // the call span's
	}{
		{"the hedge fails, the original delivers", []hook{
			started(1, false), started(2, true), reported(2, true, besideOther), {what: 'R'}, reported(1, false, delivered),
		}, map[int]string{1: "original", 2: "hedge"}, map[string]int64{"deliver": 1, "continue": 1}, fsm.RuleDeliverFinalResponse},
		{"the hedge delivers, the original lost after", []hook{
			started(1, false), started(2, true), {what: 'R'}, reported(2, true, delivered), reported(1, false, besideOther),
		}, map[int]string{1: "original", 2: "hedge"}, map[string]int64{"deliver": 1, "continue": 1}, fsm.RuleDeliverFinalResponse},
		{"the original delivers, the hedge lost after", []hook{
			started(1, false), started(2, true), {what: 'R'}, reported(1, false, delivered), reported(2, true, besideOther),
		}, map[int]string{1: "original", 2: "hedge"}, map[string]int64{"deliver": 1, "continue": 1}, fsm.RuleDeliverFinalResponse},
		{"the original delivers without a body, the hedge lost after OnResponse", []hook{
			started(1, false), started(2, true), reported(1, false, delivered), {what: 'R'}, reported(2, true, besideOther),
		}, map[int]string{1: "original", 2: "hedge"}, map[string]int64{"deliver": 1, "continue": 1}, fsm.RuleDeliverFinalResponse},
		{"the original delivers without a body, the hedge lost before OnResponse", []hook{
			started(1, false), started(2, true), reported(1, false, delivered), reported(2, true, besideOther), {what: 'R'},
		}, map[int]string{1: "original", 2: "hedge"}, map[string]int64{"deliver": 1, "continue": 1}, fsm.RuleDeliverFinalResponse},
		{"the hedge's 503 is retried, the retry fails, the original lost after OnError", []hook{
			started(1, false), started(2, true), reported(2, true, retried503),
			started(3, false), reported(3, false, failed), {what: 'E'}, reported(1, false, besideOther),
		}, map[int]string{1: "original", 2: "hedge", 3: "retry"}, map[string]int64{"retry": 1, "fail": 1, "continue": 1}, fsm.RuleAmbiguousNotIdempotent},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := record(t)
			o := r.in.Observer(replaysafe.Observer{})
			req, _ := http.NewRequest("GET", "http://example.test/h", nil)
			o.OnRequest(req)
			for i, h := range c.hooks {
				switch h.what {
				case 's':
					o.OnAttemptStart(replaysafe.AttemptStart{Request: req, Number: h.number, Hedge: h.hedge})
				case 'r':
					o.OnAttempt(replaysafe.AttemptReport{Request: req, Number: h.number, Hedge: h.hedge, Call: h.call})
				case 'R':
					o.OnResponse(req, &http.Response{StatusCode: 200})
				case 'E':
					o.OnError(req, &replaysafe.Error{Rule: failed.Rule})
				}
				if calls, _ := r.ended("/h"); i < len(c.hooks)-1 && len(calls) != 0 {
					t.Fatalf("the call span ended at hook %d of %d", i+1, len(c.hooks))
				}
			}
			calls, attempts := r.ended("/h")
			if len(calls) != 1 || len(attempts) != len(c.kinds) {
				t.Fatalf("%d call spans and %d attempt spans, want 1 and %d", len(calls), len(attempts), len(c.kinds))
			}
			call := calls[0]
			if last := r.spans.Ended()[len(r.spans.Ended())-1]; last.SpanContext().SpanID() != call.SpanContext().SpanID() {
				t.Errorf("the call span ended before %q", last.Name())
			}
			wantAttrs(t, "call", call, map[string]any{"replaysafe.rule": c.rule.ID(), "replaysafe.attempts": int64(len(c.kinds))})
			for _, a := range attempts {
				n := int(attr(a.Attributes(), "http.request.resend_count").AsInt64()) + 1
				kind := c.kinds[n]
				if a.Parent().SpanID() != call.SpanContext().SpanID() || a.EndTime().After(call.EndTime()) {
					t.Errorf("attempt %d: not a child of the call span, or ends after it", n)
				}
				want := map[string]any{"replaysafe.attempt": kind}
				if kind == "hedge" {
					want["replaysafe.resend_rule"] = fsm.RuleHedge.ID()
				}
				wantAttrs(t, fmt.Sprintf("attempt %d", n), a, want)
			}
			for _, kind := range c.kinds {
				wantSum(t, r, 1, "http.client.request.duration", attribute.String("replaysafe.attempt", kind))
			}
			for oc, n := range c.outcomes {
				wantSum(t, r, n, "replaysafe.client.attempts", attribute.String("replaysafe.outcome", oc))
			}
			wantSum(t, r, int64(len(c.kinds)), "replaysafe.client.attempts")
			wantSum(t, r, 1, "replaysafe.client.attempts", hedge)
			wantSum(t, r, 1, "replaysafe.client.hedges", attribute.String("server.address", "example.test"))
			wantSum(t, r, 0, "replaysafe.client.resends")
			// The call is forgotten: a report of its request is
			// nobody's.
			o.OnAttempt(replaysafe.AttemptReport{Request: req, Number: 9, Call: besideOther})
			if _, after := r.ended("/h"); len(after) != len(attempts) {
				t.Errorf("a report after the call's end made a span: the call was kept")
			}
		})
	}
}

// stallFirst is an origin whose first copy of each path stalls until
// its client goes (at most 10 s) and whose later copies answer at once,
// so that each call is answered by a hedge of it whatever the machine's
// speed. It counts the copies it received, by path.
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

func (s *stallFirst) received(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[path]
}

// TestHedgeNetwork: GETs through a hedging Transport to an origin on
// 127.0.0.1 that stalls each request's first copy: each call span has
// one child span per copy the origin received, each with its own start
// (the hedge's after the original's) and the hedge's of kind hedge, and
// ends after them; the attempts counted equal the copies received, those
// of kind hedge and the hedges counter the copies beyond one per call,
// and no resend is counted.
func TestHedgeNetwork(t *testing.T) {
	origin := &stallFirst{seen: map[string]int{}}
	srv := httptest.NewServer(origin)
	defer srv.Close()
	r := record(t)
	tr := r.transport(t, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, Hedge: 20 * time.Millisecond, MaxHedges: 1}})
	defer tr.CloseIdleConnections()
	const calls = 4
	for i := range calls {
		if code, err := roundTrip(t, tr, "GET", fmt.Sprintf("%s/h%d", srv.URL, i), ""); err != nil || code != 200 {
			t.Fatalf("GET /h%d: %d %v", i, code, err)
		}
	}
	received := 0
	for i := range calls {
		path := fmt.Sprintf("/h%d", i)
		// The loser is reported once its connection is closed, maybe
		// after the call returned; the call span ends then.
		var spans, attempts []sdktrace.ReadOnlySpan
		for range 500 {
			if spans, attempts = r.ended(path); len(spans) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		n := origin.received(path)
		received += n
		if len(spans) != 1 || len(attempts) != n || n != 2 {
			t.Fatalf("%s: %d call spans, %d attempt spans, %d copies received; want 1, one per copy, and 2", path, len(spans), len(attempts), n)
		}
		call := spans[0]
		kinds := map[string]sdktrace.ReadOnlySpan{}
		for _, a := range attempts {
			kinds[attr(a.Attributes(), "replaysafe.attempt").AsString()] = a
			if a.Parent().SpanID() != call.SpanContext().SpanID() {
				t.Errorf("%s: an attempt span is not a child of the call span", path)
			}
			if a.StartTime().Before(call.StartTime()) || a.EndTime().After(call.EndTime()) {
				t.Errorf("%s: attempt [%v, %v] outside the call [%v, %v]", path, a.StartTime(), a.EndTime(), call.StartTime(), call.EndTime())
			}
		}
		orig, h := kinds["original"], kinds["hedge"]
		if orig == nil || h == nil {
			t.Fatalf("%s: attempt kinds %v, want an original and a hedge", path, kinds)
		}
		if !h.StartTime().After(orig.StartTime()) {
			t.Errorf("%s: the hedge's span starts at %v, the original's at %v", path, h.StartTime(), orig.StartTime())
		}
		wantAttrs(t, path+" hedge", h, map[string]any{"replaysafe.resend_rule": "RS29", "http.request.resend_count": int64(1)})
		wantAttrs(t, path+" call", call, map[string]any{"replaysafe.attempts": int64(2), "replaysafe.rule": "RS02", "http.response.status_code": int64(200)})
	}
	hedges := int64(received - calls)
	wantSum(t, r, int64(received), "replaysafe.client.attempts")
	wantSum(t, r, hedges, "replaysafe.client.attempts", hedge)
	wantSum(t, r, calls, "replaysafe.client.attempts", attribute.String("replaysafe.outcome", "continue"), rule(fsm.RuleHedgeCopyFailed))
	wantSum(t, r, hedges, "replaysafe.client.hedges")
	wantSum(t, r, int64(received), "http.client.request.duration")
	wantSum(t, r, hedges, "http.client.request.duration", hedge)
	wantSum(t, r, 0, "replaysafe.client.resends")
	wantSum(t, r, 0, "replaysafe.client.retries")
	wantSum(t, r, 0, "replaysafe.client.failures")
}
